#!/bin/sh
# memlimits run: what is charged and what the report says.
#  - a request glibc refuses anyway (malloc(SIZE_MAX / 2)) is no limit:
#    no report, no failure after it;
#  - the report's two sample counts agree, it says what the allocation
#    limit refused is not counted, it lists no site without bytes,
#    and it gives the peak heap and what the heap counts;
#  - tcmalloc, jemalloc, mimalloc linked by the program or preloaded after
#    the library: forwarded to and metered (issue 15), the report names the
#    allocator; preloaded in front of the library, nothing reaches it: the
#    heap limit is off, said once, and the report gives no figure the
#    meter did not measure.
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
A=$top_builddir/tests/cli/test-run-alloc
L=$top_builddir/lib/.libs/libmemlimits.so
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-acct.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" && test -x "$A" || {
	echo "Bail out! $M or $A not built"
	exit 1
}

# ---- a request glibc refuses is no limit ---------------------------------
for lim in "--alloc-limit 1TiB" "--heap-limit 1GiB"; do
	# shellcheck disable=SC2086 # $lim is two words on purpose
	"$M" run $lim -- "$A" huge >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && ! test -s "$tmp/err"; then
		ok "malloc(SIZE_MAX/2) under $lim: ENOMEM as glibc's, no report, later allocations succeed"
	else
		notok "malloc(SIZE_MAX/2) under $lim: status $st"
		diag "$tmp/out" "$tmp/err"
	fi
done
"$M" run --alloc-limit 1TiB --report "$tmp/huge.txt" -- "$A" huge >/dev/null 2>&1
counted=$(sed -n 's/.*counted so far: \([0-9]*\).*/\1/p' "$tmp/huge.txt")
# 200 MiB allocated after it: about 2600 samples of 80000 bytes; the huge
# request alone would be 2^63 / 80000 = 1.15e14.
if test -n "$counted" && test "$counted" -lt 100000; then
	ok "the refused request is not counted: $counted samples in the report"
else
	notok "the refused request is counted: '$counted' samples"
	diag "$tmp/huge.txt"
fi

mkdir "$tmp/st"
"$M" run --stats "$tmp/st" -- "$A" huge >/dev/null 2>&1
bytes=$(sed -n 's/^  "bytes": \([0-9]*\),$/\1/p' "$tmp/st"/memlimits.*.json)
# 200 MiB and a stdout buffer; the huge request alone would be 2^63 bytes.
if test -n "$bytes" && test "$bytes" -lt 1099511627776; then
	ok "the refused request is not in the statistics: $bytes bytes"
else
	notok "the statistics count '$bytes' bytes"
	diag "$tmp/st"/memlimits.*.json
fi

# ---- the report's figures ------------------------------------------------
# An allocation limit reached in hog_until_refused; then refused_function's
# allocations are all refused: a stack with no bytes.
"$M" run --alloc-limit 20MiB --seed 7 --report "$tmp/r.txt" -- "$A" refused 200 \
	>/dev/null 2>"$tmp/err"
counted=$(sed -n 's/.*counted so far: \([0-9]*\).*/\1/p' "$tmp/r.txt")
sampled=$(sed -n 's/^estimated bytes allocated: .* (\([0-9]*\) samples.*/\1/p' "$tmp/r.txt")
if test -n "$counted" && test "$counted" = "$sampled"; then
	ok "the two sample counts of the report agree ($counted)"
else
	notok "sample counts differ: counted so far '$counted', estimated '$sampled'"
	diag "$tmp/r.txt"
