#!/bin/sh
# Thread scaling (issue 17): drives bench/threads-bench (bench/threads.c)
# at 1, 2, 4, 8 and 16 threads in every configuration below, and prints
# one table: per configuration and thread count, the median seconds and
# the ratio to glibc's median at the same thread count.  `make
# bench-threads` runs it.
#
# Configurations (one binary throughout; "preloaded" is
# LD_PRELOAD=libmemlimits.so):
#   glibc          plain glibc, nothing of ours
#   ml-idle        preloaded, nothing set
#   ml-alloc       run mode, MEMLIMITS_ALLOC_LIMIT=1T
#   ml-heap        run mode, MEMLIMITS_HEAP_LIMIT=64G
#   ml-both        run mode, both
#   ml-both-S4096  run mode, both, MEMLIMITS_SAMPLE_INTERVAL=4096
#   ml-run         ml_run per thread: allocation limit 2^50, global = true
#                  under a global limit of 2^50, a token (scale-16.sh's
#                  "ml-task")
#   ml-held        ml-run plus a held limit (held_bytes) of 2^50
#   ml-slice       one task object with ml-run's limits, shared by all the
#                  threads, each running its loop as a slice of it
#   jemalloc, tcmalloc, mimalloc
#                  that allocator preloaded alone (no library), for
#                  reference; a row whose library is missing is skipped
# Every thread does the same work (BENCH_ITERS iterations) at every thread
# count, so on enough cores an allocator that scales keeps the same time.
#
# Columns after the thread counts: "growth", the ratio at the highest
# thread count over the ratio at the lowest (1 = the configuration's cost
# over glibc does not grow with threads); "t2/t1", the configuration's own
# wall clock at 2 threads over 1; "vs glibc", that divided by glibc's own
# t2/t1 (which is the ratio at 2 threads over the ratio at 1).
#
# Environment:
#   BENCH_THREADS    thread counts (default "1 2 4 8 16")
#   BENCH_ITERS      iterations per thread (default 2000000; the 16-core
#                    runs of issue 17 used 20000000)
#   BENCH_REPS       rounds (default 5): every round runs every thread
#                    count and every configuration once, the
#                    configurations in an order rotated each round, so
#                    that drifts in machine load hit all of them alike
#   BENCH_OUT        directory for threads.tsv, the raw rows (default:
#                    the current directory)
#   THREADS_BENCH    the program, ML_LIB the libmemlimits.so to preload
#                    (set by make; default: beside this script, below)
#   BENCH_ALLOC_DIR  where libjemalloc.so.2, libtcmalloc_minimal.so.4 and
#                    libmimalloc.so.2 are looked for (default: libc's
#                    directory, or lib/ beside this script)
#
# On a bare machine (no compiler, no package manager):
#
#   sh bench/run-threads.sh --pack DIR     (here, after make; with
#                                           THREADS_BENCH and ML_LIB set
#                                           as make sets them)
#
# copies into DIR this script, the program as DIR/threads-bench, and into
# DIR/lib: the library as libmemlimits.so.0, the allocators above, and the
# shared libraries `ldd` lists for each of them except glibc's own (libc,
# libm, libpthread, libdl, librt, the loader: the target's glibc must be
# at least the build machine's).  Copy DIR over and run `sh
# DIR/run-threads.sh` there: with threads-bench beside it, it takes the
# program, the library and the allocators from DIR, with
# LD_LIBRARY_PATH=DIR/lib.  Python is not needed, only sh and awk.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
if [ -z "${THREADS_BENCH-}" ] && [ -x "$here/threads-bench" ]; then
	# A packed directory.
	THREADS_BENCH=$here/threads-bench
	ML_LIB=${ML_LIB:-$here/lib/libmemlimits.so.0}
	BENCH_ALLOC_DIR=${BENCH_ALLOC_DIR:-$here/lib}
	LD_LIBRARY_PATH=$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LD_LIBRARY_PATH
fi
: "${THREADS_BENCH:?set THREADS_BENCH (make bench-threads sets it)}"
: "${ML_LIB:?set ML_LIB (make bench-threads sets it)}"

ALLOCS="jemalloc:libjemalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4
mimalloc:libmimalloc.so.2"
if [ -z "${BENCH_ALLOC_DIR-}" ]; then
	# Where the distribution keeps its shared libraries: libc's directory.
	libc=$( (/sbin/ldconfig -p 2>/dev/null || true) |
		sed -n 's/^[[:space:]]*libc.so.6 (.*) => //p' | head -1)
	[ -n "$libc" ] || libc=$(ldd "$THREADS_BENCH" 2>/dev/null |
		awk '$1 == "libc.so.6" { print $3 }')
	BENCH_ALLOC_DIR=$(dirname "${libc:-/usr/lib/libc.so.6}")
