#!/bin/sh
# Drives bench/ml-bench and bench/glibc-bench (bench/bench.c) and prints
# `make bench`'s tables; docs/performance.md explains them.
#
# The first table (issue 26, "the price of each limit") has one row per
# line of ROWS below: each row is measured on the library at the "before"
# commit (BEFORE_LIB, built by bench/build-before.sh) and on this tree's
# (ML_LIB) in the same run, and names its base.  To add a row, add a line
# to ROWS (and, for a new workload, a case to setcfg and a mode to
# bench/bench.c).  The tables after it are this tree's library only.
#
# Environment: ML_BENCH, GLIBC_BENCH, ML_LIB (set by make bench);
# BEFORE_LIB (the before library's libmemlimits.so.0; empty: the before
# column reads "-"), BEFORE_NAME (its commit, for the heading); VALGRIND
# (empty: the instruction counts are skipped); CC_GCC (the gcc of the gcc
# rows; empty: skipped); BENCH_ROWS (see below); BENCH_ROUNDS (wall-clock
# rounds, default 21),
# BENCH_WALL_N (pairs per timed loop), BENCH_GCC_ROUNDS (default 5).
set -eu

: "${ML_BENCH:?}" "${GLIBC_BENCH:?}" "${ML_LIB:?}"
VALGRIND=${VALGRIND-}
BEFORE_LIB=${BEFORE_LIB-}
BEFORE_NAME=${BEFORE_NAME:-before}
CC_GCC=${CC_GCC-gcc}
ROUNDS=${BENCH_ROUNDS:-21}
GCC_ROUNDS=${BENCH_GCC_ROUNDS:-5}
HERE=$(cd "$(dirname "$0")" && pwd)

# ---- The rows (issue 26) -------------------------------------------------
# KEY | KIND | LOOP | CONFIG | BASE | GOAL | WHAT
#  pair:  Ir per malloc/free pair of CONFIG less BASE's (configurations:
#         setcfg), on the loop of 16..LOOP-byte blocks; GOAL +N: at most N.
#  call:  Ir per call of CONFIG's workload less BASE's ("-": none); GOAL N.
#  ratio: row CONFIG's figure over row BASE's; GOAL Nx: at most N.
#  gcc:   instructions of a gcc -O2 compile under CONFIG over BASE
#         (callgrind, a small input) and user time (the ~190 KB input);
#         GOAL +N%.
# A row's before and after are each measured against the same library's
# BASE; the goal is judged on the after column.  "-": no goal (a
# reference row).
ROWS='
idle      |pair |144 |idle      |glibc     |+8   |idle memlimits (linked)
idle4k    |pair |4096|idle      |glibc     |-    |idle memlimits, 16..4096-byte loop
heap      |pair |144 |heap      |preload   |+20  |heap limit (run mode), glibc
heap4k    |pair |4096|heap      |preload   |-    |heap limit (run mode), 16..4096
gapi      |pair |144 |gidle     |idle      |+20  |global limit by the API, no task
gapi4k    |pair |4096|gidle     |idle      |-    |global limit by the API, 16..4096
taskglob  |pair |144 |global    |glibc     |+26  |task + global limit
task      |pair |144 |task      |glibc     |+10  |task: alloc limit + token
held      |pair |144 |held      |task      |+4   |held tracking, alloc-limited task
objgone   |pair |144 |heldgone  |idle      |+1   |free after the last task object
je-idle   |pair |144 |idle_je   |alone_je  |+8   |idle memlimits over jemalloc
je-heap   |pair |144 |heap_je   |idle_je   |+25  |heap limit over jemalloc
tc-idle   |pair |144 |idle_tc   |alone_tc  |+8   |idle memlimits over tcmalloc
tc-heap   |pair |144 |heap_tc   |idle_tc   |+25  |heap limit over tcmalloc
mi-idle   |pair |144 |idle_mi   |alone_mi  |+8   |idle memlimits over mimalloc
mi-heap   |pair |144 |heap_mi   |idle_mi   |+25  |heap limit over mimalloc
run       |call |-   |run       |-         |176  |an empty ml_run, Ir a call
slice     |call |-   |slice     |-         |154  |an empty ml_task_run slice
enter     |call |-   |enter     |-         |154  |ml_task_enter+leave (0.4: no before)
enter10   |call |-   |enter_10  |-         |-    |ml_task_enter+leave 10 tasks deep
enter10k  |call |-   |enter_10k |-         |-    |ml_task_enter+leave 10000 tasks deep
enterdeep |ratio|-   |enter10k  |enter10   |1.1x |enter+leave 10000 deep over 10 deep
trip-a    |call |-   |trip_alloc|-         |-    |alloc-limit trip, alloc..return
trip-h    |call |-   |trip_held |-         |-    |held-limit trip, alloc..return
trip      |ratio|-   |trip-h    |trip-a    |1.2x |held trip over alloc trip
mmap      |call |-   |mmap      |mmap_glibc|150  |mmap+munmap of 1 MiB, idle (issue 34)
mmaptask  |call |-   |mmaptask  |mmap_glibc|-    |mmap+munmap of 1 MiB in a task
gcc-heap  |gcc  |-   |gccheap   |gcc       |-    |gcc -O2 under --heap-limit 64G
gcc-prof  |gcc  |-   |gccprof   |gccheap   |+3%  |... and --profile P
gcc-all   |gcc  |-   |gccprof   |gcc       |-    |--heap-limit 64G --profile P
'