fi
# The refused allocations' samples are not counted, so the count ends
# below the limit it reached (0.2's report read as a contradiction): the
# report says so.  Single thread: the allocation that reached the limit
# took the count from exactly the final count to at least k; the estimate
# with all refused samples is the count plus them.
k=$(sed -n 's/.*reached at \([0-9]*\) samples.*/\1/p' "$tmp/r.txt")
from=$(sed -n 's/.*taken the count from \([0-9]*\) to .*/\1/p' "$tmp/r.txt")
to=$(sed -n 's/.*taken the count from [0-9]* to \([0-9]*\) samples.*/\1/p' "$tmp/r.txt")
rs=$(sed -n 's/^  with the \([0-9]*\) samples of the allocations refused.*/\1/p' "$tmp/r.txt")
with=$(sed -n 's/^  with the .* (\([0-9]*\) samples)$/\1/p' "$tmp/r.txt")
if test -n "$k" && test -n "$from" && test -n "$to" && test -n "$rs" &&
	test -n "$with" && test "$from" = "$counted" && test "$to" -ge "$k" &&
	test "$counted" -lt "$k" && test "$with" = $((counted + rs)) &&
	test "$with" -ge "$k" &&
	grep -q '^  not counted: the samples of the allocations this limit refused' "$tmp/r.txt"; then
	ok "the report says the refused allocations are not counted: $counted counted < $k reached, the tripping one took it from $from to $to, $with with all refused"
else
	notok "the report's count below the limit is not explained: k '$k', counted '$counted', from '$from' to '$to', with '$with' ('$rs' refused)"
	diag "$tmp/r.txt"
fi
if grep -q '^limit reached: the allocation limit' "$tmp/r.txt" &&
	! grep -Eq '^#[0-9]+: 0 bytes' "$tmp/r.txt"; then
	ok "no allocation site with 0 bytes is listed"
else
	notok "a site with 0 bytes is listed (or the limit was not reached)"
	diag "$tmp/r.txt"
fi
# Only the allocation sites' section: the held sections follow it.
listed=$(sed -n '/^top allocation sites/,/^memory held/p' "$tmp/r.txt" | grep -c '^#[0-9]*: ')
distinct=$(sed -n 's/^top allocation sites by sampled bytes (\([0-9]*\) distinct.*/\1/p' "$tmp/r.txt")
if test "$listed" = "$distinct"; then
	ok "the count of distinct stacks counts the listed ones ($distinct)"
else
	notok "$distinct distinct stacks said, $listed listed"
	diag "$tmp/r.txt"
fi

# A section without entries says why (0.2 printed a heading and nothing
# under it).  /bin/true at a 1 GiB interval and a fixed seed: no sample.
"$M" run --seed 1 --interval 1GiB --report "$tmp/e.txt" -- /bin/true
if grep -A1 '^top allocation sites by sampled bytes (0 distinct' "$tmp/e.txt" |
	grep -q '^    (none: no allocation was sampled' &&
	grep -A1 '^memory held at exit .*(0 distinct' "$tmp/e.txt" |
	grep -q '^    (none: no sampled block is held)'; then
	ok "empty sections of the report say why"
else
	notok "an empty section of the report gives no reason"
	diag "$tmp/e.txt"
fi

# Four threads share one allocation limit; each adds its samples to the
# process's count in batches (docs/statistics.md, "Run mode"): the report
# sums every thread's part, and the limit is reached where it should be.
# 256 MiB at S = 80 000: k = 3356 samples, the k-th point at 268 MB with
# sd 4.6 MB; the batch (3 samples) makes it late by at most 6 samples, and
# each other thread goes on to its own next sample (Exp(S)): the bytes
# given are within 190..340 MiB but with probability far below 1e-6.
# (The count itself may end below k: the samples of the refused
# allocations are taken back.)
"$M" run --alloc-limit 256MiB --report "$tmp/t.txt" -- "$A" threads 4 1024 \
	>"$tmp/out" 2>"$tmp/err"
st=$?
got=$(sed -n 's/^threads: \([0-9]*\) bytes$/\1/p' "$tmp/out")
counted=$(sed -n 's/.*counted so far: \([0-9]*\).*/\1/p' "$tmp/t.txt")
sampled=$(sed -n 's/^estimated bytes allocated: .* (\([0-9]*\) samples.*/\1/p' "$tmp/t.txt")
if test "$st" = 0 && test -n "$got" && test "$got" -ge 199229440 &&
	test "$got" -le 356515840 && test -n "$counted" &&
	test "$counted" = "$sampled" &&
	grep -q '^limit reached: the allocation limit' "$tmp/t.txt"; then
	ok "four threads share a 256 MiB allocation limit: $got bytes given, $counted samples counted by the report's two sums"
