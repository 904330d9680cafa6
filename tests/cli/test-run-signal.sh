#!/bin/sh
# memlimits run and a signal handler that maps memory (issue 41, item 2):
# under --heap-limit 1GiB (and --heap-limit 512MiB --held-limit 512MiB,
# every sampled mapping held), tests/cli/test-run-signal's loop of big
# mappings, its SIGALRM handler mapping, unmapping, mallocing and freeing
# every 100 us, ends.  Before, the handler spun for ever on the ranges'
# lock its own thread held inside munmap; timeout(1) is the bounded wait
# (the loop takes about a second; 120 s is for a loaded machine and
# valgrind-free runs only).
: "${top_builddir:?}"
P=$top_builddir/tests/cli/test-run-signal
. "$top_srcdir/tests/cli/run-env.sh"
run_case() {
	what=$1
	shift
	timeout 120 "$M" run "$@" -- "$P" 400 >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0; then
		ok "$what: the loop ends ($(cat "$tmp/out"): step, handler runs)"
	else
		notok "$what: status $st (124: still running after 120 s), $(cat "$tmp/out")"
		diag "$tmp/err"
	fi
}
if tap_case heap; then
	run_case "--heap-limit 1GiB" --heap-limit 1GiB
fi
if tap_case held; then
	run_case "--heap-limit 512MiB --held-limit 512MiB" \
		--heap-limit 512MiB --held-limit 512MiB
fi
echo "1..$n"
