#!/bin/sh
# Drives bench/ml-bench and bench/glibc-bench (bench/bench.c) and prints
# one table; `make bench` runs it.  docs/performance.md explains it.
#
# Environment: ML_BENCH, GLIBC_BENCH, ML_LIB (set by make bench);
# VALGRIND (empty: the instruction counts are skipped); BENCH_ROUNDS
# (wall-clock rounds, default 101), BENCH_WALL_N (pairs per timed loop).
set -eu

: "${ML_BENCH:?}" "${GLIBC_BENCH:?}" "${ML_LIB:?}"
VALGRIND=${VALGRIND-}
ROUNDS=${BENCH_ROUNDS:-101}

# Instruction counts: two loop lengths, differenced, so start-up cancels.
N1=100000
N2=1100000
SLOW_N=100000    # pairs of the slow-path loop under callgrind
RUN_M1=10000     # ml_run calls under callgrind
RUN_M2=110000
# Wall clock: pairs per timed loop, timed loops per process (best kept).
# Short loops (about a millisecond), so that on a loaded machine some of
# them run without being descheduled.
WALL_N=${BENCH_WALL_N:-50000}
WALL_REPS=9

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

if [ -n "$VALGRIND" ] && ! "$VALGRIND" --version >/dev/null 2>&1; then
	VALGRIND=
fi
if [ -z "$VALGRIND" ]; then
	echo "bench: valgrind not found: skipping the instruction counts" >&2
fi

# run CONFIG ARGS...: the workload of one configuration, with or without
# the library.  "preload" is the glibc binary with LD_PRELOAD.
run() {
	cfg=$1
	shift
	case $cfg in
	glibc) "$GLIBC_BENCH" "$@" ;;
	preload) LD_PRELOAD=$ML_LIB "$GLIBC_BENCH" "$@" ;;
	*) "$ML_BENCH" "$@" ;;
	esac
}

# cg CONFIG ARGS...: callgrind's total Ir for the run.  The soname
# synonym keeps valgrind from replacing the malloc the program calls
# (ours) with its own; callgrind itself replaces none, but a tool that
# did would otherwise measure nothing of ours.  The call count of
# ml__alloc_begin goes to $tmp/slowcalls.
cg() {
	cfg=$1
	shift
	case $cfg in
	glibc) set -- "$GLIBC_BENCH" "$@" ;;
	preload) set -- "$GLIBC_BENCH" "$@" ;;
	*) set -- "$ML_BENCH" "$@" ;;
	esac
	pre=
	[ "$cfg" = preload ] && pre=$ML_LIB
	if ! LD_PRELOAD=$pre "$VALGRIND" --tool=callgrind \
	    --soname-synonyms=somalloc=nouserintercepts \
	    --compress-strings=no --compress-pos=no \
	    --callgrind-out-file="$tmp/cg.out" "$@" \
	    >"$tmp/cg.stdout" 2>"$tmp/cg.err"; then
		cat "$tmp/cg.err" >&2
		echo "bench: callgrind failed: $*" >&2
		exit 1
	fi
	awk '/^cfn=ml__alloc_begin$/ { getline; split($1, a, "=");
	     n += a[2] } END { print n + 0 }' "$tmp/cg.out" >"$tmp/slowcalls"
	awk '/^summary:/ { print $2 }' "$tmp/cg.out"
}

# Instructions per pair for each configuration.
for cfg in glibc preload idle task global held; do
	if [ -n "$VALGRIND" ]; then
		wl=idle
		case $cfg in task | global | held) wl=$cfg ;; esac
		a=$(cg $cfg pairs $wl $N1 1)
		b=$(cg $cfg pairs $wl $N2 1)
		echo "$cfg $a $b" | awk -v n=$((N2 - N1)) \
		    '{ printf "%s %.2f\n", $1, ($3 - $2) / n }'
	else
		echo "$cfg n/a"
	fi