else
	notok "four threads under one allocation limit: status $st, given '$got', counted '$counted', sampled '$sampled'"
	diag "$tmp/out" "$tmp/err" "$tmp/t.txt"
fi

# A limit alone: the report goes to stderr at exit, and held memory was
# not tracked (a record at every sample is kept for a held limit or a
# report file only).
"$M" run --alloc-limit 16MiB -- "$A" threads 2 64 >"$tmp/out" 2>"$tmp/err"
st=$?
if test "$st" = 0 && grep -q '^limit reached: the allocation limit' "$tmp/err" &&
	grep -q '^memory held: not tracked' "$tmp/err" &&
	! grep -q '^memory held at' "$tmp/err"; then
	ok "a limit alone: the stderr report says held memory was not tracked"
else
	notok "a limit alone: status $st"
	diag "$tmp/out" "$tmp/err"
fi

# 64 MiB allocated and all freed: the peak shows it, the heap now does not.
"$M" run --heap-limit 1GiB --report "$tmp/p.txt" -- "$A" peak 64 >/dev/null 2>&1
peak=$(sed -n 's/^  peak heap: \([0-9]*\) bytes.*/\1/p' "$tmp/p.txt")
now=$(sed -n 's/^  heap in use now: \([0-9]*\) bytes.*/\1/p' "$tmp/p.txt")
# At least the 64 blocks of 1 MiB, at most what they take plus 16 MiB of
# glibc's and python-free start-up heap.
if test -n "$peak" && test "$peak" -ge 67108864 && test "$peak" -le 83886080 &&
	test -n "$now" && test "$now" -lt 16777216; then
	ok "the report gives the peak heap ($peak bytes; $now in use at exit)"
else
	notok "peak heap '$peak', in use '$now'"
	diag "$tmp/p.txt"
fi
if grep -q 'malloc family' "$tmp/p.txt" && grep -q 'maps itself' "$tmp/p.txt" &&
	grep -q '^  peak heap: [0-9]* bytes (.*): blocks .*, mapped ' "$tmp/p.txt"; then
	ok "the report says that the heap counts the malloc family and the mappings, and splits the peak"
else
	notok "the report does not say what the heap counts"
	diag "$tmp/p.txt"
fi

# ---- fork: a budget of its own ------------------------------------------
# The parent reaches a 32 MiB allocation limit (sticky: it stays refused),
# then forks; the child's 16 MiB all succeed, as memlimits(1) says.  Were
# the child to continue from its parent's count, all 16 would fail; with its
# own budget, 16 MiB reaching a 32 MiB limit (k = 420 samples, 210 expected)
# has probability below 1e-30.
"$M" run --alloc-limit 32MiB --seed 3 -- "$A" fork 200 >"$tmp/out" 2>"$tmp/err"
st=$?
if test "$st" = 0 && grep -q 'child, 0 of 16 refused' "$tmp/out"; then
	ok "a forked child starts a budget of its own: $(head -n 1 "$tmp/out")"
else
	notok "forked child: status $st"
	diag "$tmp/out"
fi

