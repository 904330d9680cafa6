# What the tests of memlimits run --tree-heap-limit share (test-tree-limit,
# test-tree-signals, test-tree-full, test-tree-many): source it, then
#   tree_setup TAG PROGRAM
# sets M (the command) and tmp (a scratch directory, ml-TAG.XXXXXX,
# removed at exit), runs with no memlimits setting of the caller's (an
# inherited MEMLIMITS_SHARED or LD_PRELOAD would change every run), loads
# tap.sh, and bails out unless M and PROGRAM are built.
: "${top_builddir:?}" "${top_srcdir:?}"
tree_setup() {
	M=$top_builddir/tools/memlimits
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-$1.XXXXXX") || exit 1
	trap 'rm -rf "$tmp"' EXIT INT TERM
	export LC_ALL=C
	unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT \
		MEMLIMITS_REPORT MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR \
		MEMLIMITS_ON_LIMIT MEMLIMITS_SHARED MEMLIMITS_SHARED_TREE \
		MEMLIMITS_SHARED_SLOTS
	. "$top_srcdir/tests/tap/tap.sh"
	test -x "$M" && test -x "$2" || {
		echo "Bail out! $M or $2 not built"
		exit 1
	}
}
