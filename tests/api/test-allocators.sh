#!/bin/sh
# The library over each allocator (issue 15): jemalloc, tcmalloc (both of
# gperftools' libraries) and mimalloc, preloaded after the library, and
# one linked by the program.  For each one installed (scripts/install-deps):
#  - ml_allocator() names it, and the meter follows its blocks: 64 MiB held
#    read as 64 to 66 MiB (its size classes), and freeing them gives the
#    reading back (within 64 KiB);
#  - the malloc family's edge cases behave as that allocator's own
#    (test-family and test-refused, with ML_TEST_ALLOCATOR naming it:
#    NULL-ness, errno, return codes, alignment, usable sizes);
#  - tasks trip under all three deliveries, held memory, task objects,
#    the global limit's choice and its pressure callback, jump safety
#    (test-tasks, test-held, test-task-objects, test-pressure,
#    test-jump-safety, test-describe, test-held-profile), threads and
#    fork (test-threads, test-fork).
# Each program is one test line: it passes when it exits 0 with no
# failed test of its own.
: "${top_builddir:?}"
L=$top_builddir/lib/.libs/libmemlimits.so.0
B=$top_builddir/tests
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-allocs.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_HELD_LIMIT \
	MEMLIMITS_REPORT MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR ML_TEST_ALLOCATOR
. "$top_srcdir/tests/tap/tap.sh"

libpath() { # the path of a shared library the loader knows, or nothing
	/sbin/ldconfig -p 2>/dev/null | sed -n "s/^[[:space:]]*$1 (.*) => //p" | head -1
}

programs="api/test-family api/test-refused api/test-tasks api/test-held
	api/test-task-objects api/test-pressure api/test-jump-safety
	api/test-describe api/test-held-profile api/test-meter-threads
	concurrency/test-threads concurrency/test-fork"

for entry in jemalloc:libjemalloc.so.2 tcmalloc:libtcmalloc_minimal.so.4 \
	tcmalloc:libtcmalloc.so.4 mimalloc:libmimalloc.so.2; do
	kind=${entry%%:*}
	so=${entry#*:}
	lib=$(libpath "$so")
	if ! tap_case "$so"; then
		continue
	fi
	if test -z "$lib"; then
		skip "$so is not installed (scripts/install-deps)"
		continue
	fi
	LD_PRELOAD="$L $lib" "$B/api/allocator-name" >"$tmp/out" 2>"$tmp/err"
	st=$?
	read -r name held after <"$tmp/out"
	if test "$st" = 0 && test "$name" = "$kind" && ! test -s "$tmp/err" &&
		test "$held" -ge 67108864 && test "$held" -le 69206016 &&
		test "$after" -ge -65536 && test "$after" -le 65536; then
		ok "$so preloaded after the library: ml_allocator() = $kind, 64 MiB held metered as $held, $after after freeing"
	else
		notok "$so: status $st, '$(cat "$tmp/out")'"
		diag "$tmp/err"
	fi
	for p in $programs; do
		ML_TEST_ALLOCATOR=$lib LD_PRELOAD="$L $lib" ML_TEST_QUICK=1 \
			"$B/$p" >"$tmp/out" 2>&1
		st=$?
		if test "$st" = 0 && ! grep -q '^not ok' "$tmp/out"; then
			ok "${p#*/} over $so: $(grep -c '^ok' "$tmp/out") passed"
		else
			notok "${p#*/} over $so: status $st"
			grep '^not ok' "$tmp/out" | head -20 | sed 's/^/# /'
		fi
	done
done

# A program linked with the library and jemalloc (in that order of
# lookup: the library first) forwards to jemalloc.  (--no-as-needed: the
# program itself calls nothing of jemalloc's, and the linker would drop it.)
if tap_case linked; then
	lib=$(libpath libjemalloc.so.2)
	CC=${CC:-cc}
	if test -z "$lib"; then
		skip "libjemalloc.so.2 is not installed"
	elif $CC -o "$tmp/linked" -I"$top_srcdir/include" \
		"$top_srcdir/tests/api/allocator-name.c" \
		-Wl,--no-as-needed "$L" "$lib" -Wl,--as-needed \
		-Wl,-rpath,"$(dirname "$L")" 2>"$tmp/cc.err"; then
		"$tmp/linked" >"$tmp/out" 2>"$tmp/err"
		st=$?
		if test "$st" = 0 && test "$(cut -d' ' -f1 "$tmp/out")" = jemalloc; then
			ok "a program linked with the library and jemalloc forwards to jemalloc"
		else
			notok "linked with jemalloc: status $st, '$(cat "$tmp/out")'"
			diag "$tmp/err"
		fi
	else
		skip "cannot link with $lib"
	fi
fi

tap_done