# BENCH_ROWS (an awk regular expression): only the rows whose key or
# description (WHAT) matches it, and none of the tables after the first (a
# ratio row needs its two rows: BENCH_ROWS=trip; BENCH_ROWS='ml_run|slice|
# trip|free after|API' is the rows of ml_run, the slice, the trips, free
# after the last task object and the global limit by the API).
BENCH_ROWS=${BENCH_ROWS-}
if [ -n "$BENCH_ROWS" ]; then
	ROWS=$(echo "$ROWS" | awk -F'|' -v re="$BENCH_ROWS" '{ k = $1
	    gsub(/[ \t]/, "", k) } k != "" && (k ~ re || $7 ~ re)')
fi

# What each configuration is, for the "over" column.
cfgname() {
	case $1 in
	glibc) echo "plain glibc" ;;
	preload) echo "idle, preloaded" ;;
	idle) echo "idle memlimits" ;;
	task) echo "task (alloc limit)" ;;
	alone_je) echo "jemalloc alone" ;;
	alone_tc) echo "tcmalloc alone" ;;
	alone_mi) echo "mimalloc alone" ;;
	idle_je) echo "idle on jemalloc" ;;
	idle_tc) echo "idle on tcmalloc" ;;
	idle_mi) echo "idle on mimalloc" ;;
	trip-a) echo "alloc-limit trip" ;;
	mmap_glibc) echo "the system calls" ;;
	gcc) echo "plain gcc" ;;
	gccheap) echo "gcc, heap limit" ;;
	-) echo "(per call)" ;;
	*) echo "$1" ;;
	esac
}

# Instructions: two loop lengths, differenced, so start-up cancels.
N1=100000
N2=600000
RUN_M1=10000 # ml_run calls under callgrind
RUN_M2=60000
TRIP_M=21 # trips under callgrind (one dump each: the median is kept)
SLOW_N=100000 # pairs of the slow-path loop under callgrind
# Wall clock: pairs per timed loop, timed loops per process (best kept).
# Short loops (about a millisecond), so that on a loaded machine some of
# them run without being descheduled.
WALL_N=${BENCH_WALL_N:-50000}
WALL_REPS=9
HEAP=68719476736 # run mode's heap limit: 64 GiB, never reached

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-bench.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
unset MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_HELD_LIMIT \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_REPORT MEMLIMITS_PROFILE \
	MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT MEMLIMITS_DELIVERY \
	MEMLIMITS_SEED MEMLIMITS_REPORT_PID

if [ -n "$VALGRIND" ] && ! "$VALGRIND" --version >/dev/null 2>&1; then
	VALGRIND=
fi
if [ -z "$VALGRIND" ]; then
	echo "bench: valgrind not found: skipping the instruction counts" >&2
