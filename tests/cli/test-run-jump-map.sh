#!/bin/sh
# memlimits run after a JUMP out of an mmap (issue 41, item 3): a task's
# limit trips on a 64 MiB mapping and jumps out of mmap; then a malloc of
# 230 MiB under --heap-limit 256MiB is a block, refused at the limit only,
# not a mapping refused the headroom (L/6: 42.7 MiB) before it.  Before,
# the jump left the thread's `mapping` flag set, and the block was refused.
# The 230 MiB carry Poisson(3015) samples at the default interval: the
# check is certain.
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
P=$top_builddir/tests/cli/test-run-jump-map
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-jumpmap.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT MEMLIMITS_MAPPED \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED MEMLIMITS_HELD_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" && test -x "$P" || {
	echo "Bail out! $M or $P not built"
	exit 1
}
if tap_case jump; then
	"$M" run --heap-limit 256MiB -- "$P" 230 >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && test "$(cat "$tmp/out")" = "jumped got"; then
		ok "a JUMP out of mmap, then 230 MiB of malloc under 256 MiB: got"
	else
		notok "status $st, $(cat "$tmp/out") (want: jumped got)"
		diag "$tmp/err"
	fi
fi
echo "1..$n"
