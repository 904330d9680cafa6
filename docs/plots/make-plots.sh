#!/bin/sh
# Regenerate the plots of docs/statistics.md from `memlimits bounds
# --format=tsv`, with gnuplot.
#
#   docs/plots/make-plots.sh [MEMLIMITS]
#
# MEMLIMITS is the command to use (default: $MEMLIMITS, else `memlimits`
# from PATH).  The PNGs are written next to this script.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
ml=${1:-${MEMLIMITS:-memlimits}}
command -v gnuplot >/dev/null || { echo "make-plots.sh: gnuplot not found" >&2; exit 1; }
"$ml" --version >/dev/null || { echo "make-plots.sh: cannot run $ml" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
S=80000

# pngcairo draws better; plain png (libgd) where cairo is missing.
if gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1; then
	term='pngcairo size 900,560 font "DejaVu Sans,11"'
else
	term='png size 900,560'
fi

# 1. P(interrupted before n bytes) against n / limit, for several limits.
for l in 256KiB 1MiB 8MiB 64MiB 1GiB; do
	"$ml" bounds --limit "$l" --curve 800 --format=tsv |
		awk -F'\t' '$1 == "alloc" { print $2 "\t" $4 }' >"$tmp/curve-$l"
done
gnuplot <<GP
set terminal $term
set output '$here/interruption.png'
set linetype 1 lc rgb '#6a3d9a' lw 2
set linetype 2 lc rgb '#1f78b4' lw 2
set linetype 3 lc rgb '#33a02c' lw 2
set linetype 4 lc rgb '#ff7f00' lw 2
set linetype 5 lc rgb '#000000' lw 2
set multiplot layout 1,2 title "P(interrupted before n bytes), sample interval S = $S bytes"
set xlabel 'n / limit'
set ylabel 'probability'
set key left top
set grid
set xrange [0:2]
set yrange [0:1]
plot for [l in "256KiB 1MiB 8MiB 64MiB 1GiB"] '$tmp/curve-'.l using 1:2 with lines lw 2 title 'limit '.l
set logscale y
set format y '10^{%L}'
set yrange [1e-60:1]
set key right bottom
set ylabel 'probability (log scale)'
plot for [l in "256KiB 1MiB 8MiB 64MiB 1GiB"] '$tmp/curve-'.l using 1:(\$2 > 0 ? \$2 : 1/0) with lines lw 2 title 'limit '.l
unset multiplot
GP

# 2. Relative accuracy (l - N) / N against k, for the usual targets.
: >"$tmp/accuracy"
for k in 1 2 3 4 5 6 8 10 13 16 20 25 32 40 50 63 80 100 126 158 200 251 \
	316 398 501 631 794 1000 1585 2512 3981 6310 10000 25119 63096 \
	158489 398107 1000000; do
	"$ml" bounds --limit $((k * S)) --format=tsv \
		--target 1e-3 --target 1e-9 --target 4e-15 --target 1e-50 |
		awk -F'\t' -v k=$k '$1 == "safe" { printf "%s\t%s\t%s\n", k, $2, $4 }'
done >"$tmp/accuracy"
for t in 0.001 1e-09 4e-15 1e-50; do
	awk -F'\t' -v t=$t '$2 == t && $3 != "inf" { print $1 "\t" $3 }' \
		"$tmp/accuracy" >"$tmp/acc-$t"
done
gnuplot <<GP
set terminal $term
set output '$here/accuracy.png'
set title "Relative accuracy of a limit l = k S: (l - N) / N, N = safe bytes at target t"
set xlabel 'k = l / S (samples to interrupt)'
set ylabel '(l - N) / N'
set logscale xy
set format x '10^{%L}'
set format y '10^{%L}'
set grid
set key right top
set xrange [1:1e6]
plot '$tmp/acc-0.001' using 1:2 with linespoints lw 2 title 't = 1e-3', \
     '$tmp/acc-1e-09' using 1:2 with linespoints lw 2 title 't = 1e-9', \
     '$tmp/acc-4e-15' using 1:2 with linespoints lw 2 title 't = 4e-15', \
     '$tmp/acc-1e-50' using 1:2 with linespoints lw 2 title 't = 1e-50', \
     1 with lines dt 2 lc rgb 'gray' title 'l = 2 N'
GP
echo "wrote $here/interruption.png $here/accuracy.png"