fi
SIDES=after
if [ -n "$BEFORE_LIB" ]; then
	# The bench programs are this tree's; the before library must stand
	# in for this one under them: same soname (so the preload satisfies
	# ml-bench's NEEDED and nothing else is loaded), the API they call.
	if LD_PRELOAD=$BEFORE_LIB LD_DEBUG=libs "$ML_BENCH" pairs task 10 1 \
	    2>"$tmp/ld" >/dev/null && ! grep -q "calling init: $ML_LIB" "$tmp/ld" &&
	    ! grep -q "calling init: $(dirname "$ML_LIB")/" "$tmp/ld"; then
		SIDES="before after"
	else
		echo "bench: before column skipped: ml-bench does not run on" \
		    "$BEFORE_LIB alone" >&2
		BEFORE_LIB=
	fi
fi
if [ -n "$CC_GCC" ] && ! command -v "$CC_GCC" >/dev/null 2>&1; then
	CC_GCC=
fi

libdir=$(dirname "$(/sbin/ldconfig -p 2>/dev/null |
	sed -n 's/^[[:space:]]*libc.so.6 (.*) => //p' | head -1)")
alloc_so() {
	case $1 in
	je) echo "$libdir/libjemalloc.so.2" ;;
	tc) echo "$libdir/libtcmalloc_minimal.so.4" ;;
	mi) echo "$libdir/libmimalloc.so.2" ;;
	esac
}

# setcfg SIDE CONFIG: BIN, PRE (LD_PRELOAD), ENVV (more variables) and WL
# (pairs' workload, or the per-call workload's arguments) for CONFIG on
# SIDE's library; returns 1 when CONFIG cannot run here (an allocator not
# installed).  Configurations not named *_xx or glibc/gcc use the library:
# ml-bench runs with it preloaded, which on the before side replaces the
# library ml-bench links (same soname).
setcfg() {
	lib=$ML_LIB
	[ "$1" = before ] && lib=$BEFORE_LIB
	BIN=$ML_BENCH PRE=$lib ENVV= WL=$2
	case $2 in
	glibc) BIN=$GLIBC_BENCH PRE= WL=idle ;;
	preload) BIN=$GLIBC_BENCH WL=idle ;;
	heap) BIN=$GLIBC_BENCH ENVV=MEMLIMITS_HEAP_LIMIT=$HEAP WL=idle ;;
	alone_* | idle_* | heap_*)
		a=$(alloc_so "${2#*_}")
		[ -r "$a" ] || return 1
		BIN=$GLIBC_BENCH WL=idle
		case $2 in
		alone_*) PRE=$a ;;
		idle_*) PRE="$lib $a" ;;
		heap_*) PRE="$lib $a" ENVV=MEMLIMITS_HEAP_LIMIT=$HEAP ;;
		esac
		;;
	run | slice | mmap | mmaptask | enter) ;;
	enter_10) WL="enterdeep 10" ;;
	enter_10k) WL="enterdeep 10000" ;;
	mmap_glibc) BIN=$GLIBC_BENCH PRE= WL=mmap ;;
	trip_*) WL="trip ${2#trip_}" ;;
	gcc) BIN=$CC_GCC PRE= ;;
	gccheap) BIN=$CC_GCC ENVV=MEMLIMITS_HEAP_LIMIT=$HEAP ;;
	gccprof)
		BIN=$CC_GCC
		ENVV="MEMLIMITS_HEAP_LIMIT=$HEAP MEMLIMITS_PROFILE=$tmp/profile"
		;;
	esac
	return 0
}
# The configurations that do not depend on the library: measured once,
# entered for both sides.
shared() {
	case $1 in glibc | alone_* | gcc | mmap_glibc) return 0 ;; esac
	return 1
}

# runcfg SIDE CONFIG ARGS...: run BIN ARGS under CONFIG's environment.
runcfg() {
	setcfg "$1" "$2" || return 1
	shift 2
	# shellcheck disable=SC2086
	env LD_PRELOAD="$PRE" $ENVV "$BIN" "$@" </dev/null
}