done >"$tmp/ir"

# Slow path under callgrind: the same loop inside the same tasks at S = 1
# and S = 2^40 (no sample); the difference over the difference in slow-path
# calls is the cost of one slow path.
# Rows: 1 and 3 tasks; h: 1 task with held tracking (each sampled block
# recorded and found again at its free); k: the same with stack capture.
for row in 1:slow:1 3:slow:3 h:slowheld:1 k:slowstack:1; do
	key=${row%%:*}
	mode=${row#*:}
	depth=${mode#*:}
	mode=${mode%:*}
	if [ -n "$VALGRIND" ]; then
		a=$(cg idle $mode $depth 1 $SLOW_N 1)
		ca=$(cat "$tmp/slowcalls")
		b=$(cg idle $mode $depth 1099511627776 $SLOW_N 1)
		cb=$(cat "$tmp/slowcalls")
		echo "$key $a $ca $b $cb" | awk -v n=$SLOW_N \
		    '{ printf "%s %.1f %.4f\n", $1, ($2 - $4) / ($3 - $5),
		       ($3 - $5) / n }'
	else
		echo "$key n/a n/a"
	fi
done >"$tmp/slow-ir"

# Over each allocator (issue 15): Ir per pair for the allocator alone, the
# library idle over it (preloaded before it), and a task with an
# allocation limit over it; and (issue 26) run mode's heap limit over it
# (MEMLIMITS_HEAP_LIMIT: the heap meter), against idle over it.
cgp() { # cgp PRELOAD BINARY ARGS...: callgrind's total Ir
	pre=$1
	shift
	LD_PRELOAD=$pre MEMLIMITS_HEAP_LIMIT=${HEAP-} "$VALGRIND" --tool=callgrind \
	    --soname-synonyms=somalloc=nouserintercepts \
	    --callgrind-out-file="$tmp/cgp.out" "$@" >/dev/null 2>"$tmp/cgp.err" ||
		{ cat "$tmp/cgp.err" >&2; echo "bench: callgrind failed: $*" >&2; exit 1; }
	awk '/^summary:/ { print $2 }' "$tmp/cgp.out"
}
libdir=$(dirname "$(/sbin/ldconfig -p 2>/dev/null |
	sed -n 's/^[[:space:]]*libc.so.6 (.*) => //p' | head -1)")
for so in libjemalloc.so.2 libtcmalloc_minimal.so.4 libmimalloc.so.2; do
	lib=$libdir/$so
	if [ -z "$VALGRIND" ] || ! [ -r "$lib" ]; then
		echo "$so n/a n/a n/a n/a"
		continue
	fi
	r=""
	for cfg in alone idle task heap; do
		HEAP=
		case $cfg in
		alone) pre=$lib bin=$GLIBC_BENCH wl=idle ;;
		idle) pre="$ML_LIB $lib" bin=$GLIBC_BENCH wl=idle ;;
		task) pre="$ML_LIB $lib" bin=$ML_BENCH wl=task ;;
		heap) pre="$ML_LIB $lib" bin=$GLIBC_BENCH wl=idle HEAP=64G ;;
		esac
		a=$(cgp "$pre" "$bin" pairs $wl $N1 1)
		b=$(cgp "$pre" "$bin" pairs $wl $N2 1)
		r="$r $(echo "$a $b" | awk -v n=$((N2 - N1)) '{ printf "%.2f", ($2 - $1) / n }')"
	done
	echo "$so$r"
done >"$tmp/allocs"
# Run mode's heap limit over glibc, against idle (preloaded): the same
# column for glibc (issue 26: at most +20).
if [ -n "$VALGRIND" ]; then
	r=""
	for HEAP in "" 64G; do
		a=$(cgp "$ML_LIB" "$GLIBC_BENCH" pairs idle $N1 1)
		b=$(cgp "$ML_LIB" "$GLIBC_BENCH" pairs idle $N2 1)
		r="$r $(echo "$a $b" | awk -v n=$((N2 - N1)) '{ printf "%.2f", ($2 - $1) / n }')"
	done
	echo "glibc$r"
