#!/bin/sh
# promtool (Debian's prometheus package) accepts what ml_write_metrics
# writes after two allocation-limit stops and one held-limit stop, and
# what `memlimits stats DIR --format prometheus|openmetrics` writes
# (issue 29), and the escapes of their one writer (lib/util/prom.c,
# tests/unit/test-prom).  Skipped, with the reason, where promtool cannot
# be had.
: "${top_builddir:?}" "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-promtool.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT
P=$top_builddir/tests/api/test-metrics
M=$top_builddir/tools/memlimits
PROMTOOL=${PROMTOOL:-promtool}

if "$P" print >"$tmp/m.txt" 2>"$tmp/m.err" &&
	grep -qx 'memlimits_tasks_interrupted_total{reason="alloc_limit"} 2' "$tmp/m.txt" &&
	grep -qx 'memlimits_tasks_interrupted_total{reason="held_limit"} 1' "$tmp/m.txt"; then
	ok "ml_write_metrics after the stops: alloc_limit 2, held_limit 1"
else
	notok "ml_write_metrics after the stops"
	diag "$tmp/m.txt" "$tmp/m.err"
fi

# check NAME FILE: promtool check metrics reads the text on stdin.
check() {
	if "$PROMTOOL" check metrics <"$2" >"$tmp/pt.out" 2>&1; then
		ok "promtool check metrics accepts $1"
	else
		notok "promtool check metrics refuses $1"
		diag "$tmp/pt.out" "$2"
	fi
}

have_promtool=
command -v "$PROMTOOL" >/dev/null 2>&1 && have_promtool=1
if [ -n "$have_promtool" ]; then
	check "ml_write_metrics' text" "$tmp/m.txt"
else
	skip "promtool not found (Debian: apt-get install prometheus)"
fi
# The writer's escapes (issue 33): a HELP and label values with
# backslashes, quotes and line feeds.
if [ -n "$have_promtool" ] &&
	"$top_builddir/tests/unit/test-prom" print >"$tmp/esc.txt"; then
	check "the writer's escaped HELP and label values" "$tmp/esc.txt"
else
	skip "promtool not found (Debian: apt-get install prometheus)"
fi

mkdir "$tmp/st"
"$M" run --stats "$tmp/st" -- "$P" print >/dev/null 2>"$tmp/run.err"
for f in prometheus openmetrics; do
	if "$M" stats "$tmp/st" --format $f >"$tmp/$f.txt" 2>"$tmp/$f.err" &&
		grep -q '^memlimits_tasks_interrupted_total{reason="alloc_limit"} 2$' "$tmp/$f.txt" &&
		grep -q '^memlimits_tasks_started_total 3$' "$tmp/$f.txt"; then
		ok "stats --format $f: the run's totals"
	else
		notok "stats --format $f"
		diag "$tmp/$f.txt" "$tmp/$f.err" "$tmp/run.err"
	fi
	if [ -n "$have_promtool" ]; then
		check "stats --format $f" "$tmp/$f.txt"
	else
		skip "promtool not found (Debian: apt-get install prometheus)"
	fi
done
if tail -n 1 "$tmp/openmetrics.txt" | grep -qx '# EOF'; then
	ok "openmetrics ends with # EOF"
else
	notok "openmetrics ends with # EOF"
fi
# A version 1 file (before 0.3) is still read: its new counts are 0.
mkdir "$tmp/v1"
cat >"$tmp/v1/memlimits.1.json" <<'JSON'
{"format": "memlimits-stats", "version": 1, "pid": 1, "interval": 80000,
"allocations": 3, "bytes": 300, "sampled_allocations": 1, "samples": 1,
"unsampled_windows": 0, "histogram": [[64, 3, 1]]}
JSON
if "$M" stats "$tmp/v1" >/dev/null 2>"$tmp/v1.err" &&
	"$M" stats "$tmp/v1" --format prometheus >"$tmp/v1.txt" 2>>"$tmp/v1.err" &&
	grep -qx 'memlimits_samples_total 1' "$tmp/v1.txt" &&
	grep -qx 'memlimits_tasks_started_total 0' "$tmp/v1.txt"; then
	ok "a version 1 file is still read (table and prometheus)"
else
	notok "a version 1 file"
	diag "$tmp/v1.err" "$tmp/v1.txt"
fi
if [ -n "$have_promtool" ]; then
	check "stats --format prometheus of a version 1 file" "$tmp/v1.txt"
else
	skip "promtool not found (Debian: apt-get install prometheus)"
fi
tap_done