# cg SIDE CONFIG ARGS...: callgrind's total Ir for the run (all processes,
# for gcc's).  The soname synonym keeps valgrind from replacing the malloc
# the program calls (ours) with its own; callgrind itself replaces none,
# but a tool that did would otherwise measure nothing of ours.  The calls
# of ml__alloc_begin go to $tmp/slowcalls.
cg() {
	setcfg "$1" "$2" || return 1
	shift 2
	rm -f "$tmp"/cg.out*
	# shellcheck disable=SC2086
	if ! env LD_PRELOAD="$PRE" $ENVV "$VALGRIND" --tool=callgrind \
	    --soname-synonyms=somalloc=nouserintercepts --trace-children=yes \
	    --compress-strings=no --compress-pos=no \
	    --callgrind-out-file="$tmp/cg.out.%p" "$BIN" "$@" </dev/null \
	    >"$tmp/cg.stdout" 2>"$tmp/cg.err"; then
		cat "$tmp/cg.err" >&2
		echo "bench: callgrind failed: $BIN $*" >&2
		exit 1
	fi
	cat "$tmp"/cg.out.* | awk '/^cfn=ml__alloc_begin$/ { getline;
	     split($1, a, "="); n += a[2] } END { print n + 0 }' >"$tmp/slowcalls"
	# The dumps a program asked for (bench.c's trips: one a trip), not
	# the final one: their median, to $tmp/dumps.
	for f in "$tmp"/cg.out.*.*; do
		[ -r "$f" ] && awk '/^(summary|totals):/ { print $2; exit }' "$f"
	done | sort -n | awk '{ v[NR] = $1 } END {
	    print NR ? v[int((NR + 1) / 2)] : "n/a" }' >"$tmp/dumps"
	cat "$tmp"/cg.out.* | awk '/^summary:/ { n += $2 } END { printf "%.0f\n", n }'
}

# The measurements the rows need: "CONFIG LOOP" for pairs, "CONFIG -" for
# the per-call workloads and gcc.
echo "$ROWS" | awk -F'|' 'NF >= 7 { for (i = 1; i <= NF; i++)
	gsub(/^[ \t]+|[ \t]+$/, "", $i)
	if ($2 == "pair") { print $4, $3; print $5, $3 }
	else if ($2 == "call") { print $4, "-"; if ($5 != "-") print $5, "-" }
	else if ($2 == "gcc") { print $4, "gcc"; print $5, "gcc" } }' |
	sort -u >"$tmp/needs"

# ---- Instructions -------------------------------------------------------
# $tmp/ir: "SIDE CONFIG LOOP VALUE" (Ir per pair, per call, or per run).
gcc_small=$tmp/gcc-small.c
gcc_big=$tmp/gcc-big.c
sh "$HERE/make-gcc-input.sh" 15 >"$gcc_small"
sh "$HERE/make-gcc-input.sh" >"$gcc_big"
: >"$tmp/ir"
while read -r cfg loop; do
	for side in $SIDES; do
		if shared "$cfg" && [ "$side" = before ]; then
			continue
		fi
		v=n/a
		if [ -z "$VALGRIND" ] || ! setcfg "$side" "$cfg"; then
			:
		elif [ "$loop" = gcc ]; then
			[ -n "$CC_GCC" ] &&
				v=$(cg "$side" "$cfg" -O2 -c "$gcc_small" -o "$tmp/g.o")
		elif [ "$loop" = - ]; then
			case $cfg in
			trip_*)
				# shellcheck disable=SC2086
				cg "$side" "$cfg" $WL $TRIP_M 1 >/dev/null
				v=$(cat "$tmp/dumps")
				;;
			*)
				# shellcheck disable=SC2086
				a=$(cg "$side" "$cfg" $WL $RUN_M1 1)
				# shellcheck disable=SC2086
				b=$(cg "$side" "$cfg" $WL $RUN_M2 1)
				v=$(echo "$a $b" | awk -v m=$((RUN_M2 - RUN_M1)) \
				    '{ printf "%.2f", ($2 - $1) / m }')
				;;
			esac
		else
			a=$(cg "$side" "$cfg" pairs "$WL" $N1 1 "$loop")
			b=$(cg "$side" "$cfg" pairs "$WL" $N2 1 "$loop")
			v=$(echo "$a $b" | awk -v n=$((N2 - N1)) '{ printf "%.2f", ($2 - $1) / n }')
		fi
		if shared "$cfg"; then
			for s in $SIDES; do echo "$s $cfg $loop $v"; done
		else
			echo "$side $cfg $loop $v"
		fi
	done
