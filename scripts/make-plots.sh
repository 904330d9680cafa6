#!/bin/sh
# Regenerate the README's pictures (issue 29): docs/plots/timeline.png and
# docs/plots/flamegraph.png, from a python workload under a heap limit:
#
#   memlimits run --heap-limit 200MiB --timeline T --profile P -- \
#       python3 -c 'x=[bytearray(1<<20) for _ in range(1000)]'
#   memlimits plot T; memlimits flamegraph P     (then rsvg-convert to PNG)
#
# Usage: scripts/make-plots.sh [BUILDDIR]   (default: build; run from the
# top of the source tree, after make).  Needs python3 and rsvg-convert
# (Debian: librsvg2-bin, in scripts/install-deps).  The statistics plots
# of docs/statistics.md have their own script, docs/plots/make-plots.sh.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
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
"$M" plot --title "Heap over time: python3 under --heap-limit 200MiB" \
	-o "$tmp/timeline.svg" "$tmp/timeline.tsv"
"$M" flamegraph --title "Flame graph: python3 under --heap-limit 200MiB" \
	-o "$tmp/flamegraph.svg" "$tmp/profile.txt"
out=$top/docs/plots
rsvg-convert "$tmp/timeline.svg" -o "$out/timeline.png"
rsvg-convert "$tmp/flamegraph.svg" -o "$out/flamegraph.png"
for f in "$out/timeline.png" "$out/flamegraph.png"; do
	size=$(wc -c <"$f")
	echo "$f: $size bytes"
	test "$size" -lt 300000 || { echo "make-plots.sh: $f is over 300 KB" >&2; exit 1; }
done
