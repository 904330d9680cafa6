#!/bin/sh
# docs/internals.md names only what exists (issue 25): every path under
# lib/, tools/, include/, tests/, bench/ or fuzz/ it gives is a file or
# folder of the source tree (or a program or library the build makes from
# one); every file name it gives alone (`unwind.c`) is one of theirs; and
# every ml__ / ML__ identifier it gives (a function, macro, variable or
# type; `ml__out_*` a prefix) occurs in the sources under those folders.
# When a file is split or a name changes, this says what the document must
# now say.  A last case feeds the checks a copy of the document with
# made-up names, so that they are seen to fail.
: "${top_srcdir:?}"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-internals.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$top_srcdir/tests/tap/tap.sh"
export LC_ALL=C

doc=$top_srcdir/docs/internals.md
dirs="lib tools include tests bench fuzz"

# Every ml__ / ML__ name in the sources (not in docs/: the document cannot
# vouch for itself).
(cd "$top_srcdir" && find $dirs -type f \( -name '*.c' -o -name '*.h' \
	-o -name '*.cc' -o -name '*.sh' -o -name '*.mk' -o -name '*.map' \
	-o -name '*.txt' \) -exec grep -hoE '(ml|ML)__[A-Za-z0-9_]+' {} + |
	sort -u) >"$tmp/names"
# Every file name under those folders.
(cd "$top_srcdir" && find $dirs -type f | sed 's,.*/,,' | sort -u) >"$tmp/files"
# The build's own lists: a path named there is a product of the build
# (lib/libmlcore.la, tests/concurrency/test-tsan).
(cd "$top_srcdir" && find . -name local.mk -o -name Makefile.am |
	sed 's,^\./,,' | xargs cat) >"$tmp/mk"

# check_paths DOC: prints each path that names nothing.
check_paths() {
	grep -oE '(^|[^A-Za-z0-9_./-])(lib|tools|include|tests|bench|fuzz)/[A-Za-z0-9_.+/-]*' "$1" |
		sed -E 's,^[^a-z],,; s,[.,:;]+$,,; s,/+$,,' | sort -u |
		while read -r p; do
			[ -e "$top_srcdir/$p" ] && continue
			[ -e "$top_srcdir/$p.c" ] || [ -e "$top_srcdir/$p.cc" ] ||
				[ -e "$top_srcdir/$p.sh" ] && continue
			awk -v p="$p" '{ for (i = 1; i <= NF; i++) if ($i == p) f = 1 }
				END { exit !f }' "$tmp/mk" && continue
			echo "$p: no such file or folder"
		done
}

# check_files DOC: prints each file name given alone that no file has.
check_files() {
	grep -oE '`[A-Za-z0-9_+-]+\.(c|h|cc|sh|mk)`' "$1" | tr -d '`' |
		sort -u | while read -r f; do
			grep -qxF "$f" "$tmp/files" ||
				echo "$f: no file of that name under $dirs"
		done
}

# check_names DOC: prints each ml__ / ML__ name (or prefix*) that the
# sources do not have.
check_names() {
	grep -oE '(ml|ML)__[A-Za-z0-9_]+\*?' "$1" | sort -u | while read -r n; do
		case $n in
		*\*)
			p=${n%\*}
			grep -q "^$p" "$tmp/names" ||
				echo "$n: no name with this prefix in the sources"
			;;
		*)
			grep -qxF "$n" "$tmp/names" ||
				echo "$n: not in the sources"
			;;
		esac
	done
}

if tap_case paths; then
	check_paths "$doc" >"$tmp/out"
	np=$(grep -coE '(lib|tools|include|tests|bench|fuzz)/' "$doc")
	if [ "$np" -gt 20 ] && ! [ -s "$tmp/out" ]; then
		ok "every path docs/internals.md names exists ($np)"
	else
		notok "docs/internals.md names paths that do not exist ($np)"
		diag "$tmp/out"
	fi
fi

if tap_case files; then
	check_files "$doc" >"$tmp/out"
	if ! [ -s "$tmp/out" ]; then
		ok "every file docs/internals.md names alone exists"
	else
		notok "docs/internals.md names files that do not exist"
		diag "$tmp/out"
	fi
fi

if tap_case names; then
	check_names "$doc" >"$tmp/out"
	nn=$(grep -oE '(ml|ML)__[A-Za-z0-9_]+' "$doc" | sort -u | wc -l)
	if [ "$nn" -gt 50 ] && ! [ -s "$tmp/out" ]; then
		ok "every ml__/ML__ name docs/internals.md gives is in the sources ($nn)"
	else
		notok "docs/internals.md gives names the sources do not have ($nn)"
		diag "$tmp/out"
	fi
fi

# The checks fail on a document that names what does not exist.  The
# made-up names are put together here, so that this file does not hold
# them whole (it is one of the sources the names are looked up in).
if tap_case self-check; then
	u=__
	{
		cat "$doc"
		echo "A file lib/core/no-such-file$$.c, a \`gone$$.c\`,"
		echo "a function \`ml${u}no_such_function_$$\`, a macro"
		echo "\`ML${u}NO_SUCH_MACRO_$$\` and a prefix \`ml${u}zz$$*\`."
	} >"$tmp/bogus.md"
	check_paths "$tmp/bogus.md" >"$tmp/p"
	check_files "$tmp/bogus.md" >"$tmp/f"
	check_names "$tmp/bogus.md" >"$tmp/n"
	if grep -q "no-such-file$$" "$tmp/p" && grep -q "gone$$" "$tmp/f" &&
		[ "$(grep -c "_$$\|zz$$" "$tmp/n")" -eq 3 ]; then
		ok "made-up paths, files and names are caught"
	else
		notok "made-up paths, files and names are caught"
		diag "$tmp/p" "$tmp/f" "$tmp/n"
	fi
fi

tap_done