done <"$tmp/needs" >>"$tmp/ir"

# ---- Wall clock ---------------------------------------------------------
# Every round runs every pair configuration of both sides once, as its own
# process, in an order rotated each round, so that drifts in machine load
# hit all of them alike.  $tmp/wall: "ROUND SIDE CONFIG LOOP NS".
for side in $SIDES; do
	while read -r cfg loop; do
		case $loop in - | gcc) continue ;; esac
		shared "$cfg" && [ "$side" = before ] && continue
		setcfg "$side" "$cfg" && echo "$side $cfg $loop"
	done <"$tmp/needs"
done >"$tmp/wall-list"
nwall=$(wc -l <"$tmp/wall-list")
echo "bench: wall clock, $ROUNDS rounds of $nwall runs..." >&2
r=0
while [ $r -lt "$ROUNDS" ]; do
	awk -v r=$r -v n="$nwall" '{ l[NR - 1] = $0 }
	    END { for (i = 0; i < n; i++) print l[(i + r) % n] }' "$tmp/wall-list" |
	while read -r side cfg loop; do
		setcfg "$side" "$cfg"
		ns=$(runcfg "$side" "$cfg" pairs "$WL" "$WALL_N" "$WALL_REPS" "$loop")
		if shared "$cfg"; then
			for s in $SIDES; do echo "$r $s $cfg $loop $ns"; done
		else
			echo "$r $side $cfg $loop $ns"
		fi
	done
	r=$((r + 1))
done >"$tmp/wall"

# Per-call workloads: a few processes of each, alternating sides; the
# median of their best ns per call.  $tmp/wall-call: "SIDE CONFIG NS".
i=0
while [ $i -lt 5 ]; do
	while read -r cfg loop; do
		[ "$loop" = - ] || continue
		for side in $SIDES; do
			setcfg "$side" "$cfg"
			m=20000
			case $cfg in trip_*) m=200 ;; esac
			# shellcheck disable=SC2086
			echo "$side $cfg $(runcfg "$side" "$cfg" $WL $m 11)"
		done
	done <"$tmp/needs"
	i=$((i + 1))
done >"$tmp/wall-call"

# gcc: user seconds (/usr/bin/time's %U: gcc, cc1 and as) of the ~190 KB
# input at -O2, every variant of both sides once a round, rotated.
: >"$tmp/wall-gcc"
if [ -n "$CC_GCC" ] && [ -x /usr/bin/time ] && grep -q ' gcc$' "$tmp/needs"; then
	for side in $SIDES; do
		for cfg in $(awk '$2 == "gcc" { print $1 }' "$tmp/needs"); do
			shared "$cfg" && [ "$side" = before ] && continue
			echo "$side $cfg"
		done
	done >"$tmp/gcc-list"
	n=$(wc -l <"$tmp/gcc-list")
	echo "bench: gcc -O2 on $(wc -c <"$gcc_big") bytes, $GCC_ROUNDS rounds of $n..." >&2
	r=0
	while [ $r -lt "$GCC_ROUNDS" ]; do
		awk -v r=$r -v n="$n" '{ l[NR - 1] = $0 }
		    END { for (i = 0; i < n; i++) print l[(i + r) % n] }' "$tmp/gcc-list" |
		while read -r side cfg; do
			setcfg "$side" "$cfg"
			# shellcheck disable=SC2086
			env LD_PRELOAD="$PRE" $ENVV /usr/bin/time -f %U \
			    -o "$tmp/utime" "$BIN" -O2 -c "$gcc_big" \
			    -o "$tmp/g.o" </dev/null
			u=$(cat "$tmp/utime")
			if shared "$cfg"; then
				for s in $SIDES; do echo "$r $s $cfg gcc $u"; done
			else
				echo "$r $side $cfg gcc $u"
			fi
		done
		r=$((r + 1))
	done >"$tmp/wall-gcc"
fi

# ---- The table ----------------------------------------------------------
echo "$ROWS" | awk -F'|' 'NF >= 7 { for (i = 1; i <= NF; i++)
	gsub(/^[ \t]+|[ \t]+$/, "", $i); print }' OFS='|' >"$tmp/rows"