else
	echo "glibc n/a n/a"
fi >"$tmp/heap-glibc"
HEAP=

# Exact budgets and a task's own interval (issue 16): Ir per pair in an
# exact task (the fast path unchanged), in a task at a tenth of the
# process's interval, and idle again after one; slow paths per 10^6 pairs.
for cfg in exact interval after; do
	if [ -n "$VALGRIND" ]; then
		a=$(cg idle pairs $cfg $N1 1)
		ca=$(cat "$tmp/slowcalls")
		b=$(cg idle pairs $cfg $N2 1)
		cb=$(cat "$tmp/slowcalls")
		echo "$cfg $a $ca $b $cb" | awk -v n=$((N2 - N1)) \
		    '{ printf "%s %.2f %.0f\n", $1, ($4 - $2) / n,
		       ($5 - $3) / n * 1e6 }'
	else
		echo "$cfg n/a n/a"
	fi
done >"$tmp/precision"

# Memory per tracked block: the resident growth while a task holds 10^6
# blocks of 64 bytes, all tracked (S = 1) less none tracked (S = 2^40).
a=$(run idle heldmem 1 1000000)
b=$(run idle heldmem 1099511627776 1000000)
echo "$a $b" | awk '{ printf "%.1f\n", ($1 - $2) / 1000000 }' >"$tmp/heldmem"

if [ -n "$VALGRIND" ]; then
	a=$(cg idle run $RUN_M1 1)
	b=$(cg idle run $RUN_M2 1)
	echo "$a $b" | awk -v m=$((RUN_M2 - RUN_M1)) \
	    '{ printf "%.1f\n", ($2 - $1) / m }' >"$tmp/run-ir"
	a=$(cg idle slice $RUN_M1 1)
	b=$(cg idle slice $RUN_M2 1)
	echo "$a $b" | awk -v m=$((RUN_M2 - RUN_M1)) \
	    '{ printf "%.1f\n", ($2 - $1) / m }' >"$tmp/slice-ir"
else
	echo n/a >"$tmp/run-ir"
	echo n/a >"$tmp/slice-ir"
fi

# Wall clock: every round runs every configuration once, in an order
# rotated each round, so drifts in machine load hit all of them alike.
echo "bench: wall clock, $ROUNDS rounds..." >&2
set -- glibc preload idle task global held
r=0
while [ $r -lt "$ROUNDS" ]; do
	i=0
	while [ $i -lt $r ]; do # rotate by one per round
		c=$1
		shift
		set -- "$@" "$c"
		i=$((i + 1))
	done
	for cfg in "$@"; do
		wl=idle
		case $cfg in task | global | held) wl=$cfg ;; esac
		echo "$r $cfg $(run "$cfg" pairs "$wl" "$WALL_N" "$WALL_REPS")"
	done
	set -- glibc preload idle task global held
	r=$((r + 1))
done >"$tmp/wall"

# Slow path and ml_run in wall clock: the S = 1 / S = 2^40 pair is
# interleaved inside each process; a few processes, median.
i=0
while [ $i -lt 5 ]; do
	for depth in 1 3; do
		echo "$depth $(run idle slowcmp $depth 20000 31)"
	done
	echo "run $(run idle run 20000 21)"
	echo "slice $(run idle slice 20000 21)"
	i=$((i + 1))
done >"$tmp/slow-wall"

