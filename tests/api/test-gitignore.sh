#!/bin/sh
# An in-tree build (the README's ./configure && make, make demo, make check,
# make bench) leaves git status clean: .gitignore covers every program and
# generated file the Makefile names (programs of every kind, CLEANFILES,
# configure's outputs), whichever build directory runs this.  Skipped
# outside a git checkout (a release tarball).
: "${top_srcdir:?}" "${top_builddir:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-ignore.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C

if ! command -v git >/dev/null 2>&1 ||
	! git -C "$top_srcdir" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	skip "not a git checkout"
	echo "1..$n"
	exit 0
fi
unset MAKEFLAGS MFLAGS MAKELEVEL
printf '%s\n' 'ml-print:' \
	'	@echo $(PROGRAMS) $(check_PROGRAMS) $(EXTRA_PROGRAMS) $(CLEANFILES) $(DISTCLEANFILES) $(CONFIG_CLEAN_FILES) $(CONFIG_HEADER)' \
	>"$tmp/print.mk"
if ! ${MAKE:-make} -s -C "$top_builddir" -f Makefile -f "$tmp/print.mk" \
	ml-print >"$tmp/names" 2>"$tmp/make.err"; then
	echo "Bail out! cannot read the Makefile's file lists"
	cat "$tmp/make.err"
	exit 1
fi
# What automake and configure make at the top, besides.
tr ' ' '\n' <"$tmp/names" | sed '/^$/d' | sort -u >"$tmp/files"
printf '%s\n' Makefile config.status config.log libtool stamp-h1 \
	test-suite.log tests/api/test-version.sh.log tests/api/test-version.sh.trs \
	lib/libmemlimits.la lib/.libs/libmemlimits.so lib/.deps/x.Plo \
	lib/api/version.lo lib/api/version.o contrib/nginx/build/objs/x.o \
	memlimits-0.2.0/README.md memlimits-0.2.0.tar.gz >>"$tmp/files"
: >"$tmp/bad"
while read -r f; do
	case $f in /*) continue ;; esac # an absolute path: not in the tree
	git -C "$top_srcdir" check-ignore -q --no-index "$f" || echo "$f" >>"$tmp/bad"
done <"$tmp/files"
if test -s "$tmp/bad"; then
	notok "files an in-tree build makes that .gitignore does not cover"
	diag "$tmp/bad"
else
	ok "an in-tree build's $(wc -l <"$tmp/files") programs and generated files are ignored"
fi
# And nothing tracked is ignored (a pattern too wide hides new sources).
git -C "$top_srcdir" ls-files -ci --exclude-standard >"$tmp/tracked"
if test -s "$tmp/tracked"; then
	notok "tracked files that .gitignore matches (a pattern too wide)"
	diag "$tmp/tracked"
else
	ok "no tracked file matches .gitignore"
fi
echo "1..$n"
