#!/bin/sh
# Regenerate the README's pictures (issues 29, 36) in docs/plots:
# timeline.png, flamegraph.png and held.png from a python workload under a
# heap limit, held-python.png from a python program that imports the
# module (its Python functions named in the picture), build.png from a parallel build of 40 processes,
# stops.png from memlimits accuracy (docs/statistics.md, "Testing a limit
# on your program"):
#
#   memlimits run --heap-limit 200MiB --timeline T --profile P -- \
#       python3 -c 'x=[bytearray(1<<20) for _ in range(1000)]'
#   memlimits plot T; memlimits flamegraph P; memlimits flamegraph --held P
#   memlimits run --timeline B -- make -j2    (13 files: make, and gcc,
#                                              cc1 and as for each)
#   memlimits plot B                          (then rsvg-convert to PNG)
#   memlimits accuracy --runs 400 --alloc-limit 64MiB --plot S.svg -- \
#       tests/cli/test-accuracy-prog alloc    (after make check)
#
# Usage: scripts/make-plots.sh [BUILDDIR]   (default: build; run from the
# top of the source tree, after make).  Needs python3, gcc, make and
# rsvg-convert (Debian: librsvg2-bin, in scripts/install-deps).  The
# statistics plots of docs/statistics.md have their own script,
# docs/plots/make-plots.sh.  Look at the PNGs after: the texts must stay
# inside the pictures (tests/cli/svg-check.py checks the SVGs here too).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
M=$build/tools/memlimits
test -x "$M" || { echo "make-plots.sh: $M not built" >&2; exit 2; }
command -v rsvg-convert >/dev/null ||
	{ echo "make-plots.sh: rsvg-convert not found (apt-get install librsvg2-bin)" >&2; exit 2; }
# The interpreter itself, not a wrapper script (pyenv's shims are bash).
py=$(python3 -c 'import sys; print(sys.executable)')
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-plots.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# MemoryError at the limit: status 1, expected.
"$M" run --heap-limit 200MiB --seed 1 --timeline "$tmp/timeline.tsv" \
	--profile "$tmp/profile.txt" -- "$py" -c \
	'x=[bytearray(1<<20) for _ in range(1000)]' 2>/dev/null || true
"$M" plot -o "$tmp/timeline.svg" "$tmp/timeline.tsv"
# Titled by default: the program and "allocated over the whole run".
"$M" flamegraph -o "$tmp/flamegraph.svg" "$tmp/profile.txt"
"$M" flamegraph --held -o "$tmp/held.svg" "$tmp/profile.txt"

# The same limit on a program that imports the module, whose frame
# source names Python's frames (CPython 3.11: docs/python.md, "Pictures").
cat >"$tmp/app.py" <<'EOF'
import memlimits  # names Python's frames in the library's stacks


def load_rows(rows):
    while True:
        rows.append({"row": len(rows), "of": "the table"})


def cache_everything():
    rows = []
    load_rows(rows)
    return rows


cache_everything()
EOF
PYTHONPATH=$build/python/build/pkg "$M" run --heap-limit 200MiB --seed 1 \
	--profile "$tmp/app.prof" -- "$py" "$tmp/app.py" 2>/dev/null || true
"$M" flamegraph --held -o "$tmp/held-python.svg" "$tmp/app.prof"

# A build: 13 files of different sizes, make -j2 (make, then gcc, cc1 and
# as for each: 40 processes).
mkdir "$tmp/b"
objs=
for i in 1 2 3 4 5 6 7 8 9 10 11 12 13; do
	sh "$top/bench/make-gcc-input.sh" $((i * 4)) >"$tmp/b/u$i.c"
	objs="$objs u$i.o"
done
printf 'all:%s\n%%.o: %%.c\n\tgcc -O2 -c $< -o $@\n' "$objs" >"$tmp/b/Makefile"
(cd "$tmp/b" && "$M" run --timeline "$tmp/build.tsv" -- make -s -j2) 2>/dev/null
"$M" plot -o "$tmp/build.svg" "$tmp/build.tsv"

# Where the allocation limit stopped 400 runs of a program allocating
# 4 KiB blocks (built by make check), over the documented law.
A=$build/tests/cli/test-accuracy-prog
test -x "$A" || { echo "make-plots.sh: $A not built (make check)" >&2; exit 2; }
"$M" accuracy --runs 400 --seed-base 1 --alloc-limit 64MiB \
	--plot "$tmp/stops.svg" -- "$A" alloc >/dev/null

if test -n "$(command -v python3)"; then
	python3 "$top/tests/cli/svg-check.py" "$tmp"/*.svg
fi
out=$top/docs/plots
for p in timeline flamegraph held held-python build stops; do
	rsvg-convert "$tmp/$p.svg" -o "$out/$p.png"
	size=$(wc -c <"$out/$p.png")
	echo "$out/$p.png: $size bytes"
	test "$size" -lt 300000 || { echo "make-plots.sh: $out/$p.png is over 300 KB" >&2; exit 1; }
done