awk -v cores="$(nproc 2>/dev/null || echo '?')" -v rounds="$ROUNDS" '
function median(arr, n,    i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) {
			t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t
		}
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
function fmt(x, f) { return x == "n/a" ? "n/a" : sprintf(f, x) }
FILENAME ~ /\/ir$/ { ir[$1] = $2; next }
FILENAME ~ /slow-ir$/ { sir[$1] = $2; shits[$1] = $3; next }
FILENAME ~ /run-ir$/ { runir = $1; next }
FILENAME ~ /slice-ir$/ { sliceir = $1; next }
FILENAME ~ /heldmem$/ { heldmem = $1; next }
FILENAME ~ /allocs$/ { alloc[++nalloc] = $0; next }
FILENAME ~ /heap-glibc$/ { split($0, hg, " "); next }
FILENAME ~ /precision$/ { pir[$1] = $2; pslow[$1] = $3; next }
FILENAME ~ /\/wall$/ { ns[$1, $2] = $3; next }
FILENAME ~ /slow-wall$/ {
	if ($1 == "run") { rn[++nrun] = $2; next }
	if ($1 == "slice") { sl[++nsl] = $2; next }
	# (ns/pair at S = 1 - ns/pair without samples) / slow paths per
	# pair (1 - 1/e for 1-byte blocks at S = 1), and per sample.
	d = $2 - $3
	sp[$1, ++nsp[$1]] = d / (1 - exp(-1))
	ss[$1, nsp[$1]] = d / $4
	next
}
END {
	split("glibc preload idle task global held", cfgs, " ")
	name["glibc"] = "plain glibc (no library)"
	name["preload"] = "idle, LD_PRELOAD"
	name["idle"] = "idle, linked"
	name["task"] = "task: alloc limit + token"
	name["global"] = "task + global limit"
	name["held"] = "task + held tracking"
	tir["glibc"] = "-"; tir["preload"] = "<= +8"; tir["idle"] = "<= +8"
	tir["task"] = "<= +10"; tir["global"] = "<= +16"
	lim["preload"] = 8; lim["idle"] = 8; lim["task"] = 10
	lim["global"] = 16
	# Held tracking: at most 4 more than the task alone (issue 14).
	tir["held"] = "task+4"
	lim["held"] = ir["task"] == "n/a" ? 0 : ir["task"] - ir["glibc"] + 4
	for (k = 1; k <= 6; k++) {
		c = cfgs[k]
		n = 0
		for (r = 0; r < rounds; r++) {
			v[++n] = ns[r, c]
			q[n] = ns[r, c] / ns[r, "glibc"]
		}
		mns[c] = median(v, n)
		mratio[c] = median(q, n) # sorts q
		lo[c] = q[int((n + 3) / 4)]
		hi[c] = q[n + 1 - int((n + 3) / 4)]
	}
	printf "\nmemlimits benchmark: malloc/free pairs of 16-144 bytes " \
	    "(%d cores; wall clock: medians of %d interleaved rounds)\n\n",
	    cores, rounds
	printf "%-27s %8s %7s %7s %8s %6s %11s %8s  %s\n", "configuration",
	    "Ir/pair", "+Ir", "target", "ns/pair", "ratio", "ratio IQR",
	    "target", "verdict"
	for (k = 1; k <= 6; k++) {
		c = cfgs[k]
		inc = ir[c] == "n/a" ? "n/a" : ir[c] - ir["glibc"]
		verdict = ""
		if (c != "glibc") {
			ok_ir = inc == "n/a" ? "?" : (inc <= lim[c] ? "met" : "MISSED")
			ok_w = ""
			if (c == "idle" || c == "preload")
				ok_w = mratio[c] <= 1.15 ? ", wall met" : ", wall MISSED"
			verdict = "Ir " ok_ir ok_w
		}
		printf "%-27s %8s %7s %7s %8.2f %5.2fx %11s %8s  %s\n",
		    name[c], fmt(ir[c], "%.2f"),
		    c == "glibc" ? "-" : fmt(inc, "%+.2f"), tir[c], mns[c],
		    mratio[c], sprintf("%.2f-%.2f", lo[c], hi[c]),
		    (c == "idle" || c == "preload") ? "<= 1.15x" : "-", verdict
	}
	printf "\n%-42s %10s %10s %10s  %s\n", "slow path and ml_run", "Ir",
	    "ns", "ns/sample", "target"
	for (d = 1; d <= 3; d += 2) {
		n = 0; m = 0
		for (i = 1; i <= nsp[d]; i++) { a[++n] = sp[d, i]; b[++m] = ss[d, i] }
		ns1 = median(a, n); ns2 = median(b, m)
		printf "%-42s %10s %10.1f %10.1f  %s\n",
		    sprintf("one slow path, %d task%s%s", d, d > 1 ? "s" : "",
		    d > 1 ? " + global limit" : ""),
		    fmt(sir[d], "%.1f"), ns1, ns2,
		    "< 200 ns: " (ns1 < 200 ? "met" : "MISSED")
	}
	printf "%-42s %10s %10s %10s  %s\n",
	    "one slow path, 1 task + held tracking", fmt(sir["h"], "%.1f"),
	    "-", "-", "-"
	printf "%-42s %10s %10s %10s  %s\n",
	    "  ... + stack capture", fmt(sir["k"], "%.1f"), "-", "-", "-"
	printf "%-42s %10s %10.1f %10s  %s\n", "ml_run of an empty task",
	    fmt(runir, "%.1f"), median(rn, nrun), "-", "-"
	slratio = (sliceir != "n/a" && runir > 0) ? sliceir / runir : 0
	printf "%-42s %10s %10.1f %10s  %s\n", "ml_task_run of an empty slice",
	    fmt(sliceir, "%.1f"), median(sl, nsl), "-",
	    sliceir == "n/a" ? "-" : sprintf("<= 2x ml_run: %.2fx %s", slratio,
	    slratio <= 2 ? "met" : "MISSED")
	if (shits[1] != "n/a" && shits[1] != "")
		printf "\n(slow paths per 1-byte block at S = 1: %.4f measured," \
		    " %.4f expected)\n", shits[1], 1 - exp(-1)
	printf "\n%-27s %8s %8s %8s %8s %8s  %s\n", "over another allocator",
	    "alone", "idle", "+Ir", "task", "+Ir", "idle target"
	for (k = 1; k <= nalloc; k++) {
		split(alloc[k], f, " ")
		if (f[2] == "n/a") {
			printf "%-27s %8s\n", f[1], "n/a (not installed)"
			continue
		}
		printf "%-27s %8.2f %8.2f %+8.2f %8.2f %+8.2f  <= +8: %s\n",
		    f[1], f[2], f[3], f[3] - f[2], f[4], f[4] - f[2],
		    (f[3] - f[2] <= 8 ? "met" : "MISSED")
	}
	# Issue 26: the heap limit (the heap meter of run mode) over idle on the
	# same allocator.
	printf "\n%-27s %8s %8s %8s  %s\n", "heap limit (issue 26)", "idle",
	    "heap", "+Ir", "target"
	for (k = 1; k <= nalloc; k++) {
		split(alloc[k], f, " ")
		if (f[5] == "n/a" || f[5] == "")
			continue
		printf "%-27s %8.2f %8.2f %+8.2f  <= +25: %s\n", f[1], f[3],
		    f[5], f[5] - f[3], (f[5] - f[3] <= 25 ? "met" : "MISSED")
	}
	if (hg[2] != "n/a" && hg[2] != "")
		printf "%-27s %8.2f %8.2f %+8.2f  <= +20: %s\n", "glibc",
		    hg[2], hg[3], hg[3] - hg[2],
		    (hg[3] - hg[2] <= 20 ? "met" : "MISSED")
	printf "\n%-42s %10s %10s  %s\n", "precision (issue 16)", "Ir/pair",
	    "+Ir", "slow paths per 10^6 pairs"
	pname["exact"] = "exact budget (2^50 bytes)"
	pname["interval"] = "task at interval S/10"
	pname["after"] = "idle, after such a task"
	split("exact interval after", pk, " ")
	for (i = 1; i <= 3; i++) {
		c = pk[i]
		base = c == "after" ? ir["idle"] : ir["task"]
		what = c == "after" ? " (idle)" : " (task)"
		d = "n/a"
		if (pir[c] != "n/a" && base != "n/a")
			d = sprintf("%+.2f", pir[c] - base) what
		printf "%-42s %10s %10s  %s\n", pname[c], fmt(pir[c], "%.2f"),
		    d, pslow[c]
	}
	printf "\nheld tracking: %.1f bytes of memory per tracked block " \
	    "(10^6 blocks held; a 56-byte record in a table kept at most " \
	    "half full)\n", heldmem
}' "$tmp/ir" "$tmp/slow-ir" "$tmp/run-ir" "$tmp/slice-ir" "$tmp/wall" \
	"$tmp/slow-wall" "$tmp/heldmem" "$tmp/allocs" "$tmp/precision" \
	"$tmp/heap-glibc"

