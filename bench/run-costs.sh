#!/bin/sh
# Costs that `make check` must not judge (its speed is valgrind's, a
# sanitizer's or a loaded machine's), counted here in instructions
# (callgrind: exact and repeatable whatever the load); `make bench` runs it
# and docs/performance.md ("Stacks") gives the figures and their history.
#
#  - a refused malloc(64) at 5 and at 200 frames deep, under run mode's
#    --alloc-limit 1 and in an ml_run task with fail delivery: the walk
#    that asks whether a loader frame called malloc stops at the first user
#    frame, so the cost does not grow with the depth (it was ~20 times
#    dearer at 200 frames; perl, which allocates again after each failure
#    on an ever deeper stack, spun for 22 s).  Target: deep / shallow < 1.5.
#  - a captured stack at every allocation (--interval 1 with a profile) at
#    5 and 45 frames deep: the cost of one captured frame, with the frame
#    rules cached (x86-64).  Target: < 200 Ir a frame, 88 now (_Unwind_Backtrace
#    alone costs about 1 800).
#  - `memlimits bounds`: the tables are closed forms and bisections, not
#    scans over k.  Target: < 10^7 Ir each.
#
# Environment: RETRY (tests/cli/test-stacks-retry), MEMLIMITS_CMD,
# MEMLIMITS_LIB (set by make bench); VALGRIND (empty: nothing is counted).
set -eu
: "${RETRY:?}" "${MEMLIMITS_CMD:?}" "${MEMLIMITS_LIB:?}"
VALGRIND=${VALGRIND-}
if [ -z "$VALGRIND" ] || ! "$VALGRIND" --version >/dev/null 2>&1; then
	echo "bench: valgrind not found: no instruction counts of refusals," \
		"captures and bounds" >&2
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-costs.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_HELD_LIMIT \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_REPORT MEMLIMITS_PROFILE \
	MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT MEMLIMITS_DELIVERY
export MEMLIMITS_SEED=1

# ir ENV ARGS...: callgrind's total Ir for the run of ARGS with the
# variables ENV ("" for none) set (the soname synonym keeps valgrind from
# replacing the malloc the program calls, ours).
ir() {
	e=$1
	shift
	if ! env $e "$VALGRIND" --tool=callgrind \
		--soname-synonyms=somalloc=nouserintercepts \
		--callgrind-out-file="$tmp/cg.out" "$@" >"$tmp/out" 2>"$tmp/err"; then
		cat "$tmp/out" "$tmp/err" >&2
		echo "bench: callgrind failed: $*" >&2
		exit 1
	fi
	awk '/^summary:/ { print $2 }' "$tmp/cg.out"
}

# per_try ENV DEPTH [MODE]: Ir per malloc(64) at DEPTH frames, from runs of
# N1 and N2 tries at that depth (twice: the program's two depths), so that
# start-up and the spent budget cancel.  ENV: variables for the run (the
# library is the program's own, linked).
N1=1000
N2=3000
per_try() {
	env=$1 d=$2
	shift 2
	a=$(ir "$env" "$RETRY" "$d" "$d" $N1 "$@")
	b=$(ir "$env" "$RETRY" "$d" "$d" $N2 "$@")
	echo "$a $b" | awk -v n=$((2 * (N2 - N1))) '{ printf "%.0f", ($2 - $1) / n }'
}

printf '\n%-44s %10s %10s %8s  %s\n' "refused malloc(64), Ir" "5 frames" \
	"200 frames" "ratio" "target < 1.5"
for mode in run task; do
	case $mode in
	run) e=MEMLIMITS_ALLOC_LIMIT=1 m= what="run --alloc-limit 1" ;;
	task) e=MEMLIMITS_SEED=1 m=task what="ml_run task, fail delivery" ;;
	esac
	s=$(per_try "$e" 5 $m)
	d=$(per_try "$e" 200 $m)
	awk -v w="$what" -v s="$s" -v d="$d" 'BEGIN { r = d / s
		printf "%-44s %10d %10d %7.2fx  %s\n", w, s, d, r,
		    r < 1.5 ? "met" : "MISSED" }'
done

# Captures: every allocation sampled and its stack captured.
e="MEMLIMITS_HEAP_LIMIT=1073741824 MEMLIMITS_SAMPLE_INTERVAL=1 MEMLIMITS_PROFILE=$tmp/prof"
s=$(per_try "$e" 5 capture)
d=$(per_try "$e" 45 capture)
printf '\n%-44s %10s %10s %8s  %s\n' "captured stack at every malloc(64), Ir" \
	"5 frames" "45 frames" "a frame" "target < 200"
awk -v s="$s" -v d="$d" -v arch="$(uname -m)" 'BEGIN { f = (d - s) / 40
	v = f < 200 ? "met" : "MISSED"
	if (arch != "x86_64")
		v = "- (cached rules: x86-64 only)"
	printf "%-44s %10d %10d %8.1f  %s\n", "--interval 1 --profile (" arch ")",
	    s, d, f, v }'

# memlimits bounds: the whole command, start-up included.
printf '\n%-44s %10s  %s\n' "memlimits bounds, Ir" "total" "target < 10^7"
for args in "--limit 64MiB" "--limit 60TiB" "--safe 1GiB --target 1e-9" \
	"--interval 1 --safe 1TiB --target 1e-9"; do
	n=$(ir "" "$MEMLIMITS_CMD" bounds $args)
	awk -v w="$args" -v n="$n" 'BEGIN {
		printf "%-44s %10d  %s\n", w, n, n < 1e7 ? "met" : "MISSED" }'
done