# ---- allocators underneath, and in front -----------------------------------
libpath() { # the path of a shared library the loader knows, or nothing
	/sbin/ldconfig -p 2>/dev/null | sed -n "s/^[[:space:]]*$1 (.*) => //p" | head -1
}
printf '#include <stdlib.h>\nint main(void) { void *volatile p = malloc(10); free(p); return 0; }\n' >"$tmp/s.c"
CC=${CC:-cc}
for so in libtcmalloc_minimal.so.4 libjemalloc.so.2 libmimalloc.so.2; do
	lib=$(libpath "$so")
	if test -z "$lib"; then
		skip "$so is not installed (scripts/install-deps)"
		skip "$so is not installed"
		skip "$so is not installed"
		skip "$so is not installed"
		continue
	fi
	kind=${so#lib}
	kind=${kind%%.so*}
	kind=${kind%_minimal}
	if $CC -o "$tmp/linked" "$tmp/s.c" "$lib" 2>"$tmp/cc.err"; then
		rm -f "$tmp/l.txt"
		"$M" run --heap-limit 1GiB --report "$tmp/l.txt" -- "$tmp/linked" \
			>"$tmp/out" 2>"$tmp/err"
		st=$?
		if test "$st" = 0 && ! test -s "$tmp/err" &&
			grep -q "^allocator: $kind ($lib)" "$tmp/l.txt" &&
			grep -q '^  heap in use now' "$tmp/l.txt"; then
			ok "run --heap-limit over a program linked with $so: forwarded to $kind, metered"
		else
			notok "a program linked with $so: status $st"
			diag "$tmp/err" "$tmp/l.txt"
		fi
	else
		skip "cannot link with $so"
	fi
	# --allocator with another allocator than the one the program
	# links: it applies, and one warning line says so (0.2 switched
	# silently).
	other=tcmalloc
	test "$kind" = tcmalloc && other=jemalloc
	if test -x "$tmp/linked" &&
		otherlib=$(libpath "$(test $other = jemalloc && echo libjemalloc.so.2 || echo libtcmalloc_minimal.so.4)") &&
		test -n "$otherlib"; then
		rm -f "$tmp/a.txt"
		"$M" run --allocator $other --heap-limit 1GiB --report "$tmp/a.txt" \
			-- "$tmp/linked" >"$tmp/out" 2>"$tmp/err"
		st=$?
		if test "$st" = 0 && test "$(wc -l <"$tmp/err")" = 1 &&
			grep -q "^memlimits run: warning: .* is linked with $so; --allocator $other replaces it" "$tmp/err" &&
			grep -q "^allocator: $other ($otherlib)" "$tmp/a.txt"; then
			ok "--allocator $other over a program linked with $so: runs over $other, one warning line"
		else
			notok "--allocator $other over a program linked with $so: status $st"
			diag "$tmp/err" "$tmp/a.txt"
		fi
	else
		skip "no program linked with $so, or $other not installed"
	fi
	rm -f "$tmp/linked"
	# Preloaded after the library (memlimits run puts it first): the
	# library forwards to it and meters its blocks.  In front of it (a
	# bare LD_PRELOAD): no allocation reaches the library, the heap limit
	# is off, said once on stderr and in the report, with no figure.
	for order in after before; do
		rm -f "$tmp/h.txt"
		if test $order = after; then
			LD_PRELOAD=$lib "$M" run --heap-limit 1GiB --report "$tmp/h.txt" \
				-- "$A" usable >"$tmp/out" 2>"$tmp/err"
			st=$?
			if test "$st" = 0 && ! test -s "$tmp/err" &&
				grep -q "^allocator: $kind ($lib)" "$tmp/h.txt" &&
				grep -q '^estimated bytes allocated' "$tmp/h.txt" &&
				grep -q '^  peak heap' "$tmp/h.txt"; then
				ok "$so preloaded after the library: forwarded to, heap metered"
			else
				notok "$so preloaded after the library: status $st"
				diag "$tmp/out" "$tmp/err" "$tmp/h.txt"
			fi
			continue
		fi
		LD_PRELOAD=$lib:$L MEMLIMITS_HEAP_LIMIT=1073741824 \
			MEMLIMITS_REPORT=$tmp/h.txt "$A" usable >"$tmp/out" 2>"$tmp/err"
		st=$?
		seen=$(grep -c '^no allocation seen' "$tmp/h.txt")
		if test "$st" = 0 && test "$(wc -l <"$tmp/err")" = 1 &&
			grep -q 'heap limit is off' "$tmp/err" && grep -q "$so" "$tmp/err" &&
			grep -q '^heap limit: off' "$tmp/h.txt" && test "$seen" = 1 &&
			! grep -q 'heap in use\|peak heap' "$tmp/h.txt"; then
			ok "$so preloaded $order the library: heap limit off, said once and in the report"
		else
			notok "$so preloaded $order the library: status $st"
			diag "$tmp/out" "$tmp/err" "$tmp/h.txt"
		fi
	done
done
# A program without PIE that takes malloc's address has a canonical PLT
# entry for it: dlsym finds "malloc" in the program, which defines none.
# Nothing is in front of the library (python3.11 is such a program: the
# false alarm broke CPython's test_io and test_subprocess on stderr).
NOPIE=$top_builddir/tests/cli/test-run-nopie
for lim in "--heap-limit 1GiB" "--alloc-limit 1GiB"; do
	# shellcheck disable=SC2086 # $lim is two words on purpose
	"$M" run $lim -- "$NOPIE" >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && ! test -s "$tmp/err" && test "$(cat "$tmp/out")" = ok; then
		ok "non-PIE program taking malloc's address, $lim: nothing said, the limit applies"
	else
		notok "non-PIE program taking malloc's address, $lim: status $st"
		diag "$tmp/out" "$tmp/err"
	fi
done
# An allocation limit alone, with an allocator's malloc in front of the
# library's: nothing reaches it, and nothing is reported as counted.
lib=$(libpath libjemalloc.so.2)
if test -n "$lib"; then
	rm -f "$tmp/f.txt"
	LD_PRELOAD=$lib:$L MEMLIMITS_ALLOC_LIMIT=1073741824 MEMLIMITS_REPORT=$tmp/f.txt \
		"$A" usable >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && test "$(wc -l <"$tmp/err")" = 1 &&
		grep -q 'no allocation is seen' "$tmp/err" &&
		grep -q '^allocation limit: off' "$tmp/f.txt" &&
		! grep -q 'counted so far\|^estimated bytes' "$tmp/f.txt"; then
		ok "a malloc in front of the library's: said once, no figure reported"
	else
		notok "a malloc in front of the library's: status $st"
		diag "$tmp/err" "$tmp/f.txt"
	fi
	# The same in front of a non-PIE program taking malloc's address
	# (python3.11): dlsym finds only the program's canonical PLT entry,
	# whose calls go to the allocator in front, not to the library.
	rm -f "$tmp/f.txt"
	LD_PRELOAD=$lib:$L MEMLIMITS_ALLOC_LIMIT=1073741824 MEMLIMITS_REPORT=$tmp/f.txt \
		"$NOPIE" >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && test "$(wc -l <"$tmp/err")" = 1 &&
		grep -q 'no allocation is seen' "$tmp/err" &&
		grep -q '^allocation limit: off' "$tmp/f.txt" &&
		! grep -q 'counted so far\|^estimated bytes' "$tmp/f.txt"; then
		ok "a malloc in front of a non-PIE program's canonical PLT entry: said once, no figure reported"
	else
		notok "a malloc in front of a non-PIE program: status $st"
		diag "$tmp/err" "$tmp/f.txt"
	fi
else
	skip "libjemalloc.so.2 is not installed"
	skip "libjemalloc.so.2 is not installed"
fi
if test -x /usr/bin/python3 && lib=$(libpath libtcmalloc_minimal.so.4) && test -n "$lib"; then
	LD_PRELOAD=$lib "$M" run --heap-limit 16GiB -- /usr/bin/python3 -c \
		'x = [bytearray(1000) for i in range(100000)]; print(len(x))' \
		>"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && test "$(cat "$tmp/out")" = 100000 &&
		! test -s "$tmp/err"; then
		ok "python3 with tcmalloc preloaded runs under run --heap-limit, forwarded to tcmalloc"
	else
		notok "python3 with tcmalloc preloaded: status $st"
		diag "$tmp/out" "$tmp/err"
	fi
else
	skip "no /usr/bin/python3 or no tcmalloc"
fi
echo "1..$n"