while IFS='|' read -r key kind loop cfg base goal what; do
	echo "$key|$(cfgname "$base")"
done <"$tmp/rows" >"$tmp/basenames"

awk -v cores="$(nproc 2>/dev/null || echo '?')" -v rounds="$ROUNDS" \
    -v grounds="$GCC_ROUNDS" -v sides="$SIDES" -v bname="$BEFORE_NAME" '
function median(arr, n,    i, j, t) {
	if (n == 0)
		return "n/a"
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) {
			t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t
		}
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
# The figure of row k on side s, and its wall-clock companion.
function figure(k, s,    c, b, l, x, y) {
	c = cfg[k]; b = base[k]; l = loop[k]
	if (kind[k] == "pair") {
		x = ir[s, c, l]; y = ir[s, b, l]
		return (x == "" || y == "" || x == "n/a" || y == "n/a") ? "n/a" : x - y
	}
	if (kind[k] == "call") {
		x = ir[s, c, "-"]; y = b == "-" ? 0 : ir[s, b, "-"]
		return (x == "" || y == "" || x == "n/a" || y == "n/a") ? "n/a" : x - y
	}
	if (kind[k] == "ratio") {
		x = figure(c, s); y = figure(b, s)
		return (x == "n/a" || y == "n/a" || y == 0) ? "n/a" : x / y
	}
	if (kind[k] == "gcc") {
		x = ir[s, c, "gcc"]; y = ir[s, b, "gcc"]
		return (x == "" || y == "" || x == "n/a" || y == "n/a" || y == 0) ? "n/a" : (x / y - 1) * 100
	}
}
function wallfig(k, s,    c, b, l, n, r, i, v, x, y) {
	c = cfg[k]; b = base[k]; l = kind[k] == "gcc" ? "gcc" : loop[k]
	if (kind[k] == "pair" || kind[k] == "gcc") {
		n = 0
		for (r = 0; r < (kind[k] == "gcc" ? grounds : rounds); r++)
			if ((r, s, c, l) in wns && (r, s, b, l) in wns && wns[r, s, b, l] > 0)
				v[++n] = wns[r, s, c, l] / wns[r, s, b, l]
		return median(v, n)
	}
	if (kind[k] == "call") {
		n = 0
		for (i = 1; i <= ncall[s, c]; i++) v[++n] = call[s, c, i]
		x = median(v, n)
		if (b == "-" || x == "n/a")
			return x
		n = 0
		for (i = 1; i <= ncall[s, b]; i++) v[++n] = call[s, b, i]
		y = median(v, n)
		return y == "n/a" ? "n/a" : x - y
	}
	if (kind[k] == "ratio") {
		x = wallfig(c, s); y = wallfig(b, s)
		return (x == "n/a" || y == "n/a" || y <= 0) ? "n/a" : x / y
	}
}
function fmt(k, v) {
	if (v == "n/a" || v == "")
		return v == "" ? "-" : "n/a"
	if (kind[k] == "pair") return sprintf("%+.2f", v)
	if (kind[k] == "call") return sprintf("%.1f", v)
	if (kind[k] == "ratio") return sprintf("%.2fx", v)
	return sprintf("%+.1f%%", v)
}
function wfmt(k, v) {
	if (v == "n/a" || v == "")
		return v == "" ? "-" : "n/a"
	if (kind[k] == "call") return sprintf("%.0f ns", v)
	return sprintf("%.2fx", v)
}
function verdict(k, v,    g) {
	g = goal[k]
	if (g == "-") return "-"
	if (v == "n/a") return "?"
	gsub(/[+x%]/, "", g)
	return v <= g + 0 ? "met" : "MISSED"
}
FILENAME ~ /basenames$/ { split($0, f, "|"); bn[f[1]] = f[2]; next }
FILENAME ~ /rows$/ {
	split($0, f, "|")
	k = f[1]; keys[++nk] = k; kind[k] = f[2]; loop[k] = f[3]
	cfg[k] = f[4]; base[k] = f[5]; goal[k] = f[6]; what[k] = f[7]
	next
}
FILENAME ~ /\/ir$/ { ir[$1, $2, $3] = $4; next }
FILENAME ~ /\/wall$/ { wns[$1, $2, $3, $4] = $5; next }
FILENAME ~ /wall-gcc$/ { wns[$1, $2, $3, "gcc"] = $5; next }
FILENAME ~ /wall-call$/ { call[$1, $2, ++ncall[$1, $2]] = $3; next }
END {
	hasb = sides ~ /before/
	printf "\nmemlimits benchmark, the price of each limit (issue 26): before = " \
	    "the library at %s, after = this tree; %d cores\n", hasb ? bname : "(skipped)", cores
	printf "Ir: callgrind, per malloc/free pair of 16..144 bytes (16..4096: " \
	    "rows so named) over the base, per call, or gcc instructions over the base\n"
	printf "wall: medians of %d interleaved rounds (gcc: user time, %d " \
	    "rounds), over the base or ns a call; compare within one run only\n\n",
	    rounds, grounds
	printf "%-34s %-18s %9s %9s %7s %-6s  %9s %9s\n", "row", "over",
	    "before", "after", "goal", "", "wall bef", "wall aft"
	for (i = 1; i <= nk; i++) {
		k = keys[i]
		a = figure(k, "after")
		b = hasb ? figure(k, "before") : ""
		wa = wallfig(k, "after")
		wb = hasb ? wallfig(k, "before") : ""
		g = goal[k] == "-" ? "-" : "<=" goal[k]
		printf "%-34s %-18s %9s %9s %7s %-6s  %9s %9s\n", what[k],
		    bn[k], fmt(k, b), fmt(k, a), g,
		    verdict(k, a), wfmt(k, wb), wfmt(k, wa)
	}
}' "$tmp/rows" "$tmp/basenames" "$tmp/ir" "$tmp/wall" "$tmp/wall-gcc" \
	"$tmp/wall-call"


