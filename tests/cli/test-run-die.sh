#!/bin/sh
# Issue 41 (7): a process that reaches a limit under `memlimits run` and
# then ends without a normal exit leaves its report: abort() (Rust's
# alloc-error handler, V8's fatal OOM), _exit (the JVM), a SIGKILL from its
# parent (a Pool worker terminated), threads that exit racing (git
# pack-objects).  The report's first part is written when the limit is
# reached; a normal exit completes it, and prints nothing twice.
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
DIE=$top_builddir/tests/cli/test-run-die
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-die.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
# Against runaway memory if the library failed to limit anything; no core
# files from the aborts.
ulimit -v 4000000 2>/dev/null
ulimit -c 0 2>/dev/null

test -x "$M" && test -x "$DIE" || {
	echo "Bail out! $M or $DIE not built"
	exit 1
}

LIMIT='limit reached: the heap limit'

# has_report FILE: FILE holds the limit's line.
has_report() {
	test -s "$1" && grep -q "^$LIMIT" "$1"
}

# run_die MODE NAME: the program under a 64 MiB heap limit, the report to
# $tmp/NAME.rep (and, a second time, to stderr: $tmp/NAME.err); MODE stop
# is killed by this shell once it has printed its pid, after its refusal.
run_die() {
	mode=$1 name=$2
	rm -f "$tmp/$name.rep"
	if test "$mode" = stop; then
		"$M" run --heap-limit 64MiB --report "$tmp/$name.rep" -- \
			"$DIE" stop 2>"$tmp/$name.out1" | {
			read -r pid && kill -KILL "$pid"
		}
		"$M" run --heap-limit 64MiB -- "$DIE" stop 2>"$tmp/$name.err" | {
			read -r pid && kill -KILL "$pid"
		}
	else
		"$M" run --heap-limit 64MiB --report "$tmp/$name.rep" -- \
			"$DIE" "$mode" >/dev/null 2>"$tmp/$name.out1"
		"$M" run --heap-limit 64MiB -- "$DIE" "$mode" \
			>/dev/null 2>"$tmp/$name.err"
	fi
}

if tap_case abort; then
	run_die abort abort
	if has_report "$tmp/abort.rep" && has_report "$tmp/abort.err"; then
		ok "abort() after the refusal: the report, in the file and on stderr"
	else
		notok "abort() after the refusal: no report with the limit"
		diag "$tmp/abort.rep" "$tmp/abort.err"
	fi
fi

if tap_case _exit; then
	run_die _exit exit1
	if has_report "$tmp/exit1.rep" && has_report "$tmp/exit1.err"; then
		ok "_exit(1) after the refusal: the report, in the file and on stderr"
	else
		notok "_exit(1) after the refusal: no report with the limit"
		diag "$tmp/exit1.rep" "$tmp/exit1.err"
	fi
fi

if tap_case sigkill; then
	run_die stop kill
	if has_report "$tmp/kill.rep" && has_report "$tmp/kill.err"; then
		ok "SIGKILL from the parent after the refusal: the report, in the file and on stderr"
	else
		notok "SIGKILL after the refusal: no report with the limit"
		diag "$tmp/kill.rep" "$tmp/kill.err"
	fi
fi

if tap_case race; then
	# Each run must leave it: 8 runs, each of four threads calling exit
	# at its first refusal.
	lost=0
	i=0
	while test $i -lt 8; do
		run_die race "race$i"
		if ! has_report "$tmp/race$i.rep" || ! has_report "$tmp/race$i.err"; then
			lost=$((lost + 1))
			diag "$tmp/race$i.rep" "$tmp/race$i.err"
		fi
		i=$((i + 1))
	done
	if test "$lost" = 0; then
		ok "threads exiting racing at their refusals: a report in each of 8 runs"
	else
		notok "threads exiting racing: $lost of 8 runs without the report"
	fi
fi

if tap_case normal; then
	# A normal exit: the report is whole, said once on stderr (the limit's
	# part at the limit, the rest at exit), and in the file.
	run_die exit normal
	limits=$(grep -c "^$LIMIT" "$tmp/normal.err")
	flimits=$(grep -c "^$LIMIT" "$tmp/normal.rep")
	if test "$limits" = 1 && test "$flimits" = 1 &&
		grep -q '^estimated bytes allocated: ' "$tmp/normal.err" &&
		grep -q '^estimated bytes allocated: ' "$tmp/normal.rep" &&
		grep -q '^stack that tripped the heap limit' "$tmp/normal.err" &&
		test "$(grep -c '^==== memlimits report: pid' "$tmp/normal.rep")" = 1 &&
		grep -q '^==== end of memlimits report' "$tmp/normal.rep"; then
		ok "a normal exit after the refusal: one report, its limit said once, completed at exit"
	else
		notok "a normal exit: the limit said $limits times on stderr, $flimits in the file"
		diag "$tmp/normal.err" "$tmp/normal.rep"
	fi
fi

tap_done