# The price of held tracking (issue 26): Ir per pair of the same loop
# idle after a task object is gone (tracking off again), under a global
# limit set through the API with no task (the meter alone, as run mode),
# and in a task while a task object lives (the filter on every free);
# wall clock in interleaved rounds, as ratios to idle (or to the task).
# A block of its own, so that it merges apart from the table above.
if [ -n "$VALGRIND" ]; then
	for cfg in heldgone gidle; do
		a=$(cg idle pairs $cfg $N1 1)
		b=$(cg idle pairs $cfg $N2 1)
		echo "$cfg $a $b" | awk -v n=$((N2 - N1)) \
		    '{ printf "%s %.2f\n", $1, ($3 - $2) / n }'
	done >"$tmp/held-ir"
else
	printf 'heldgone n/a\ngidle n/a\n' >"$tmp/held-ir"
fi
r=0
while [ $r -lt $(((ROUNDS + 3) / 4)) ]; do
	for cfg in idle heldgone gidle task held; do
		echo "$r $cfg $(run idle pairs $cfg "$WALL_N" "$WALL_REPS")"
	done
	r=$((r + 1))
done >"$tmp/held-wall"
awk '
function median(arr, n,    i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) {
			t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t
		}
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
FILENAME ~ /\/ir$/ { ir[$1] = $2; next }
FILENAME ~ /held-ir$/ { ir[$1] = $2; next }
FILENAME ~ /held-wall$/ { ns[$1, $2] = $3; if ($1 + 1 > nr) nr = $1 + 1; next }
function row(c, base, what, target, lim,    k, n, q, inc, v) {
	n = 0
	for (k = 0; k < nr; k++)
		q[++n] = ns[k, c] / ns[k, base]
	inc = (ir[c] == "n/a" || ir[base] == "n/a") ? "n/a" : ir[c] - ir[base]
	v = inc == "n/a" ? "?" : (inc <= lim ? "met" : "MISSED")
	printf "%-44s %8s %9s %6.2fx  %-8s %s\n", what,
	    ir[c] == "n/a" ? "n/a" : sprintf("%.2f", ir[c]),
	    inc == "n/a" ? "n/a" : sprintf("%+.2f", inc), median(q, n),
	    target, "Ir " v
}
END {
	printf "\n%-44s %8s %9s %7s  %-8s %s\n", "held tracking (issue 26)",
	    "Ir/pair", "+Ir", "ratio", "target", "verdict"
	row("heldgone", "idle", "idle after the last task object (vs idle)",
	    "<= +1", 1)
	row("gidle", "idle", "API global limit, no task (vs idle)", "<= +20",
	    20)
	row("held", "task", "task + live task object (vs task)", "<= +4", 4)
}' "$tmp/ir" "$tmp/held-ir" "$tmp/held-wall"