[ -z "$BENCH_ROWS" ] || exit 0

# ---- This tree's library only ------------------------------------------
# Slow path under callgrind: the same loop inside the same tasks at S = 1
# and S = 2^40 (no sample); the difference over the difference in slow-path
# calls is the cost of one slow path.  Rows: 1 and 3 tasks; h: 1 task with
# held tracking (each sampled block recorded and found again at its free);
# k: the same with stack capture.
for row in 1:slow:1 3:slow:3 h:slowheld:1 k:slowstack:1; do
	key=${row%%:*}
	mode=${row#*:}
	depth=${mode#*:}
	mode=${mode%:*}
	if [ -n "$VALGRIND" ]; then
		a=$(cg after idle $mode $depth 1 $SLOW_N 1)
		ca=$(cat "$tmp/slowcalls")
		b=$(cg after idle $mode $depth 1099511627776 $SLOW_N 1)
		cb=$(cat "$tmp/slowcalls")
		echo "$key $a $ca $b $cb" | awk -v n=$SLOW_N \
		    '{ printf "%s %.1f %.4f\n", $1, ($2 - $4) / ($3 - $5),
		       ($3 - $5) / n }'
	else
		echo "$key n/a n/a"
	fi
done >"$tmp/slow-ir"

# Slow path in wall clock: the S = 1 / S = 2^40 pair is interleaved inside
# each process; a few processes, median.
i=0
while [ $i -lt 5 ]; do
	for depth in 1 3; do
		echo "$depth $(runcfg after idle slowcmp $depth 20000 31 </dev/null)"
	done
	i=$((i + 1))
done >"$tmp/slow-wall"

# Exact budgets and a task's own interval (issue 16): Ir per pair in an
# exact task (the fast path unchanged), in a task at a tenth of the
# process's interval, and idle again after one; slow paths per 10^6 pairs.
for cfg in exact interval after; do
	if [ -n "$VALGRIND" ]; then
		a=$(cg after idle pairs $cfg $N1 1)
		ca=$(cat "$tmp/slowcalls")
		b=$(cg after idle pairs $cfg $N2 1)
		cb=$(cat "$tmp/slowcalls")
		echo "$cfg $a $ca $b $cb" | awk -v n=$((N2 - N1)) \
		    '{ printf "%s %.2f %.0f\n", $1, ($4 - $2) / n,
		       ($5 - $3) / n * 1e6 }'
	else
		echo "$cfg n/a n/a"
	fi
