#!/bin/sh
# The library's layers go one way (docs/internals.md, "Layers"): a file in
# lib/<layer>/ includes headers of its own layer and those below it only
# (lib/layers.txt, bottom first); an object of a layer references no symbol
# defined in a higher layer (nm of the built objects); and the files'
# references form no loop, within a layer too (tsort).  A last case feeds
# the symbol check a made-up upward reference, so that it is seen to fail.
: "${top_srcdir:?}" "${top_builddir:?}"
NM=${NM:-nm}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-layers.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
. "$top_srcdir/tests/tap/tap.sh"
export LC_ALL=C

# rank LAYER: its position in lib/layers.txt (1 = bottom), or nothing.
awk 'NF { print $1, NR }' "$top_srcdir/lib/layers.txt" >"$tmp/ranks"
rank() {
	awk -v l="$1" '$1 == l { print $2 }' "$tmp/ranks"
}

# ---- 1. Includes -----------------------------------------------------------
: >"$tmp/inc"
nfiles=0
for f in "$top_srcdir"/lib/*/*.c "$top_srcdir"/lib/*/*.h; do
	layer=$(basename "$(dirname "$f")")
	r=$(rank "$layer")
	nfiles=$((nfiles + 1))
	if [ -z "$r" ]; then
		echo "lib/$layer/$(basename "$f"): folder not in lib/layers.txt" >>"$tmp/inc"
		continue
	fi
	sed -n 's/^#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" |
		while read -r h; do
			case $h in
			*/*)
				hl=${h%%/*}
				hr=$(rank "$hl")
				if [ -z "$hr" ] || [ "$hr" -gt "$r" ]; then
					echo "lib/$layer/$(basename "$f") includes \"$h\""
				fi
				;;
			config.h | memlimits.h) ;;
			*) # a header of its own folder
				[ -f "$(dirname "$f")/$h" ] ||
					echo "lib/$layer/$(basename "$f") includes \"$h\" (not in lib/$layer/)"
				;;
			esac
		done >>"$tmp/inc"
done
if [ "$nfiles" -gt 20 ] && ! [ -s "$tmp/inc" ]; then
	ok "no file includes a header of a higher layer ($nfiles files)"
else
	notok "includes go one way ($nfiles files)"
	diag "$tmp/inc"
fi

# ---- 2. Symbols ------------------------------------------------------------
# Records "layer file kind symbol": kind D (defined, global) or U
# (undefined), from the PIC objects libtool built for lib/*/*.c.
records() {
	for o in "$top_builddir"/lib/*/.libs/*.o; do
		[ -f "$o" ] || continue
		layer=$(basename "$(dirname "$(dirname "$o")")")
		file=$(basename "$o" .o)
		file=lib/$layer/${file#*_la-}.c
		$NM "$o" | awk -v l="$layer" -v f="$file" '
			$1 == "U" { print l, f, "U", $2; next }
			NF == 3 && $2 ~ /^[TDBRVWGS]$/ { print l, f, "D", $3 }'
	done
}

# check RECORDS: prints each upward reference and each loop; the file
# edges go to RECORDS.edges.
check() {
	awk -v ranks="$tmp/ranks" -v edges="$1.edges" '
		BEGIN { while ((getline line < ranks) > 0) { split(line, a, " "); r[a[1]] = a[2] } }
		$3 == "D" { def[$4] = $2; deflayer[$4] = $1; next }
		{ use[NR] = $0 }
		END {
			for (i in use) {
				split(use[i], u, " ")
				s = u[4]
				if (!(s in def) || def[s] == u[2])
					continue
				if (r[deflayer[s]] > r[u[1]])
					printf "%s (layer %s) uses %s of %s (layer %s)\n", u[2], u[1], s, def[s], deflayer[s]
				print u[2], def[s] > edges
			}
		}' "$1"
}

records >"$tmp/syms"
nobj=$(awk '{ print $2 }' "$tmp/syms" | sort -u | wc -l)
check "$tmp/syms" >"$tmp/up"
if [ "$nobj" -gt 20 ] && ! [ -s "$tmp/up" ]; then
	ok "no object references a symbol of a higher layer ($nobj objects)"
else
	notok "symbols go one way ($nobj objects; none means the build has no lib/*/.libs)"
	diag "$tmp/up"