fi

# --pack DIR: see above.
if [ "${1-}" = --pack ]; then
	dir=${2:?usage: run-threads.sh --pack DIR}
	mkdir -p "$dir/lib"
	cp "$0" "$dir/run-threads.sh"
	cp "$THREADS_BENCH" "$dir/threads-bench"
	cp -L "$ML_LIB" "$dir/lib/libmemlimits.so.0"
	set -- "$ML_LIB"
	for a in $ALLOCS; do
		so=$BENCH_ALLOC_DIR/${a#*:}
		if [ -r "$so" ]; then
			cp -L "$so" "$dir/lib/"
			set -- "$@" "$so"
		fi
	done
	# Their dependencies, glibc's own excepted.
	for so in "$@"; do
		ldd "$so" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }'
	done | sort -u | while read -r name path; do
		case $name in
		libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
			librt.so.* | ld-linux* | libmemlimits.so.*) ;;
		*) cp -L "$path" "$dir/lib/$name" ;;
		esac
	done
	echo "packed into $dir:"
	ls -l "$dir" "$dir/lib"
	exit 0
fi
[ $# -eq 0 ] || {
	echo "usage: run-threads.sh [--pack DIR]" >&2
	exit 2
}

# One space between the counts, none around them.
# shellcheck disable=SC2086 # split on purpose
set -- ${BENCH_THREADS:-1 2 4 8 16}
THREADS=$*
ITERS=${BENCH_ITERS:-2000000}
REPS=${BENCH_REPS:-5}
OUT=${BENCH_OUT:-.}
mkdir -p "$OUT"
tsv=$OUT/threads.tsv

# Nothing of the caller's may change a configuration: no library settings
# but the ones each row sets, no preload but its own.
for v in $(env | sed -n 's/^\(MEMLIMITS_[A-Za-z0-9_]*\)=.*/\1/p'); do
	unset "$v"
done
unset LD_PRELOAD

CFGS="glibc ml-idle ml-alloc ml-heap ml-both ml-both-S4096 ml-run ml-held
ml-slice"
for a in $ALLOCS; do
	if [ -r "$BENCH_ALLOC_DIR/${a#*:}" ]; then
		CFGS="$CFGS ${a%%:*}"
	else
		echo "run-threads: no $BENCH_ALLOC_DIR/${a#*:}: no ${a%%:*} row" >&2
	fi
done

# run_cfg CONFIG THREADS: one run; prints "THREADS<TAB>SECONDS".
run_cfg() {
	case $1 in
	glibc) "$THREADS_BENCH" none "$2" "$ITERS" ;;
	ml-idle) LD_PRELOAD=$ML_LIB "$THREADS_BENCH" idle "$2" "$ITERS" ;;
	ml-alloc)
		LD_PRELOAD=$ML_LIB MEMLIMITS_ALLOC_LIMIT=1T \
			"$THREADS_BENCH" idle "$2" "$ITERS"
		;;
	ml-heap)
		LD_PRELOAD=$ML_LIB MEMLIMITS_HEAP_LIMIT=64G \
			"$THREADS_BENCH" idle "$2" "$ITERS"
		;;
	ml-both)
		LD_PRELOAD=$ML_LIB MEMLIMITS_ALLOC_LIMIT=1T \
			MEMLIMITS_HEAP_LIMIT=64G \
			"$THREADS_BENCH" idle "$2" "$ITERS"
		;;
	ml-both-S4096)
		LD_PRELOAD=$ML_LIB MEMLIMITS_ALLOC_LIMIT=1T \
			MEMLIMITS_HEAP_LIMIT=64G MEMLIMITS_SAMPLE_INTERVAL=4096 \
			"$THREADS_BENCH" idle "$2" "$ITERS"
		;;
	ml-run) LD_PRELOAD=$ML_LIB "$THREADS_BENCH" run "$2" "$ITERS" ;;
	ml-held) LD_PRELOAD=$ML_LIB "$THREADS_BENCH" held "$2" "$ITERS" ;;
	ml-slice) LD_PRELOAD=$ML_LIB "$THREADS_BENCH" slice "$2" "$ITERS" ;;
	*)
		for a in $ALLOCS; do
			if [ "${a%%:*}" = "$1" ]; then
				LD_PRELOAD=$BENCH_ALLOC_DIR/${a#*:} \
					"$THREADS_BENCH" none "$2" "$ITERS"
				return
			fi
		done
		return 1
		;;
	esac
}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-threads.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

