#!/bin/sh
# The project stands alone and ships its documents: every file that the
# README or a document in docs/ names (a path in backquotes or a Markdown
# link) exists in the source tree and is in the release tarball
# (automake's DISTFILES, which `make dist` and `make distcheck` pack).
: "${top_srcdir:?}" "${top_builddir:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-dist.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C

# DISTFILES as the top Makefile has it, made relative to the source tree.
unset MAKEFLAGS MFLAGS MAKELEVEL
printf 'ml-print-dist:\n\t@echo $(srcdir); echo $(DISTFILES)\n' >"$tmp/print.mk"
if ! ${MAKE:-make} -s -C "$top_builddir" -f Makefile -f "$tmp/print.mk" \
	ml-print-dist >"$tmp/make.out" 2>"$tmp/make.err"; then
	echo "Bail out! cannot read DISTFILES from $top_builddir/Makefile"
	cat "$tmp/make.err"
	exit 1
fi
srcdir=$(sed -n 1p "$tmp/make.out")
sed -n 2p "$tmp/make.out" | tr ' ' '\n' | sed -e '/^$/d' \
	-e "s|^$srcdir/||" -e "s|^$top_srcdir/||" -e 's|^\./||' |
	sort -u >"$tmp/dist"

# Paths named by the documents: `dir/file.ext` or `file.md` in backquotes,
# and (target) of Markdown links.  A bare `file.c` in the text names a
# function's file in context, not a path; URLs are not paths.
cd "$top_srcdir" || exit 1
for doc in README.md docs/*.md; do
	dir=$(dirname "$doc")
	{
		grep -oE '`[A-Za-z0-9_.-]*(/[A-Za-z0-9_.-]+)*\.(md|[1-9]|png|sh|c|h|txt)`' "$doc" |
			tr -d '`' | grep -E '/|\.md$'
		grep -oE '\]\([^)#]+' "$doc" | sed 's/^](//'
	} | grep -vE '^[a-z]+:' | sort -u | while read -r ref; do
		# Relative to the top, else to the document's directory.
		if test -e "$ref"; then
			echo "$doc $ref"
		elif test -e "$dir/$ref"; then
			echo "$doc $(cd "$dir" && realpath -m --relative-to="$top_srcdir" "$ref")"
		else
			echo "$doc MISSING:$ref"
		fi
	done
done >"$tmp/refs"

grep ' MISSING:' "$tmp/refs" | sed 's/ MISSING:/ names /' >"$tmp/missing"
if test -s "$tmp/missing"; then
	notok "documents name files that are not in the project"
	diag "$tmp/missing"
else
	ok "every file the documents name is in the project ($(wc -l <"$tmp/refs") references)"
fi

: >"$tmp/undist"
grep -v ' MISSING:' "$tmp/refs" | while read -r doc ref; do
	found=no
	while read -r d; do
		case $ref in "$d" | "$d"/*) found=yes; break ;; esac
	done <"$tmp/dist"
	test $found = yes || echo "$doc names $ref" >>"$tmp/undist"
done
if test -s "$tmp/undist"; then
	notok "named files missing from the release tarball (EXTRA_DIST)"
	diag "$tmp/undist"
else
	ok "every file the documents name is in the release tarball"
fi

# The check itself sees the tarball's list.
if grep -qx 'README.md' "$tmp/dist" && grep -qx 'docs/statistics.md' "$tmp/dist"; then
	ok "DISTFILES read from the Makefile ($(wc -l <"$tmp/dist") entries)"
else
	notok "DISTFILES not understood"
	diag "$tmp/dist"
fi
echo "1..$n"
