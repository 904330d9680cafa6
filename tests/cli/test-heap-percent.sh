#!/bin/sh
# memlimits run --heap-limit P% and MEMLIMITS_HEAP_LIMIT=P% (issue 14): a
# percentage of the cgroup's memory.max (cgroup v2, the smallest over the
# process's cgroup and its ancestors), or of physical memory where none is
# set, read by each process at start.  The expected bytes are computed here
# from /proc/self/cgroup and /sys/fs/cgroup (or MemTotal in /proc/meminfo),
# independently of the library; the report and --verbose must give them
# and say what they are a percentage of.  Bad percentages: one line, exit
# status 2 (the command) or one line and no limit (the environment).
: "${top_builddir:?}" "${top_srcdir:?}"
M=$top_builddir/tools/memlimits
HOG=$top_builddir/tests/cli/test-run-hog
LIB=${MEMLIMITS_LIB:-$top_builddir/lib/.libs/libmemlimits.so}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-percent.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT \
	MEMLIMITS_DELIVERY MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED
. "$top_srcdir/tests/tap/tap.sh"

# ---- What this process may use, computed here ------------------------------
best= src=
cg=$(sed -n 's/^0:://p' /proc/self/cgroup 2>/dev/null | head -n 1)
case $cg in
/..*) cg= ;; # outside our cgroup namespace: not under the mount
esac
if [ -n "$cg" ]; then
	p=${cg%/}
	while :; do
		f=/sys/fs/cgroup$p/memory.max
		v=$(cat "$f" 2>/dev/null)
		case $v in
		'' | *[!0-9]*) ;; # "max", missing or garbage: none
		*)
			if [ -z "$best" ] || [ "$v" -lt "$best" ]; then
				best=$v src="cgroup $p/memory.max"
			fi
			;;
		esac
		[ -n "$p" ] || break
		p=${p%/*}
	done
fi
if [ -z "$best" ]; then
	kb=$(awk '$1 == "MemTotal:" { print $2 }' /proc/meminfo)
	best=$((kb * 1024)) src="physical memory"
fi
echo "# the process may use $best bytes ($src)"

# ---- The report and --verbose -------------------------------------------------
if tap_case report-half; then
	"$M" run --heap-limit 50% --report "$tmp/r" -- /bin/true 2>"$tmp/err"
	st=$?
	half=$((best / 2))
	line=$(grep '^heap limit:' "$tmp/r")
	case $line in
	"heap limit: $half bytes ("*") = 50% of $src")
		ok "--heap-limit 50%: the report says $half bytes = 50% of $src" ;;
	*)
		notok "--heap-limit 50%: want $half bytes = 50% of $src (status $st)"
		diag "$tmp/r" "$tmp/err"
		;;
	esac
	if [ "$st" = 0 ] && ! [ -s "$tmp/err" ]; then ok "the program ran, nothing on stderr"; else
		notok "the program ran, nothing on stderr (status $st)"
		diag "$tmp/err"
	fi
fi

if tap_case report-fraction; then
	# 12.5% is exactly an eighth: floor(total / 8).
	"$M" run --heap-limit 12.5% --report "$tmp/r8" --verbose -- /bin/true 2>"$tmp/err8"
	eighth=$((best / 8))
	case $(grep '^heap limit:' "$tmp/r8") in
	"heap limit: $eighth bytes ("*") = 12.5% of $src")
		ok "--heap-limit 12.5%: $eighth bytes in the report" ;;
	*)
		notok "--heap-limit 12.5%: want $eighth bytes = 12.5% of $src"
		diag "$tmp/r8"
		;;
	esac
	want="memlimits run: heap limit = $eighth bytes = 12.5% of $src, read again by each process at start (--heap-limit)"
	if grep -qxF "$want" "$tmp/err8"; then ok "--verbose says the bytes and what they are a percentage of"; else
		notok "--verbose: want '$want'"
		diag "$tmp/err8"
	fi
fi

if tap_case passed-unchanged; then
	# Each process reads its own cgroup at start: the percentage itself
	# is what the program inherits.
	got=$("$M" run --heap-limit 50% -- /bin/sh -c 'echo "$MEMLIMITS_HEAP_LIMIT"' 2>"$tmp/errp")
	if [ "$got" = "50%" ]; then ok "MEMLIMITS_HEAP_LIMIT=50% is passed on as given"; else
		notok "MEMLIMITS_HEAP_LIMIT passed on as '$got', want 50%"
		diag "$tmp/errp"
	fi
fi

# ---- The limit applies --------------------------------------------------------
if tap_case enforced; then
	# The percentage (9 decimals) that makes about 8 MiB here; the hog
	# keeps 1 MiB blocks (each sampled with probability 1 - exp(-13) at
	# the default interval): it gets NULL before 9 MiB.
	e9=$((8388608 * 100000000000 / best)) # billionths of a percent
	if [ "$e9" -lt 1 ] || [ "$e9" -gt 100000000000 ]; then
		skip "no percentage of $best bytes makes 8 MiB"
	else
		pct=$(printf '%d.%09d%%' $((e9 / 1000000000)) $((e9 % 1000000000)))
		limit=$((best * e9 / 100000000000))
		"$M" run --heap-limit "$pct" --report "$tmp/h" -- "$HOG" 64 >"$tmp/hog.out" 2>"$tmp/hog.err"
		mib=$(sed -n 's/^hog: NULL after \([0-9]*\) MiB$/\1/p' "$tmp/hog.out")
		if [ -n "$mib" ] && [ "$mib" -le 8 ] && [ "$mib" -ge 4 ] &&
			grep -q '^limit reached: the heap limit' "$tmp/h" &&
			grep -q "^heap limit: $limit bytes (.*) = $pct of $src\$" "$tmp/h"; then
			ok "--heap-limit $pct ($limit bytes): the hog gets NULL after $mib MiB"
		else
			notok "--heap-limit $pct ($limit bytes): the hog is stopped near 8 MiB"
			diag "$tmp/hog.out" "$tmp/h"
		fi
	fi
fi

# ---- Bad percentages ----------------------------------------------------------
if tap_case bad-cli; then
	for v in 0% 101% x% % 0.0% 100.5% 12.5.5% -5% ' 5%' 5%% 1.0000000001%; do
		rm -f "$tmp/ran"
		"$M" run --heap-limit "$v" -- /bin/sh -c "touch $tmp/ran" >"$tmp/out" 2>"$tmp/err"
		st=$?
		lines=$(wc -l <"$tmp/err")
		if [ "$st" = 2 ] && [ "$lines" = 1 ] && ! [ -s "$tmp/out" ] && ! [ -e "$tmp/ran" ] &&
			grep -q "^memlimits run: invalid percentage for --heap-limit: '$v'" "$tmp/err"; then
			ok "--heap-limit '$v': exit 2, one line, nothing run"
		else
			notok "--heap-limit '$v': status $st, $lines lines"
			diag "$tmp/err"
		fi
	done
fi

if tap_case bad-env; then
	# The library alone (a bare LD_PRELOAD): one line, no limit.
	for v in 0% 101% x% %; do
		LD_PRELOAD=$LIB MEMLIMITS_HEAP_LIMIT=$v MEMLIMITS_REPORT=$tmp/e \
			/bin/true 2>"$tmp/err"
		lines=$(wc -l <"$tmp/err")
		if [ "$lines" = 1 ] &&
			grep -q "^memlimits: ignoring MEMLIMITS_HEAP_LIMIT=$v: expected a percentage" "$tmp/err" &&
			grep -qx 'heap limit: none' "$tmp/e"; then
			ok "MEMLIMITS_HEAP_LIMIT=$v: one line, no heap limit"
		else
			notok "MEMLIMITS_HEAP_LIMIT=$v: $lines lines"
			diag "$tmp/err" "$tmp/e"
		fi
		rm -f "$tmp/e"
	done
fi

tap_done
