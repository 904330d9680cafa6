#!/bin/sh
# docs/internals.md names only what exists (issue 25): every path under
# lib/, tools/, include/, tests/, bench/ or fuzz/ (issue 33: and docs/,
# contrib/, scripts/, examples/, .ci/) it gives is a file or
# folder of the source tree (or a program or library the build makes from
# one); every file name it gives alone (`unwind.c`) is one of theirs; and
# every ml__ / ML__ identifier it gives (a function, macro, variable or
# type; `ml__out_*` a prefix) occurs in the sources under those folders.
# Issue 33: its structure agrees with the tree as it is now: the number
# and order of the layers (lib/layers.txt), the layer table's files and
# headers (every file of lib/ in its folder's row), which layers each
# library is built from (lib/local.mk), every lib/ .c file in the table of
# section 2 with the names its row gives found in it, every identifier it
# quotes found in the sources (a call, `name()`, in the C code of lib/,
# tools/ or tests/), every lock in the lock table, the contents against the
# headings, the test folders, the CI stages, the command's files.
# Nothing here knows a file list: other developers move files, and this
# says what the document must now say.  A last case feeds the checks a
# copy of the document with made-up names and wrong structure, so that
# they are seen to fail.
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
	grep -oE '(^|[^A-Za-z0-9_./-])(lib|tools|include|tests|bench|fuzz|docs|contrib|scripts|examples|\.ci)/[A-Za-z0-9_.+/-]*' "$1" |
		sed -E 's,^[^a-z.],,; s,[.,:;]+$,,; s,/+$,,' | sort -u |
		while read -r p; do
			[ -e "$top_srcdir/$p" ] && continue
			# A release tarball has no .ci/ (CI runs from git).
			case $p in .ci/*) [ -d "$top_srcdir/.ci" ] || continue ;; esac
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

# ---- Issue 33: the structure against the tree ----------------------------

# The layers, bottom up: lib/layers.txt, one name a line (# comments).
layers=$(sed 's/#.*//' "$top_srcdir/lib/layers.txt" | awk 'NF { print $1 }')
nlayers=$(echo "$layers" | wc -l)
chain=$(echo $layers | sed 's/ / < /g')

# The document as one line, for sentences that wrap.
flat() { tr '\n' ' ' <"$1" | tr -s ' '; }

# number WORD: the number a word up to twenty names, or WORD.
number() {
	i=0
	for w in zero one two three four five six seven eight nine ten \
		eleven twelve thirteen fourteen fifteen sixteen seventeen \
		eighteen nineteen twenty; do
		[ "$w" = "$1" ] && echo $i && return
		i=$((i + 1))
	done
	echo "$1"
}

# check_layers DOC: "The library is N layers" and every "a < b < ..."
# chain against lib/layers.txt.
check_layers() {
	c=$(flat "$1" | grep -oE 'library is [a-z0-9]+ layers' | awk '{ print $3 }')
	[ -n "$c" ] || echo "no sentence 'The library is N layers'"
	for w in $c; do
		[ "$(number "$w")" = "$nlayers" ] ||
			echo "'$w layers'; lib/layers.txt has $nlayers"
	done
	grep -oE '[a-z]+( < [a-z]+)+' "$1" | sort -u >"$tmp/chains"
	[ -s "$tmp/chains" ] || echo "no chain of the layers ('$chain')"
	while read -r l; do
		[ "$l" = "$chain" ] ||
			echo "the chain '$l'; lib/layers.txt: '$chain'"
	done <"$tmp/chains"
}

