#!/bin/sh
# memlimits run and a program that retries a refused allocation (issue 41,
# item 5): once a heap, tree or held limit has refused a block, every
# allocation that would grow the heap is refused until the heap is back
# under the limit, sampled or not, on every thread; the program is held
# as prlimit --data holds it.
#  - under --heap-limit 100MiB a program asking for 300 MiB in 4 KiB
#    blocks, keeping what it gets, that retries a NULL once, ten times
#    (a GC loop), or goes on to the next block, keeps 85-115 MiB (prlimit
#    --data holds it at about 99; before, the retry carried no sample
#    with probability e^-0.05 and it kept 300 MiB); so do two threads
#    asking for 200 MiB each;
#  - the same under --tree-heap-limit 100MiB (one thread and two) and
#    --held-limit 100MiB;
#  - the refusals end with the heap: a shrinking realloc at the limit
#    succeeds, and once every block is freed, 64 MiB of blocks fit again;
#  - lua5.4's table growth (a table of tables; an array of integers)
#    under --heap-limit stops with "not enough memory" at 0.85-1.15 x the
#    limit in peak RSS (before, the table of tables reached 1.63 x, its
#    emergency collections taking 22 s where prlimit took 0.5).
# Probabilities: a block is refused only when the heap with it would be
# over the limit, and after the first sampled block past the limit every
# thread's blocks are checked from its next sample on: the heap passes
# the limit by the bytes to a sample on each thread (15 MiB of 4 KiB
# blocks with no sample at the default interval: e^-196) plus the meter's
# 32 KiB per other thread.
: "${top_builddir:?}"
P=$top_builddir/tests/cli/test-run-retry
. "$top_srcdir/tests/cli/run-env.sh"
L=104857600 # 100 MiB

# under OPTION ARGS...: the program under memlimits run OPTION 100MiB;
# its output in $tmp/out, stderr in $tmp/err, status in st.
under() {
	opt=$1
	shift
	"$M" run "$opt" 100MiB -- "$P" "$@" >"$tmp/out" 2>"$tmp/err"
	st=$?
}
# plain ARGS...: what prlimit --data=100MiB lets the program keep (MiB),
# for the messages; "?" without prlimit.
plain() {
	if command -v prlimit >/dev/null &&
		prlimit --data=$L "$P" "$@" >"$tmp/pl" 2>/dev/null; then
		read -r _ pk _ <"$tmp/pl"
		echo "$pk"
	else
		echo "?"
	fi
}
# held WHAT: ok when the program kept 85-115 MiB.
held() {
	read -r _ kept _ refused _ hwm <"$tmp/out"
	if test "$st" = 0 && test "${kept:-0}" -ge 85 && test "$kept" -le 115; then
		ok "$1: kept $kept MiB ($refused blocks given up, peak RSS $hwm KiB; prlimit --data: $2 MiB)"
	else
		notok "$1: status $st, kept ${kept:-?} MiB (85-115 wanted; prlimit --data: $2 MiB)"
		diag "$tmp/out" "$tmp/err"
	fi
}

for c in once:1 ten:10 goon:0; do
	name=${c%:*} tries=${c#*:}
	if tap_case "$name"; then
		under --heap-limit keep "$tries" 4096 300
		held "--heap-limit 100MiB, 300 MiB of 4 KiB blocks, a NULL retried $tries times" \
			"$(plain keep "$tries" 4096 300)"
	fi
done

if tap_case threads; then
	under --heap-limit keep 1 4096 200 2
	held "--heap-limit 100MiB, two threads asking 200 MiB each in 4 KiB blocks, a NULL retried once" \
		"$(plain keep 1 4096 200 2)"
fi

if tap_case tree; then
	under --tree-heap-limit keep 1 4096 300
	held "--tree-heap-limit 100MiB, 300 MiB of 4 KiB blocks, a NULL retried once" \
		"$(plain keep 1 4096 300)"
fi

if tap_case tree-threads; then
	under --tree-heap-limit keep 1 4096 200 2
	held "--tree-heap-limit 100MiB, two threads asking 200 MiB each in 4 KiB blocks, a NULL retried once" \
		"$(plain keep 1 4096 200 2)"
fi

if tap_case held; then
	under --held-limit keep 1 4096 300
	held "--held-limit 100MiB, 300 MiB of 4 KiB blocks, a NULL retried once" \
		"$(plain keep 1 4096 300)"
fi

if tap_case after; then
	under --heap-limit after 4096 300 64
	read -r _ kept _ shrunk _ again <"$tmp/out"
	if test "$st" = 0 && test "${kept:-0}" -ge 85 && test "$kept" -le 115 &&
		test "$shrunk" = 1 && test "$again" = 64; then
		ok "--heap-limit 100MiB: held at $kept MiB, then a shrinking realloc got, and 64 MiB fit once all was freed"
	else
		notok "after the refusals: status $st, kept ${kept:-?}, shrunk ${shrunk:-?}, again ${again:-?} MiB (64 wanted)"
		diag "$tmp/out" "$tmp/err"
	fi
fi

# lua NAME LIMIT_MIB SCRIPT: lua5.4 -e SCRIPT under --heap-limit; its peak
# RSS (ru_maxrss through /usr/bin/time) must be 0.85-1.15 x the limit.
lua() {
	if ! command -v lua5.4 >/dev/null; then
		skip "$1: lua5.4 not installed"
		return
	fi
	if ! test -x /usr/bin/time; then
		skip "$1: /usr/bin/time not installed"
		return
	fi
	lim=$(($2 * 1048576))
	/usr/bin/time -f %M -o "$tmp/rss" "$M" run --heap-limit "$2MiB" -- \
		lua5.4 -e "$3" >"$tmp/out" 2>"$tmp/err"
	st=$?
	rss=$(tail -n 1 "$tmp/rss")
	pl=?
	if command -v prlimit >/dev/null; then
		/usr/bin/time -f %M -o "$tmp/prss" prlimit --data=$lim \
			lua5.4 -e "$3" >/dev/null 2>&1
		pl=$(tail -n 1 "$tmp/prss")
	fi
	# KiB against the limit in KiB: 0.85 x and 1.15 x, in hundredths.
	k=$((lim / 1024))
	if test "$st" != 0 && grep -q 'not enough memory' "$tmp/err" &&
		test "$((rss * 100))" -ge "$((k * 85))" &&
		test "$((rss * 100))" -le "$((k * 115))"; then
		ok "$1 under --heap-limit $2MiB: not enough memory at $rss KiB peak RSS (prlimit --data: $pl KiB)"
	else
		notok "$1 under --heap-limit $2MiB: status $st, peak RSS $rss KiB (0.85-1.15 x $k KiB wanted; prlimit --data: $pl KiB)"
		diag "$tmp/err"
	fi
}

if tap_case lua-tables; then
	lua "lua5.4's table of tables" 100 \
		'local t={} for i=1,1e9 do t[i]={} end'
fi
# The array doubles: its growth to 256 MiB is refused, the 128 MiB before
# it stand (0.875 x 150 MiB in RSS), as under prlimit.
if tap_case lua-array; then
	lua "lua5.4's array of integers" 150 \
		'local t={} for i=1,1e9 do t[i]=i end'
fi

tap_done