fi

# ---- 3. No loop ------------------------------------------------------------
sort -u "$tmp/syms.edges" >"$tmp/edges"
if [ -s "$tmp/edges" ] && tsort "$tmp/edges" >/dev/null 2>"$tmp/loop"; then
	ok "no two files call each other in a loop ($(wc -l <"$tmp/edges") file references)"
else
	notok "the files' references form a loop"
	diag "$tmp/loop"
fi

# ---- 4. The check itself fails on an upward reference ----------------------
{
	cat "$tmp/syms"
	echo "util lib/util/scratch.c U ml__tasks_sample"
} >"$tmp/bad"
check "$tmp/bad" >"$tmp/badout"
if grep -q 'lib/util/scratch.c (layer util) uses ml__tasks_sample of lib/tasks/credit.c (layer tasks)' "$tmp/badout"; then
	ok "a made-up reference from util to tasks is reported"
else
	notok "a made-up reference from util to tasks is reported"
	diag "$tmp/badout"
fi
{
	cat "$tmp/edges"
	echo "lib/util/diag.c lib/util/pool.c"
	echo "lib/util/pool.c lib/util/diag.c"
} >"$tmp/badedges"
if tsort "$tmp/badedges" >/dev/null 2>&1; then
	notok "a made-up loop between two files is reported"
else
	ok "a made-up loop between two files is reported"
fi

# ---- 5. One path (issues 25, 41) -------------------------------------------
# The malloc family knows of the tasks layer its one slow path,
# ml__alloc_slow (and posix_memalign's ml__alloc_slow_posix), and nothing
# else of it: the decision and the settlement are made below, with the
# allocator's call between them, never back in the entry file.
awk '$1 == "tasks" && $3 == "D" { print $4 }' "$tmp/syms" | sort -u >"$tmp/tasksyms"
awk '$2 == "lib/api/interpose.c" && $3 == "U" { print $4 }' "$tmp/syms" |
	sort -u | comm -12 - "$tmp/tasksyms" >"$tmp/itasks"
if [ "$(tr '\n' ' ' <"$tmp/itasks")" = "ml__alloc_slow ml__alloc_slow_posix " ]; then
	ok "the malloc family references two symbols of lib/tasks: ml__alloc_slow, ml__alloc_slow_posix"
else
	notok "the malloc family's references into lib/tasks: $(tr '\n' ' ' <"$tmp/itasks")"
fi

# One ELF reader: headers, section and program headers, dynamic sections
# and hash tables are parsed in lib/util/elf.c and nowhere else (its users
# read the symbol entries it copies out); loaded objects' PT_LOAD spans are
# computed there once.
grep -lE 'Elf(64|32)_(Ehdr|Shdr)|ElfW\((Ehdr|Shdr|Phdr|Dyn)\)|e_shoff|sh_link|sh_offset|DT_GNU_HASH|DT_STRTAB' \
	"$top_srcdir"/lib/*/*.c "$top_srcdir"/lib/*/*.h "$top_srcdir"/tools/*.c \
	"$top_srcdir"/tools/*.h 2>/dev/null | sed "s|^$top_srcdir/||" |
	grep -v '^lib/util/elf\.[ch]$' >"$tmp/elfusers"
if ! [ -s "$tmp/elfusers" ]; then
	ok "ELF headers and symbol tables are read in lib/util/elf.c only"
else
	notok "files that read ELF structures themselves: $(tr '\n' ' ' <"$tmp/elfusers")"
fi
grep -l 'PT_LOAD' "$top_srcdir"/lib/*/*.c "$top_srcdir"/tools/*.c |
	sed "s|^$top_srcdir/||" >"$tmp/ptload"
if [ "$(cat "$tmp/ptload")" = lib/util/elf.c ]; then
	ok "PT_LOAD spans are computed in one place (lib/util/elf.c)"
else
	notok "PT_LOAD appears in: $(tr '\n' ' ' <"$tmp/ptload")"
fi
echo "1..$n"
