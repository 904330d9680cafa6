#!/bin/sh
# Wall clock of an mmap+munmap pair of 64 KiB with LIVE mappings live,
# plain glibc against LD_PRELOAD=libmemlimits.so (issue 34: the range
# table under the kernel's top-down placement).  Informative only: make
# check judges no wall clock.
#   MAP_MANY (bench/map-many), ML_LIB (libmemlimits.so);
#   MAP_MANY_LIVE (default "1 1000 10000"), MAP_MANY_PAIRS (20000),
#   MAP_MANY_REPS (5).
set -eu
: "${MAP_MANY:?}" "${ML_LIB:?}"
pairs=${MAP_MANY_PAIRS:-20000}
reps=${MAP_MANY_REPS:-5}
printf '%-8s %10s %10s %8s\n' live 'glibc ns' 'ml ns' 'ml/glibc'
for live in ${MAP_MANY_LIVE:-1 1000 10000}; do
	plain=$("$MAP_MANY" "$live" "$pairs" "$reps")
	ml=$(LD_PRELOAD="$ML_LIB" "$MAP_MANY" "$live" "$pairs" "$reps")
	printf '%-8s %10s %10s %8s\n' "$live" "$plain" "$ml" \
	    "$(awk "BEGIN { printf \"%.2f\", $ml / $plain }")"
done
