# The set-up every run-mode test script shares (tests/cli/test-run-*.sh),
# sourced with P set to the test program it runs: M, the memlimits
# command; tmp, a directory removed at exit; the C locale; none of the
# settings a caller's environment could pass to the library (a developer's
# MEMLIMITS_HEAP_LIMIT would change every figure); the TAP emitter; and a
# bail-out when either program is not built.
: "${top_builddir:?}" "${top_srcdir:?}" "${P:?}"
M=$top_builddir/tools/memlimits
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-${P##*/}.XXXXXX") || exit 1
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
