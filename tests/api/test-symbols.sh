#!/bin/sh
# The shared library exports exactly the committed list: the ml_* API and
# the malloc family.  Anything else leaking out (an internal ml__ helper, a
# libunwind symbol) would interpose on, or be interposed by, the host.
lib=${MEMLIMITS_LIB:?} map=${top_srcdir:?}/lib/memlimits.map
header=$top_srcdir/include/memlimits.h
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-symbols.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$top_srcdir/tests/tap/tap.sh"

# The version nodes themselves show as absolute symbols (type A): not ours
# to list.
if ${NM:-nm} -D --defined-only "$lib" 2>"$tmp/err" |
	awk '$2 != "A"' >"$tmp/nm" &&
	test -s "$tmp/nm"; then
	ok "$NM -D --defined-only lists the library's symbols"
else
	notok "$NM -D --defined-only $lib"
	diag "$tmp/err"
fi

# Columns: value, type, name (possibly name@@VERSION).
awk 'NF >= 3 { sub(/@.*/, "", $3); print $3 }' "$tmp/nm" | LC_ALL=C sort -u >"$tmp/got"
# The names in the version script's global: sections, with their nodes.
sed 's#/\*.*\*/##; /^[[:space:]]*\/\*/,/\*\//d' "$map" | awk '
	/^[A-Z0-9_.]+ *\{/ { node = $1; next }
	/global:/ { g = 1; next }
	/local:/ { g = 0; next }
	/^\}/ { g = 0; next }
	g && /^[[:space:]]*[a-z_0-9]+;/ { gsub(/[;[:space:]]/, ""); print $0, node }' >"$tmp/nodes"
# The malloc family is exported unversioned (lib/memlimits.map says why),
# and so is the mmap family since 0.4 (lib/api/mmap.c; pkey_mprotect and
# madvise since 0.5), for the same reason, and glibc's public __libc_* names
# of the family (issue 41: a program that calls __libc_malloc@GLIBC_2.2.5
# binds to an unversioned definition), and sbrk, __sbrk, brk, shmat and
# shmdt (lib/api/private.c).
family="malloc free calloc realloc reallocarray posix_memalign aligned_alloc
	memalign valloc pvalloc malloc_usable_size cfree
	__libc_malloc __libc_free __libc_calloc __libc_realloc
	__libc_reallocarray __libc_memalign __libc_valloc __libc_pvalloc
	mmap mmap64 munmap mremap mprotect pkey_mprotect madvise
	sbrk __sbrk brk shmat shmdt"
{
	awk '{ print $1 }' "$tmp/nodes"
	for f in $family; do echo "$f"; done
} | LC_ALL=C sort -u >"$tmp/want"
if diff -u "$tmp/want" "$tmp/got" >"$tmp/diff"; then
	ok "exported symbols match lib/memlimits.map ($(wc -l <"$tmp/got") symbols)"
else
	notok "exported symbols differ from lib/memlimits.map (- listed, + exported)"
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

# Each name has its versions: name@@NODE for the last node listing it
# (the default), name@NODE for an earlier one (an old layout).
awk 'NF >= 3 { print $3 }' "$tmp/nm" | grep @ | LC_ALL=C sort -u >"$tmp/versioned"
awk '{ n[$1]++; last[$1] = $2; all[$1] = all[$1] " " $2 }
	END { for (s in n) { split(all[s], v, " ")
		for (i in v) print s (v[i] == last[s] ? "@@" : "@") v[i] } }' \
	"$tmp/nodes" | LC_ALL=C sort -u >"$tmp/wantver"
if test -s "$tmp/wantver" && diff -u "$tmp/wantver" "$tmp/versioned" >"$tmp/diff3"; then
	ok "every export carries the versions lib/memlimits.map gives it ($(wc -l <"$tmp/versioned"))"
else
	notok "exported versions differ from lib/memlimits.map (- expected, + exported)"
	diag "$tmp/diff3"
fi

# The malloc and mmap families the library interposes are all there,
# unversioned:
# libc's own calls (versioned references to GLIBC_2.2.5) bind only to an
# unversioned malloc.
missing=
for f in $family; do
	awk 'NF >= 3 { print $3 }' "$tmp/nm" | grep -qx "$f" ||
		missing="$missing $f"
done
if test -z "$missing"; then
	ok "the whole malloc family is exported, unversioned"
else
	notok "malloc family functions not exported unversioned:$missing"
fi
echo "1..$n"