printf 'cfg\trep\tthreads\tseconds\n' >"$tsv"
fails=0
rep=1
# shellcheck disable=SC2086 # split on purpose: the rotated order
set -- $CFGS
while [ $rep -le "$REPS" ]; do
	for t in $THREADS; do
		for c in "$@"; do
			if r=$(run_cfg "$c" "$t" 2>"$tmp/err"); then
				printf '%s\t%s\t%s\n' "$c" "$rep" "$r" >>"$tsv"
			else
				printf '%s\t%s\t%s\tFAIL\n' "$c" "$rep" "$t" >>"$tsv"
				echo "run-threads: $c at $t threads failed:" \
					"$(head -c 300 "$tmp/err")" >&2
				fails=$((fails + 1))
			fi
		done
	done
	echo "run-threads: round $rep of $REPS done $(date +%T)" >&2
	c=$1 # the next round starts one configuration later
	shift
	set -- "$@" "$c"
	rep=$((rep + 1))
done

awk -F '\t' -v cfgs="$CFGS" -v ts="$THREADS" -v iters="$ITERS" \
    -v reps="$REPS" -v cores="$(nproc 2>/dev/null || echo '?')" '
function median(arr, n,    i, j, t) {
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && arr[j - 1] > arr[j]; j--) {
			t = arr[j]; arr[j] = arr[j - 1]; arr[j - 1] = t
		}
	return n % 2 ? arr[(n + 1) / 2] : (arr[n / 2] + arr[n / 2 + 1]) / 2
}
NR == 1 { next }
$4 == "FAIL" { nfail[$1, $3]++; fails++; next }
{ v[$1, $3, ++n[$1, $3]] = $4 }
END {
	nc = split(cfgs, cfg, /[ \n]+/)
	nt = split(ts, t, /[ \n]+/)
	lo = hi = t[1]
	for (j = 1; j <= nt; j++) {
		if (t[j] + 0 < lo + 0) lo = t[j]
		if (t[j] + 0 > hi + 0) hi = t[j]
	}
	for (i = 1; i <= nc; i++)
		for (j = 1; j <= nt; j++) {
			c = cfg[i]; k = n[c, t[j]] + 0
			for (r = 1; r <= k; r++) a[r] = v[c, t[j], r]
			med[c, t[j]] = k ? median(a, k) : ""
		}
	printf "\nmemlimits thread scaling: %s iterations per thread, %d " \
	    "rounds, %s cores\n(median seconds, ratio to glibc at the same " \
	    "thread count)\n\n", iters, reps, cores
	printf "%-14s", "configuration"
	for (j = 1; j <= nt; j++) printf " %15s", "T=" t[j]
	printf " %9s %7s %9s\n", "growth", "t2/t1", "vs glibc"
	for (i = 1; i <= nc; i++) {
		c = cfg[i]
		printf "%-14s", c
		for (j = 1; j <= nt; j++) {
			m = med[c, t[j]]; g = med["glibc", t[j]]
			if (m == "")
				cell = "FAIL"
			else if (g == "")
				cell = sprintf("%.4f      -", m)
			else
				cell = sprintf("%.4f %5.2fx", m, m / g)
			if (nfail[c, t[j]])
				cell = cell "!"
			printf " %15s", cell
		}
		# Growth of the ratio to glibc from the lowest thread count
		# to the highest.
		m1 = med[c, lo]; g1 = med["glibc", lo]
		m2 = med[c, hi]; g2 = med["glibc", hi]
		if (m1 != "" && g1 != "" && m2 != "" && g2 != "" && lo != hi)
			printf " %9.2f", (m2 / g2) / (m1 / g1)
		else
			printf " %9s", "-"
		# Wall clock from 1 to 2 threads, alone and over glibc.
		a1 = med[c, 1]; a2 = med[c, 2]
		b1 = med["glibc", 1]; b2 = med["glibc", 2]
		if (a1 != "" && a2 != "") {
			printf " %7.2f", a2 / a1
			if (b1 != "" && b2 != "")
				printf " %9.2f", (a2 / a1) / (b2 / b1)
			else
				printf " %9s", "-"
		} else
			printf " %7s %9s", "-", "-"
		printf "\n"
	}
	printf "\n"
	if (lo != hi)
		printf "growth: the ratio at T=%s / the ratio at T=%s.  ", hi, lo
	printf "t2/t1: the seconds at 2 threads / at 1;\nvs glibc: t2/t1 / " \
	    "glibc\047s t2/t1.  Every thread does the same work at every T.\n"
	if (fails)
		printf "!: some runs failed (see above)\n"
	if (hi + 0 > cores + 0 && cores != "?")
		printf "more threads than cores: T > %s measures " \
		    "oversubscription, not scaling\n", cores
}' "$tsv"
echo "raw rows: $(cd "$OUT" && pwd)/threads.tsv"
if [ $fails -gt 0 ]; then
	echo "run-threads: $fails runs failed" >&2
	exit 1
fi
