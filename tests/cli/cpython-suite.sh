#!/bin/sh
# CPython's own test suite under `memlimits run` (issue 11): each module must
# end the same way under memlimits as without it, with a generous heap limit
# and with an allocation limit plus a report file.  Too slow for make check
# (15-40 minutes on two cores): run it with `make check-cpython`, or directly:
#
#     top_builddir=BUILD tests/cli/cpython-suite.sh [MODULE...]
#
# Needs Debian's python3.11 and its test suite (libpython3.11-testsuite, which
# scripts/install-deps installs).  CPYTHON names another python (default
# /usr/bin/python3.11), CPYTHON_TIMEOUT the seconds one module may run (a
# bound on a hung module, 900 by default).  Prints TAP: one line per module
# and mode, "ok" when the module's outcome (passed, failed, skipped,
# no tests ran: regrtest's exit status) under memlimits equals its outcome
# plain.  A module that fails plain is reported, not hidden: the comparison
# is what memlimits changes.
#
# Modules excluded and why:
# - test_socket's VSOCK cases (ThreadedVSOCKSocketStreamTest & co): they need
#   a vsock device, and hang or fail plain in a container; the rest of
#   test_socket runs.
: "${top_builddir:?set top_builddir to the build directory}"
M=$top_builddir/tools/memlimits
PY=${CPYTHON:-/usr/bin/python3.11}
TIMEOUT=${CPYTHON_TIMEOUT:-900}
export LC_ALL=C.UTF-8 PYTHONHASHSEED=0
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT

modules="test_subprocess test_os test_threading test_thread
test_threading_local test_signal test_mmap test_gc test_ctypes
test_concurrent_futures test_select test_selectors test_fork1 test_wait3
test_wait4 test_resource test_faulthandler test_tracemalloc test_sys
test_memoryio test_bytes test_bigmem test_array test_struct test_pickle
test_json test_re test_zlib test_lzma test_bz2 test_hashlib test_ssl
test.test_asyncio.test_subprocess test.test_asyncio.test_events
test.test_asyncio.test_unix_events test_pty test_posix test_shutil
test_tempfile test_io test_socket"
[ $# -gt 0 ] && modules=$*

n=0
for m in $modules; do n=$((n + 4)); done
echo "1..$n"
if ! [ -x "$M" ] || ! [ -x "$PY" ] || ! "$PY" -c 'import test.regrtest' 2>/dev/null; then
	i=0
	while [ "$i" -lt "$n" ]; do
		i=$((i + 1))
		echo "ok $i # SKIP needs $M, $PY and libpython3.11-testsuite"
	done
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-cpy.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# run_module MODULE LOG [memlimits run options...]: regrtest's exit status.
# regrtest: 0 passed (or skipped), 2 failed, 4 no tests ran... compared as is.
run_module() {
	mod=$1 log=$2
	shift 2
	extra=
	case $mod in
	test_socket) extra="--ignore *VSOCK*" ;;
	esac
	# shellcheck disable=SC2086 # $extra is two words by design
	if [ $# -gt 0 ]; then
		timeout -k 10 "$TIMEOUT" "$M" run "$@" -- "$PY" -m test $extra "$mod" >"$log" 2>&1
	else
		timeout -k 10 "$TIMEOUT" "$PY" -m test $extra "$mod" >"$log" 2>&1
	fi
	echo $?
}

i=0
t0=$(date +%s)
for mod in $modules; do
	name=$(echo "$mod" | sed 's/^test\.test_asyncio\./test_asyncio./')
	plain=$(run_module "$mod" "$tmp/$name.plain")
	heap=$(run_module "$mod" "$tmp/$name.heap" --heap-limit 16GiB)
	rm -f "$tmp/$name.report"
	alloc=$(run_module "$mod" "$tmp/$name.alloc" --alloc-limit 1TiB --report "$tmp/$name.report")
	i=$((i + 1))
	echo "ok $i - $name plain: exit $plain ($(tail -n 1 "$tmp/$name.plain"))"
	for mode in heap alloc; do
		i=$((i + 1))
		eval "st=\$$mode"
		if [ "$st" = "$plain" ]; then
			echo "ok $i - $name --$mode-limit: exit $st as plain"
		else
			echo "not ok $i - $name --$mode-limit: exit $st, plain $plain"
			grep -E '^(FAIL|ERROR|Traceback|.*Error|test_.* failed)' "$tmp/$name.$mode" |
				head -n 15 | sed 's/^/# /'
			tail -n 5 "$tmp/$name.$mode" | sed 's/^/# /'
			if [ -n "${CPYTHON_KEEP:-}" ]; then
				mkdir -p "$CPYTHON_KEEP" && cp "$tmp/$name".* "$CPYTHON_KEEP/"
			fi
		fi
	done
	# The report at exit of an allocation limit that was never reached must
	# not claim one.
	i=$((i + 1))
	if [ -f "$tmp/$name.report" ] && grep -E '^limit reached: ' "$tmp/$name.report" | grep -vq ': none$'; then
		echo "not ok $i - $name: the report claims a limit was reached"
		sed -n '1,8s/^/# /p' "$tmp/$name.report"
	else
		echo "ok $i - $name: the report claims no limit"
	fi
done
echo "# $n checks in $(($(date +%s) - t0)) s"
