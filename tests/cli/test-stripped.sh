#!/bin/sh
# Symbols of stripped programs in profiles and reports (issue 36):
# tests/cli/test-stripped, linked with -rdynamic, stripped here
# (objcopy --strip-all: .dynsym only) names its exported functions, the
# sized one and the one of size 0 (nearest preceding, up to the next
# function), and not the static one, which .dynsym does not have; with
# its debug file (objcopy --only-keep-debug, found by .gnu_debuglink next
# to the program) the static one too.  Then Debian's python3: with its
# debug file installed (python3.11-dbg: /usr/lib/debug/.build-id/), every
# frame of the top stack of `x=[bytearray(1<<20) ...]` is named.  The
# build-id lookup under a debug root of the test's own is
# tests/unit/test-symtab.c's.
: "${top_builddir:?}" "${top_srcdir:?}"
M=$top_builddir/tools/memlimits
PROG=$top_builddir/tests/cli/test-stripped
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-stripped.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" && test -x "$PROG" || {
	echo "Bail out! $M or $PROG not built"
	exit 1
}

# profile NAME PROGRAM: the collapsed stacks of 16 blocks of 1 MiB (each
# sampled: the interval is 80 000 bytes), and the report.
profile() {
	"$M" run --heap-limit 1GiB --profile "$tmp/$1.prof" \
		--report "$tmp/$1.report" -- "$2" 16 >"$tmp/$1.out" 2>&1 ||
		diag "$tmp/$1.out"
}
# The frames under main that lead to the 1 MiB blocks, as one line.
chain() {
	grep -o ';main;.* 1[0-9]*$' "$tmp/$1.prof" | sort | tail -n 1
}

if ! command -v objcopy >/dev/null 2>&1; then
	skip "a stripped program: no objcopy"
	skip "a stripped program's size-0 function: no objcopy"
	skip "a stripped program with a debug link: no objcopy"
	skip "the report of a stripped program: no objcopy"
else
	size0=$("$PROG" size0)
	objcopy --strip-all "$PROG" "$tmp/bare" &&
		objcopy --only-keep-debug "$PROG" "$tmp/prog.debug" &&
		objcopy --strip-all --add-gnu-debuglink="$tmp/prog.debug" \
			"$PROG" "$tmp/linked" || notok "objcopy"
	profile bare "$tmp/bare"
	c=$(chain bare)
	# What names the frame of the static function, if anything: not a
	# neighbour of it.
	case $c in
	*";stripped_exported_grow;bare+0x"*) ok "stripped: the exported function named from .dynsym, the static one bare+0x... ($c)" ;;
	*) notok "stripped: the exported function named from .dynsym, the static one bare+0x... ($c)" ;;
	esac
	if test "$size0" != yes; then
		skip "stripped: a function of size 0 is named: not x86-64"
	else
		case $c in
		*";main;zero_size_grow;stripped_exported_grow;"*) ok "stripped: a function of size 0 named from .dynsym" ;;
		*) notok "stripped: a function of size 0 named from .dynsym ($c)" ;;
		esac
	fi
	profile linked "$tmp/linked"
	c=$(chain linked)
	case $c in
	*";zero_size_grow;stripped_exported_grow;hidden_grow "* | \
		*";zero_size_grow;stripped_exported_grow;hidden_grow."*)
		ok "stripped with a debug link: the static function named ($c)" ;;
	*) notok "stripped with a debug link: the static function named ($c)" ;;
	esac
	if grep -q '^    hidden_grow[.+].* (.*/linked)$' "$tmp/linked.report"; then
		ok "the report names it too"
	else
		notok "the report names it too"
		diag "$tmp/linked.report"
	fi
fi

# ---- Debian's python3 ------------------------------------------------------
# Debian's own, not a python3 earlier in PATH (a pyenv shim).
PY=
test -x /usr/bin/python3 && PY=$(readlink -f /usr/bin/python3)
id=
if test -n "$PY" && command -v readelf >/dev/null 2>&1; then
	id=$(readelf -n "$PY" 2>/dev/null | sed -n 's/.*Build ID: *\([0-9a-f]*\).*/\1/p')
fi
rest=${id#??}
dbg=/usr/lib/debug/.build-id/${id%"$rest"}/$rest.debug
if test -z "$PY"; then
	skip "python3's frames named: no /usr/bin/python3"
elif test -z "$id" || ! test -f "$dbg"; then
	skip "python3's frames named: no debug file for $PY (Debian: apt-get install python3.11-dbg)"
else
	"$M" run --heap-limit 100MiB --report "$tmp/py.report" -- "$PY" -c \
		'x=[bytearray(1<<20) for _ in range(1000)]' >"$tmp/py.out" 2>&1
	# The top stack: between "#1:" and "#2:".
	sed -n '/^#1:/,/^#2:/p' "$tmp/py.report" | sed '1d;$d' >"$tmp/py.top"
	if grep -q '^    PyByteArray_Resize+' "$tmp/py.top" &&
		! grep -qE '^    /[^ ]*\+0x[0-9a-f]+$' "$tmp/py.top"; then
		ok "python3's frames named with its debug file ($(head -n 1 "$tmp/py.top" | sed 's/^ *//'))"
	else
		notok "python3's frames named with its debug file"
		diag "$tmp/py.top"
	fi
fi
echo "1..$n"
