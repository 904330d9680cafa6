#!/bin/sh
# The price of each limit (issue 26): callgrind's instructions for an
# empty ml_run, an empty ml_task_run slice, and a trip by an allocation
# limit and by a held limit (an ml_run whose JUMP task trips at its first
# sample: the call, the tripping allocation, the frame walk, the jump and
# the return).  Each count is the difference of two runs of M1 and M2
# calls, over M2 - M1, so that start-up (and the first trip's one-time
# work) cancels.  `make bench` runs it after run-bench.sh;
# docs/performance.md explains the numbers.
#
# Environment: ML_BENCH (bench/ml-bench), VALGRIND (empty or missing:
# skipped).
set -eu

: "${ML_BENCH:?}"
VALGRIND=${VALGRIND-}

if [ -z "$VALGRIND" ] || ! "$VALGRIND" --version >/dev/null 2>&1; then
	echo "bench: valgrind not found: skipping the price of each limit" >&2
	exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-limits.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# cg ARGS...: callgrind's total Ir for one run of ml-bench.  The soname
# synonym keeps valgrind from replacing our malloc with its own.
cg() {
	if ! "$VALGRIND" --tool=callgrind \
	    --soname-synonyms=somalloc=nouserintercepts \
	    --callgrind-out-file="$tmp/cg.out" "$ML_BENCH" "$@" \
	    >/dev/null 2>"$tmp/cg.err"; then
		cat "$tmp/cg.err" >&2
		echo "bench: callgrind failed: $*" >&2
		exit 1
	fi
	awk '/^summary:/ { print $2 }' "$tmp/cg.out"
}

# per NAME M1 M2 ARGS-BEFORE-M... : Ir per call.
per() {
	m1=$1 m2=$2
	shift 2
	a=$(cg "$@" "$m1" 1)
	b=$(cg "$@" "$m2" 1)
	echo "$a $b" | awk -v m=$((m2 - m1)) '{ printf "%.1f\n", ($2 - $1) / m }'
}

# trips take no REPS argument.
pertrip() {
	m1=$1 m2=$2 kind=$3
	a=$(cg trip "$kind" "$m1")
	b=$(cg trip "$kind" "$m2")
	echo "$a $b" | awk -v m=$((m2 - m1)) '{ printf "%.1f\n", ($2 - $1) / m }'
}

run=$(per 10000 110000 run)
slice=$(per 10000 110000 slice)
ta=$(pertrip 20 220 alloc)
th=$(pertrip 20 220 held)

printf '\n%-42s %10s  %s\n' "the price of each limit (issue 26)" "Ir" "target"
printf '%-42s %10s  %s\n' "empty ml_run" "$run" \
    "$(echo "$run" | awk '{ print "<= 176: " ($1 <= 176 ? "met" : "MISSED") }')"
printf '%-42s %10s  %s\n' "empty slice" "$slice" \
    "$(echo "$slice" | awk '{ print "<= 154: " ($1 <= 154 ? "met" : "MISSED") }')"
printf '%-42s %10s  %s\n' "trip: allocation limit" "$ta" "-"
printf '%-42s %10s  %s\n' "trip: held limit" "$th" \
    "$(echo "$th $ta" | awk '{ r = $1 / $2; printf "<= 1.2x the allocation trip: %.2fx %s", r, (r <= 1.2 ? "met" : "MISSED") }')"
