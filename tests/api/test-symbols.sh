#!/bin/sh
# The shared library exports exactly the committed list: the ml_* API and
# the malloc family.  Anything else leaking out (an internal ml__ helper, a
# libunwind symbol) would interpose on, or be interposed by, the host.
lib=${MEMLIMITS_LIB:?} list=${top_srcdir:?}/lib/exported-symbols.txt
header=$top_srcdir/include/memlimits.h
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-symbols.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$top_srcdir/tests/tap/tap.sh"

if ${NM:-nm} -D --defined-only "$lib" >"$tmp/nm" 2>"$tmp/err" &&
	test -s "$tmp/nm"; then
	ok "$NM -D --defined-only lists the library's symbols"
else
	notok "$NM -D --defined-only $lib"
	diag "$tmp/err"
fi

# Columns: value, type, name (possibly name@@VERSION).
awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' "$tmp/nm" | LC_ALL=C sort -u >"$tmp/got"
grep -v '^[[:space:]]*$' "$list" | LC_ALL=C sort -u >"$tmp/want"
if diff -u "$tmp/want" "$tmp/got" >"$tmp/diff"; then
	ok "exported symbols match lib/exported-symbols.txt ($(wc -l <"$tmp/got") symbols)"
else
	notok "exported symbols differ from lib/exported-symbols.txt (- listed, + exported)"
	diag "$tmp/diff"
fi

# Every export is code: a data symbol would be ABI we never meant to have.
awk 'NF >= 3 && $2 != "T" && $2 != "W" && $2 != "i" { print }' "$tmp/nm" >"$tmp/data"
if test -s "$tmp/data"; then
	notok "every exported symbol is a function"
	diag "$tmp/data"
else
	ok "every exported symbol is a function"
fi

# The list and the header agree on the API: each ML_EXPORT declaration is
# listed and each listed ml_ name is declared.
sed -n 's/^ML_EXPORT[^(]*[ *]\(ml_[a-z0-9_]*\)(.*/\1/p' "$header" | LC_ALL=C sort -u >"$tmp/decl"
grep '^ml_' "$tmp/want" >"$tmp/listed"
if test -s "$tmp/decl" && diff -u "$tmp/decl" "$tmp/listed" >"$tmp/diff2"; then
	ok "the ml_ exports are exactly the header's ML_EXPORT declarations"
else
	notok "header ML_EXPORT declarations vs listed ml_ symbols (- declared, + listed)"
	diag "$tmp/diff2"
fi

# The malloc family the library interposes is all there.
missing=
for f in malloc free calloc realloc reallocarray posix_memalign \
	aligned_alloc memalign valloc pvalloc malloc_usable_size; do
	grep -qx "$f" "$tmp/got" || missing="$missing $f"
done
if test -z "$missing"; then
	ok "the whole malloc family is exported"
else
	notok "malloc family functions not exported:$missing"
fi
echo "1..$n"
