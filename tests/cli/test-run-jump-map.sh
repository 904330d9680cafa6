#!/bin/sh
# memlimits run after a JUMP out of an mmap (issue 41, item 3): a task's
# limit trips on a 64 MiB mapping and jumps out of mmap; then a malloc of
# 230 MiB under --heap-limit 256MiB is a block, refused at the limit only,
# not a mapping refused the headroom (L/6: 42.7 MiB) before it.  Before,
# the jump left the thread's `mapping` flag set, and the block was refused.
# The 230 MiB carry Poisson(3015) samples at the default interval: the
# check is certain.
: "${top_builddir:?}"
P=$top_builddir/tests/cli/test-run-jump-map
. "$top_srcdir/tests/cli/run-env.sh"
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