# layer_rows DOC: the rows of the layer table (its header names the
# columns # and folder) as "N<tab>folder<tab>files<tab>headers", the
# names without backticks or commas; a row of another shape as "?".
layer_rows() {
	awk -F'|' '
	/^\| # \| folder \|/ { t = 1; next }
	t && /^\|---/ { next }
	t && !/^\|/ { exit }
	t && NF != 7 { print "?\t" $0; next }
	t {
		for (i = 2; i <= 6; i++) {
			gsub(/[`,]/, " ", $i)
			gsub(/ +/, " ", $i)
			sub(/^ /, "", $i)
			sub(/ $/, "", $i)
		}
		print $2 "\t" $3 "\t" $5 "\t" $6
	}' "$1"
}

# same_set WHAT HAVE WANT: says what WANT has that HAVE lacks and back
# (space-separated lists).
same_set() {
	echo $2 | tr ' ' '\n' | grep . | sort -u >"$tmp/have"
	echo $3 | tr ' ' '\n' | grep . | sort -u >"$tmp/want"
	comm -13 "$tmp/have" "$tmp/want" | sed "s|^|$1: missing |"
	comm -23 "$tmp/have" "$tmp/want" | sed "s|^|$1: no such file |"
}

# check_layer_table DOC: one row per layer of lib/layers.txt, in order,
# each with exactly the .c files and the headers of its folder; and no
# folder of lib/ that is not a layer.
check_layer_table() {
	layer_rows "$1" >"$tmp/rows"
	[ -s "$tmp/rows" ] || echo "no layer table (| # | folder | ...)"
	grep '^?' "$tmp/rows" | sed 's/^?./a row of another shape: /'
	i=0
	for l in $layers; do
		i=$((i + 1))
		row=$(awk -F'\t' -v i=$i '$1 == i' "$tmp/rows")
		if [ -z "$row" ]; then
			echo "layer $i ($l): no row"
			continue
		fi
		f=$(echo "$row" | cut -f2)
		[ "$f" = "lib/$l" ] ||
			echo "row $i is $f; layer $i of lib/layers.txt is lib/$l"
		c=$(cd "$top_srcdir/lib/$l" 2>/dev/null && ls | grep '\.c$')
		h=$(cd "$top_srcdir/lib/$l" 2>/dev/null && ls | grep '\.h$')
		same_set "row $i (lib/$l), files" "$(echo "$row" | cut -f3)" "$c"
		same_set "row $i (lib/$l), headers" "$(echo "$row" | cut -f4)" "$h"
	done
	awk -F'\t' -v n="$nlayers" '$1 != "?" && ($1 + 0 < 1 || $1 + 0 > n) {
		print "row " $1 " (" $2 "): lib/layers.txt has " n " layers" }' \
		"$tmp/rows"
	for d in "$top_srcdir"/lib/*/; do
		d=${d%/}
		d=${d##*/}
		echo "$layers" | grep -qxF "$d" ||
			echo "lib/$d is not a layer of lib/layers.txt"
	done
}

# mk_folders VAR: the folders of lib/ whose sources lib/local.mk gives
# to VAR (continuation lines joined).
mk_folders() {
	sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$top_srcdir/lib/local.mk" |
		grep "^$1 *=" | tr ' \t' '\n\n' | grep -E '^lib/[^/]+/' |
		cut -d/ -f2 | sort -u
}

# check_builds DOC: each "Layers 1 to K are built as the convenience
# library `lib/libmlcore.la`" and "and layer(s) N (to M) on top of it"
# against lib/local.mk.
check_builds() {
	ks=$(flat "$1" | grep -oE 'Layers 1 to [0-9]+ are built as the convenience library `lib/libmlcore.la`' |
		awk '{ print $4 }')
	[ -n "$ks" ] ||
		echo "no sentence 'Layers 1 to K are built as the convenience library \`lib/libmlcore.la\`'"
	for k in $ks; do
		core=$(echo "$layers" | head -n "$k")
		rest=$(echo "$layers" | tail -n +"$((k + 1))")
		same_set "lib/libmlcore.la's layers (1 to $k)" \
			"$core" "$(mk_folders lib_libmlcore_la_SOURCES)"
		same_set "libmemlimits.so's own layers (above $k)" \
			"$rest" "$(mk_folders lib_libmemlimits_la_SOURCES)"
	done
	flat "$1" | grep -oE 'and layers? [0-9]+( to [0-9]+)? on top of it' |
		while read -r a; do
			a=$(echo "$a" | grep -oE '[0-9]+' | tr '\n' ' ')
			w=$(mk_folders lib_libmemlimits_la_SOURCES | while read -r l; do
				echo "$layers" | grep -nxF "$l" | cut -d: -f1
			done | sort -n | sed -n '1p;$p' | uniq | tr '\n' ' ')
			[ "$a" = "$w" ] ||
				echo "the layers on top of lib/libmlcore.la are '$a'; lib/local.mk's: '$w'"
		done
}

# table_rows DOC HEADER: the rows of every table whose header line
# starts with HEADER (a fixed string).
table_rows() {
	awk -v h="$2" 'index($0, h) == 1 { t = 1; next }
	t && /^\|---/ { next }
	t && !/^\|/ { t = 0; next }
	t' "$1"
}

# check_rows DOC HEADER COLS: in every row of those tables, each
# identifier quoted in the columns COLS (numbers from 1) occurs, as a
# word (`ml__out_*`: a prefix), in a file of lib/ that the row names (by
# its path, or by its name alone: `ml__lineage` (defined in `thread.c`))
# or in a header of that file's folder.
check_rows() {
	table_rows "$1" "$2" >"$tmp/trows"
	[ -s "$tmp/trows" ] || echo "no table '$2 ...'"
	while read -r row; do
		files=
		for o in $(echo "$row" | grep -oE '`[A-Za-z0-9_/.-]+\.[ch]`' |
			tr -d '`'); do
			case $o in
			lib/*) [ -f "$top_srcdir/$o" ] && files="$files $o" ;;
			*/*) ;;
			*) files="$files $(cd "$top_srcdir" && find lib -name "$o")" ;;
			esac
		done
		if [ -z "$files" ]; then
			echo "a row names no file of lib/: $row"
			continue
		fi
		where=$files
		for w in $files; do
			where="$where $(cd "$top_srcdir" && ls "${w%/*}"/*.h)"
		done
		first=$(echo $files | cut -d' ' -f1)
		echo "$row" | awk -F'|' -v c="$3" '{
			n = split(c, a, " ")
			for (i = 1; i <= n; i++) print $(a[i] + 1) }' |
			grep -oE '`[A-Za-z_][A-Za-z0-9_]*(\*|\([^`()]*\))?`' |
			tr -d '`' | sed 's/(.*//' | sort -u | while read -r n; do
			case $n in
			*\*) re=${n%\*} ;;
			*) re="$n([^A-Za-z0-9_]|\$)" ;;
			esac
			(cd "$top_srcdir" && grep -qE "(^|[^A-Za-z0-9_])$re" $where) ||
				echo "$first's row: $n is not in$files (nor its folder's headers)"
		done
	done <"$tmp/trows"
}

# check_file_table DOC: every .c file of lib/ has a row in section 2's
# table (| file | owns | ...), and every identifier a row quotes is in
# its file (check_rows).
check_file_table() {
	table_rows "$1" '| file | owns |' >"$tmp/frows"
	(cd "$top_srcdir" && ls lib/*/*.c) | while read -r f; do
		grep -qF "| \`$f\` |" "$tmp/frows" || echo "$f: no row"
	done
	check_rows "$1" '| file | owns |' "2 3"
}

# check_tables DOC: the same for the other tables that name a file in
# each row: the shared helpers, the steps of sections 4 and 5, the TLS
# blocks; and in the text, a name followed by its file, "`name`
# (`file.c`", is in that file or its folder's headers.
check_tables() {
	check_rows "$1" '| job | helper | where |' 2
	check_rows "$1" '| step | file | function | what |' "3 4"
	check_rows "$1" '| block | file | bytes | what |' "1 4"
	flat "$1" |
		grep -oE '`[A-Za-z_][A-Za-z0-9_]*(\(\))?` \(`[A-Za-z0-9_/.-]+\.[ch]`' |
		sort -u | sed -E 's/^`([A-Za-z0-9_]+)[^`]*` \(`([^`]+)`$/\1 \2/' |
		while read -r n f; do
			case $f in
			lib/* | tools/*) files=$f ;;
			*/*) continue ;;
			*) files=$(cd "$top_srcdir" && find lib tools -name "$f") ;;
			esac
			w=$files
			for x in $files; do
				w="$w $(cd "$top_srcdir" && ls "${x%/*}"/*.h)"
			done
			[ -n "$files" ] && (cd "$top_srcdir" &&
				grep -qE "(^|[^A-Za-z0-9_])$n([^A-Za-z0-9_]|\$)" $w) ||
				echo "\`$n\` (\`$f\`: it is not there"
		done
}

# The sources that identifiers are looked up in, and the few outside
# names the document gives to say what is not used.
src_dirs=
for d in lib tools include tests fuzz bench contrib python scripts .ci; do
	[ -d "$top_srcdir/$d" ] && src_dirs="$src_dirs $d"
done
src_dirs=${src_dirs# }
outside="PT_TLS pthread_once Makefile"

# check_idents DOC: every identifier quoted alone (`name`, `name()`,
# `name(args)`) occurs as a word in the sources; one quoted as a call
# (`name()`, `name(args)`) is called or defined, `name(`, in the C code
# of lib/ or tools/ (or the tests' own, `tap_case()`).
check_idents() {
	(cd "$top_srcdir" && find $src_dirs configure.ac Makefile.am -type f \
		! -name '*.md' -exec grep -IohE '[A-Za-z_][A-Za-z0-9_]*' {} + |
		sort -u) >"$tmp/words"
	(cd "$top_srcdir" && find lib tools tests $(test -d python && echo python) \( -name '*.[ch]' -o \
		-name '*.cc' -o -name '*.sh' \) -exec grep -ohE '[A-Za-z_][A-Za-z0-9_]* *\(' {} + |
		tr -d ' (' | sort -u) >"$tmp/calls"
	grep -oE '`[A-Za-z_][A-Za-z0-9_]*(\(\)|\([^`()]*\))?`' "$1" |
		tr -d '`' | sort -u | while read -r t; do
		n=${t%%(*}
		case " $outside " in *" $n "*) continue ;; esac
		grep -qxF "$n" "$tmp/words" ||
			echo "$n: not in the sources ($src_dirs)"
		[ "$n" = "$t" ] || grep -qxF "$n" "$tmp/calls" ||
			echo "$t: $n is not called or defined in lib/, tools/ or tests/"
	done
}

# check_locks DOC: every ML__LOCK / ML__LOCKS of lib/ has a row of the
# lock table (| rank | lock | file | ...) with its rank, name and file,
# every row of the table is such a lock, and every ML__POOL is named in
# the pools' row.
check_locks() {
	(cd "$top_srcdir" && grep -rnoE 'ML__(LOCKS?|POOL)\([^)]*\)' lib |
		grep -v '/util/util.h:') |
		sed -E 's/^([^:]+):[0-9]+:ML__([A-Z]+)\(/\1 \2 /; s/[(),]/ /g' |
		awk '$2 == "POOL" { print $1, "POOL", $3 == "static" ? $4 : $3; next }
		{ $0 = $0; if ($3 != "static") { print $1, $2, $3, $NF } else { print $1, $2, $4, $NF } }' \
		>"$tmp/locks"
	awk -F'|' '/^\| rank /{ t = 1; next } t && /^\|---/ { next }
		t && !/^\|/ { exit } t' "$1" >"$tmp/lrows"
	[ -s "$tmp/lrows" ] || echo "no lock table (| rank | lock | file | ...)"
	while read -r f kind name rank; do
		if [ "$kind" = POOL ]; then
			grep -F "the pools' locks" "$tmp/lrows" | grep -qF "\`$name\`" ||
				echo "pool $name ($f): not in the pools' row"
			continue
		fi
		awk -F'|' -v r="\`$rank\`" -v n="$name" -v f="\`$f\`" '
			{ for (i = 2; i <= 4; i++) { gsub(/^ +| +$/, "", $i) }
			  l = $3; gsub(/`/, "", l); sub(/\[.*/, "", l) }
			$2 == r && l == n && $4 == f { found = 1 }
			END { exit !found }' "$tmp/lrows" ||
			echo "lock $name ($f, $rank): no row"
	done <"$tmp/locks"
	grep -vF "the pools' locks" "$tmp/lrows" | awk -F'|' '{
		for (i = 2; i <= 4; i++) { gsub(/^ +| +$/, "", $i); gsub(/`/, "", $i) }
		l = $3; sub(/\[.*/, "", l); print $4, l, $2 }' |
		while read -r f name rank; do
			grep -qxF "$f LOCK $name $rank" "$tmp/locks" ||
				grep -qxF "$f LOCKS $name $rank" "$tmp/locks" ||
				echo "row $rank $name $f: no such lock"
		done
}

# check_contents DOC: the contents name every "## " heading, in order,
# with its number.
check_contents() {
	flat "$1" | sed -n 's/.*Contents: \(.*\)/\1/p' | sed 's/ ## .*//' |
		sed 's/ · /\n/g; s/\. *$//' | awk '{ sub(/^ +/, ""); print }' \
		>"$tmp/toc"
	sed -n 's/^## //p' "$1" | sed -E 's/ \(`[^`]*`(, `[^`]*`)*\)$//' >"$tmp/heads"
	[ -s "$tmp/toc" ] || echo "no contents (Contents: 1. ... · 2. ...)"
	diff "$tmp/toc" "$tmp/heads" | grep '^[<>]' |
		sed 's/^</contents:/; s/^>/heading:/'
}

# check_test_folders DOC: section "Tests and CI" lists every tests/
# folder that has a local.mk, and only those.
check_test_folders() {
	have=$(grep -oE '^- `tests/[a-z0-9_-]+/`' "$1" | grep -oE '[a-z0-9_-]+/`' | tr -d '/`')
	want=$(cd "$top_srcdir/tests" && ls */local.mk | cut -d/ -f1)
	same_set "the test folders" "$have" "$want" | sed 's/no such file/no such folder/'
}

# check_tools DOC: the library files the command compiles in, as the
# sentence "command compiles `lib/...` ... in (`tools/local.mk`)" names
# them, are tools/local.mk's; every file of tools/ is named.
check_tools() {
	have=$(flat "$1" | grep -oE 'command compiles `lib/[^(]*in \(`tools/local.mk`\)' |
		grep -oE 'lib/[a-z]+/[A-Za-z0-9_-]+\.c')
	[ -n "$have" ] ||
		echo "no sentence 'command compiles \`lib/...\` ... in (\`tools/local.mk\`)'"
	want=$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$top_srcdir/tools/local.mk" |
		grep '^tools_memlimits_SOURCES' | tr ' \t' '\n\n' |
		grep -E '^lib/.*\.c$')
	same_set "the library files the command compiles in" "$have" "$want" |
		sed 's/no such file/not in tools\/local.mk:/'
	(cd "$top_srcdir/tools" && ls | grep -E '\.[ch]$') | while read -r f; do
		grep -qF "$f" "$1" || echo "tools/$f: not named"
	done
}

# check_ci DOC: the CI paragraph's stages (a. ... n.) are .ci/run's.
check_ci() {
	want=$(sed -n 's/^#   \([a-z]\)\. .*/\1/p' "$top_srcdir/.ci/run" | tr -d '\n')
	have=$(awk 'BEGIN { RS = "" } /^\*\*CI\*\*/' "$1" | tr '\n' ' ' |
		grep -oE '(^|[ ;:])[a-z]\. ' | tr -d ' ;:.' | tr -d '\n')
	[ -n "$want" ] || echo ".ci/run lists no stages"
	[ "$have" = "$want" ] ||
		echo "the CI stages are '$have'; .ci/run: '$want'"
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
		echo "A file lib/core/no-such-file$$.c, docs/gone$$.md, a \`gone$$.c\`,"
		echo "a function \`ml${u}no_such_function_$$\`, a macro"
		echo "\`ML${u}NO_SUCH_MACRO_$$\` and a prefix \`ml${u}zz$$*\`."
	} >"$tmp/bogus.md"
	check_paths "$tmp/bogus.md" >"$tmp/p"
	check_files "$tmp/bogus.md" >"$tmp/f"
	check_names "$tmp/bogus.md" >"$tmp/n"
	if grep -q "no-such-file$$" "$tmp/p" && grep -q "docs/gone$$" "$tmp/p" &&
		grep -q "gone$$" "$tmp/f" &&
		[ "$(grep -c "_$$\|zz$$" "$tmp/n")" -eq 3 ]; then
		ok "made-up paths, files and names are caught"
	else
		notok "made-up paths, files and names are caught"
		diag "$tmp/p" "$tmp/f" "$tmp/n"
	fi
fi

# structure CASE CHECK WHAT: a case that passes when CHECK says nothing.
structure() {
	tap_case "$1" || return 0
	"$2" "$doc" >"$tmp/out"
	if ! [ -s "$tmp/out" ]; then
		ok "$3"
	else
		notok "$3"
		diag "$tmp/out"
	fi
}
structure layers check_layers \
	"the number and order of the layers are lib/layers.txt's ($nlayers)"
structure layer-table check_layer_table \
	"the layer table has each layer's files and headers, as lib/ has them"
structure builds check_builds \
	"the layers of lib/libmlcore.la and libmemlimits.so are lib/local.mk's"
structure file-table check_file_table \
	"every .c file of lib/ has a row in section 2, whose names are in it"
structure tables check_tables \
	"the tables' and the text's names are in the files given with them"
structure idents check_idents \
	"every identifier quoted is in the sources, every call in the C code"
structure locks check_locks \
	"the lock table has every lock and pool of lib/ with its rank and file"
structure contents check_contents "the contents list every heading, in order"
structure test-folders check_test_folders \
	"section 'Tests and CI' lists every folder of tests/ with a local.mk"
if ! [ -f "$top_srcdir/.ci/run" ]; then
	tap_case ci && skip "no .ci/run in this tree (a release tarball)"
else
	structure ci check_ci "the CI stages are .ci/run's"
fi
structure tools check_tools \
	"the command's files and the library files it compiles in are named"

# The structure checks fail on a document with a wrong count, a wrong
# chain, a made-up or missing file, wrong builds, a missing row, a
# made-up name or call, a missing and a made-up lock, an unlisted heading
# and test folder, a stage too many (where .ci/run is there: a release
# tarball has none), a library file the command does not compile, and
# a made-up helper and a function of another file in the tables' rows
# and in the text.
if tap_case self-check-structure; then
	u=__
	awk -v pid=$$ -v u=$u '
	/^\| # \| folder \|/ { lt = 1 }
	lt && /^\| 1 \|/ {
		sub(/\| [^|]*\| [^|]*\|$/, "")
		$0 = $0 "| `gone" pid ".c` | `gone" pid ".h` |"
	}
	/^\| file \| owns \|/ { ft = 1; skip = 2 }
	ft && skip && /^\| `lib\// {
		if (skip == 2) { skip = 1; next }
		sub(/ \|$/, ", `nothere_" pid "` |"); skip = 0
	}
	/^\| rank / { kt = 1; ks = 1 }
	kt && ks && /^\| `ML__RANK_/ { ks = 0; next }
	kt && !/^\|/ {
		print "| `ML__RANK_HELD` | `nolock_" pid "` | `lib/tasks/held.c` | x |"
		kt = 0
	}
	{ print }
	END {
		print "The library is many layers, `util < run`."
		print "Layers 1 to 2 are built as the convenience library"
		print "`lib/libmlcore.la`, and layer 9 on top of it. A call"
		print "`made_up_" pid "()` and `ml" u "meter_self()`."
		print ""
		print "- `tests/gone" pid "/`: none."
		print ""
		print "**CI** is z. nothing. The command compiles"
		print "`lib/util/gone" pid ".c` in (`tools/local.mk`)."
		print ""
		print "| job | helper | where |"
		print "|---|---|---|"
		print "| x | `ml" u "parse_u64`, `gone_helper_" pid "` | `lib/util/parse.c` |"
		print ""
		print "| step | file | function | what |"
		print "|---|---|---|---|"
		print "| 1 | `lib/util/parse.c` | `ml" u "sampler_hit` | x |"
		print ""
		print "The tails, `tails_update` (`held.c`)."
		print ""
		print "## 99. Made up " pid
	}' "$doc" | sed 's/^\*\*CI\*\* is `/**CI** is y. none; `/' >"$tmp/bogus2.md"
	fails= nw=0
	checks="layers layer_table builds file_table idents locks contents"
	checks="$checks test_folders tools tables"
	[ -f "$top_srcdir/.ci/run" ] && checks="$checks ci"
	for c in $checks; do
		"check_$c" "$tmp/bogus2.md" >"$tmp/s.$c"
	done
	want() {
		case " $checks " in *" $1 "*) ;; *) return ;; esac
		nw=$((nw + 1))
		grep -q "$2" "$tmp/s.$1" || fails="$fails $1:$2"
	}
	want layers "'many layers'"
	want layers "the chain 'util < run'"
	want layer_table "no such file gone$$.c"
	want layer_table "no such file gone$$.h"
	want layer_table "row 1 (lib/.*), files: missing"
	want builds "lib/libmlcore.la's layers (1 to 2)"
	want builds "are '9 '"
	want file_table "^lib/.*: no row"
	want file_table "nothere_$$ is not in"
	want idents "made_up_$$: not in the sources"
	want idents "made_up_$$(): made_up_$$ is not called"
	want idents "ml${u}meter_self(): .* is not called"
	want locks "nolock_$$ lib/tasks/held.c: no such lock"
	want locks "): no row"
	want contents "heading: 99. Made up $$"
	want test_folders "no such folder gone$$"
	want ci "the CI stages are 'y.*z'"
	want tools "compiles in: not in tools/local.mk: lib/util/gone$$.c"
	want tables "gone_helper_$$ is not in lib/util/parse.c"
	want tables "ml${u}sampler_hit is not in lib/util/parse.c"
	want tables "tails_update. (.held.c.: it is not there"
	if [ -z "$fails" ]; then
		ok "made-up structure is caught ($nw ways)"
	else
		notok "made-up structure is caught:$fails"
		for c in $checks; do
			diag "$tmp/s.$c"
		done
	fi
fi

tap_done
