#!/bin/sh
# Shared budgets (issue 27; docs/shared.md): what being a member costs an
# allocation.  callgrind's instructions per malloc/free pair of
# bench/ml-bench's `pairs gidle` loop (a global limit set: the
# per-process heap meter runs) alone, and as a member of a shared budget
# (MEMLIMITS_SHARED, joined at start; a limit no run reaches).  Each count
# is the difference of two runs of M1 and M2 pairs, over M2 - M1, so that
# start-up cancels.  Goal: nothing on the fast path, at most +2 Ir per
# pair beyond the meter.  `make bench` runs it; docs/performance.md,
# "Shared budgets (issue 27)", has the figures.
#
# Then (first, as it needs no valgrind) the stop latency across processes
# and the overshoot at the stop: bench/shared-latency, 50 runs of two
# members of a 64 MiB budget (V holds 40 MiB in a global task, C's task
# crosses the limit), with FLAG and with JUMP delivery; latency from C's
# crossing allocation to V's task seen stopped (CLOCK_MONOTONIC), the
# overshoot as the total V reads at its stop minus the limit; and with V
# blocked in ppoll (issue 35: only the wake signal reaches it).  Then the
# time a member takes to allocate 256 MiB in 32 KiB blocks alone, with a
# slot beside 1022 idle members, and with no free slot beside 1023
# (issue 35: flat, no retry per fold).
#
# Environment: ML_BENCH (bench/ml-bench), SHARED_LATENCY
# (bench/shared-latency; empty or missing: skipped), VALGRIND (empty or
# missing: skipped).
set -eu
: "${ML_BENCH:?}"
VALGRIND=${VALGRIND-}
SHARED_LATENCY=${SHARED_LATENCY-}
if [ -n "$SHARED_LATENCY" ]; then
	printf '\n%-34s %6s %10s %10s %10s %10s\n' \
	    "stop across processes (issue 27)" "runs" "median us" "p99 us" \
	    "over MiB" "max MiB"
	for mode in flag jump wait; do
		# mode good failed median p99 over-median over-max latency-max
		"$SHARED_LATENCY" 50 $mode 64 40 | awk -v m="$mode" '{
			printf "%-34s %6s %10s %10s %10s %10s\n",
			    "64 MiB, 2 members, " (m == "wait" ? "V in ppoll" : m " delivery"),
			    $2 ($3 > 0 ? " (" $3 " failed)" : ""),
			    $4, $5, $6, $7 }'
	done
	# Issue 35: a member that found the table full allocates as one
	# with a slot (no claim retried per fold).
	"$SHARED_LATENCY" full | awk '{
		printf "\n%-44s %10s %10s %10s\n", "256 MiB in 32 KiB blocks (issue 35)",
		    "alone ms", "slot ms", "full ms"
		printf "%-44s %10s %10s %10s\n", "1024 slots, " $2 " idle members at most",
		    $3, $4, $5 }'
fi
if [ -z "$VALGRIND" ] || ! "$VALGRIND" --version >/dev/null 2>&1; then
	echo "bench: valgrind not found: skipping shared budgets" >&2
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-shared.XXXXXX")
name=bench.$$
trap 'rm -rf "$tmp"; rm -f "/dev/shm/memlimits.$(id -u).$name"' EXIT INT TERM
unset MEMLIMITS_SHARED MEMLIMITS_SHARED_TREE

# cg ARGS...: callgrind's total Ir for one run of ml-bench.
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
per() { # per M1 M2: Ir per pair of `pairs gidle`
	a=$(cg pairs gidle "$1" 1)
	b=$(cg pairs gidle "$2" 1)
	echo "$a $b" | awk -v m=$(($2 - $1)) '{ printf "%.2f\n", ($2 - $1) / m }'
}
alone=$(per 100000 1100000)
member=$(MEMLIMITS_SHARED=$name:100GiB per 100000 1100000)
printf '\n%-42s %10s  %s\n' "shared budgets (issue 27)" "Ir/pair" "target"
printf '%-42s %10s  %s\n' "per-process heap meter (global limit)" "$alone" "-"
printf '%-42s %10s  %s\n' "the same, a member of a shared budget" "$member" \
    "$(echo "$member $alone" | awk '{ d = $1 - $2; printf "<= +2: %+.2f %s", d, (d <= 2 ? "met" : "MISSED") }')"
