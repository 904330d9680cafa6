#!/bin/sh
# memlimits run --verbose prints the settings the program starts with, each
# with its source; MEMLIMITS_DELIVERY and other MEMLIMITS_* variables
# inherited from the environment are shown (they act on the program, and
# nothing else would say so); without --verbose nothing extra is printed.
: "${top_builddir:?}" "${top_srcdir:?}"
M=$top_builddir/tools/memlimits
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-verbose.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT \
	MEMLIMITS_DELIVERY MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED
. "$top_srcdir/tests/tap/tap.sh"

# expect FILE LINE DESCRIPTION
expect() {
	if grep -qxF "$2" "$1"; then ok "$3"; else
		notok "$3"
		sed 's/^/# /' "$1"
	fi
}

MEMLIMITS_DELIVERY=fail MEMLIMITS_FAULT=pool "$M" run --verbose \
	--alloc-limit 1G --interval 4096 --seed 7 -- /bin/true 2>"$tmp/err"
status=$?
if [ "$status" -eq 0 ]; then ok "run --verbose runs the program"; else notok "run --verbose runs the program (status $status)"; fi
expect "$tmp/err" "memlimits run: alloc limit = 1G (--alloc-limit)" "the alloc limit and its option"
expect "$tmp/err" "memlimits run: heap limit = none (default)" "no heap limit: the default"
expect "$tmp/err" "memlimits run: sample interval = 4096 (--interval)" "the interval and its option"
expect "$tmp/err" "memlimits run: seed = 7 (--seed)" "the seed and its option"
expect "$tmp/err" "memlimits run: default delivery = fail (inherited MEMLIMITS_DELIVERY: the program's own ml_run tasks that ask for the default use it)" \
	"an inherited MEMLIMITS_DELIVERY is shown as the delivery in force"
expect "$tmp/err" "memlimits run: MEMLIMITS_FAULT=pool (inherited)" "another inherited MEMLIMITS_ variable is listed"
expect "$tmp/err" "memlimits run: program = /bin/true (PROGRAM)" "the program's path"

MEMLIMITS_DELIVERY=sometimes "$M" run --verbose -- true 2>"$tmp/err2"
expect "$tmp/err2" "memlimits run: default delivery = jump (inherited MEMLIMITS_DELIVERY is not jump, fail or flag: the library ignores it)" \
	"a malformed MEMLIMITS_DELIVERY: said to be ignored"
if grep -q "^memlimits: ignoring MEMLIMITS_DELIVERY=sometimes: expected jump, fail or flag$" "$tmp/err2"; then
	ok "and the library says so itself, in one line"
else
	notok "and the library says so itself, in one line"
	sed 's/^/# /' "$tmp/err2"
fi

"$M" run --verbose -- true 2>"$tmp/err3"
expect "$tmp/err3" "memlimits run: default delivery = jump (default)" "no MEMLIMITS_DELIVERY: jump, the default"

MEMLIMITS_DELIVERY=fail "$M" run -- true 2>"$tmp/err4"
if [ ! -s "$tmp/err4" ]; then ok "without --verbose nothing is printed"; else
	notok "without --verbose nothing is printed"
	sed 's/^/# /' "$tmp/err4"
fi
echo "1..$n"
