#!/bin/sh
# The version is written once, in configure.ac's AC_INIT; everything that
# states it must agree.  The header's ML_VERSION_* macros stay literal so
# that include/memlimits.h compiles with -Iinclude from a clean checkout (no
# generated header to find); this test is what keeps them equal to
# configure's version, with the man pages' .TH lines and the command's.
: "${top_srcdir:?}" "${top_builddir:?}" "${PACKAGE_VERSION:?}"
. "$top_srcdir/tests/tap/tap.sh"
h=$top_srcdir/include/memlimits.h
v=$PACKAGE_VERSION

macro() {
	sed -n "s/^#define ML_VERSION_$1 *//p" "$h" | tr -d '"'
}
if tap_case header; then
	got="$(macro MAJOR).$(macro MINOR).$(macro PATCH)"
	if test "$got" = "$v"; then
		ok "ML_VERSION_MAJOR.MINOR.PATCH is configure's $v"
	else
		notok "ML_VERSION_MAJOR.MINOR.PATCH is $got, configure's is $v"
	fi
	if test "$(macro STRING)" = "$v"; then
		ok "ML_VERSION_STRING is configure's $v"
	else
		notok "ML_VERSION_STRING is $(macro STRING), configure's is $v"
	fi
fi

if tap_case man-pages; then
	bad=
	for f in "$top_srcdir"/docs/*.3 "$top_srcdir"/docs/memlimits.1; do
		grep -q '^\.so ' "$f" && continue
		grep -q "^\.TH .*\"memlimits $v\"" "$f" || bad="$bad ${f##*/}"
	done
	if test -z "$bad"; then
		ok "every man page's .TH line says memlimits $v"
	else
		notok "man pages whose .TH line does not say memlimits $v:$bad"
	fi
fi

if tap_case version-option; then
	out=$("$top_builddir/tools/memlimits" --version 2>&1)
	if test "$out" = "memlimits $v"; then
		ok "memlimits --version prints memlimits $v"
	else
		notok "memlimits --version prints '$out', expected 'memlimits $v'"
	fi
fi
tap_done