done >"$tmp/precision"
# Slow paths per 10^6 pairs of the two loops, idle.
for loop in 144 4096; do
	if [ -n "$VALGRIND" ]; then
		cg after idle pairs idle $N1 1 $loop >/dev/null
		ca=$(cat "$tmp/slowcalls")
		cg after idle pairs idle $N2 1 $loop >/dev/null
		cb=$(cat "$tmp/slowcalls")
		echo "$loop $ca $cb" | awk -v n=$((N2 - N1)) \
		    '{ printf "%s %.1f\n", $1, n / ($3 - $2) }'
	else
		echo "$loop n/a"
	fi
done >"$tmp/slowrate"

# Memory per tracked block: the resident growth while a task holds 10^6
# blocks of 64 bytes, all tracked (S = 1) less none tracked (S = 2^40).
a=$(runcfg after idle heldmem 1 1000000 </dev/null)
b=$(runcfg after idle heldmem 1099511627776 1000000 </dev/null)
echo "$a $b" | awk '{ printf "%.1f\n", ($1 - $2) / 1000000 }' >"$tmp/heldmem"

awk -v taskir="$(awk '$1 == "after" && $2 == "task" && $3 == 144 { print $4 }' "$tmp/ir")" \
    -v idleir="$(awk '$1 == "after" && $2 == "idle" && $3 == 144 { print $4 }' "$tmp/ir")" '
function median(arr, n,    i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) {
			t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t
		}
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
function fmt(x, f) { return x == "n/a" || x == "" ? "n/a" : sprintf(f, x) }
FILENAME ~ /slow-ir$/ { sir[$1] = $2; shits[$1] = $3; next }
FILENAME ~ /heldmem$/ { heldmem = $1; next }
FILENAME ~ /slowrate$/ { rate[$1] = $2; next }
FILENAME ~ /precision$/ { pir[$1] = $2; pslow[$1] = $3; next }
FILENAME ~ /slow-wall$/ {
	# (ns/pair at S = 1 - ns/pair without samples) / slow paths per
	# pair (1 - 1/e for 1-byte blocks at S = 1), and per sample.
	d = $2 - $3
	sp[$1, ++nsp[$1]] = d / (1 - exp(-1))
	ss[$1, nsp[$1]] = d / $4
	next
}
END {
	printf "\nthis tree only: the slow path, precision, memory\n"
	printf "\n%-42s %10s %10s %10s  %s\n", "slow path", "Ir",
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
	if (shits[1] != "n/a" && shits[1] != "")
		printf "(slow paths per 1-byte block at S = 1: %.4f measured," \
		    " %.4f expected)\n", shits[1], 1 - exp(-1)
	printf "(idle, default interval: one slow path per %s pairs of " \
	    "16..144 bytes, per %s pairs of 16..4096)\n", rate[144], rate[4096]
	printf "\n%-42s %10s %10s  %s\n", "precision (issue 16)", "Ir/pair",
	    "+Ir", "slow paths per 10^6 pairs"
	pname["exact"] = "exact budget (2^50 bytes)"
	pname["interval"] = "task at interval S/10"
	pname["after"] = "idle, after such a task"
	split("exact interval after", pk, " ")
	for (i = 1; i <= 3; i++) {
		c = pk[i]
		base = c == "after" ? idleir : taskir
		what = c == "after" ? " (idle)" : " (task)"
		d = "n/a"
		if (pir[c] != "n/a" && base != "n/a" && base != "")
			d = sprintf("%+.2f", pir[c] - base) what
		printf "%-42s %10s %10s  %s\n", pname[c], fmt(pir[c], "%.2f"),
		    d, pslow[c]
	}
	printf "\nheld tracking: %.1f bytes of memory per tracked block " \
	    "(10^6 blocks held; a 56-byte record in a table kept at most " \
	    "half full)\n", heldmem
}' "$tmp/slow-ir" "$tmp/slow-wall" "$tmp/heldmem" "$tmp/precision" "$tmp/slowrate"
