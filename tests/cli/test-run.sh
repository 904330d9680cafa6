#!/bin/sh
# memlimits run and memlimits stats with real programs nobody here wrote
# (python3, xmllint, sh and coreutils) and with tests/cli/test-run-hog:
# limits apply to the program and to each of its children, the report names
# the function that allocated most, the profile and statistics files are
# well-formed and add up, and every kind of bad input is one line on stderr,
# exit status 2, nothing run.
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
HOG=$top_builddir/tests/cli/test-run-hog
RSS=$top_builddir/tests/cli/test-run-rss
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-run.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
have() {
	command -v "$1" >/dev/null 2>&1
}
# Against runaway memory if the library failed to limit anything.
ulimit -v 4000000 2>/dev/null

test -x "$M" && test -x "$HOG" && test -x "$RSS" || {
	echo "Bail out! $M, $HOG or $RSS not built"
	exit 1
}

# ---- bad input: one line, status 2, nothing run -------------------------
# bad DESCRIPTION ARGS...: memlimits run ARGS must refuse.  The commands
# given would create $tmp/ran if they ran.
bad() {
	what=$1
	shift
	rm -f "$tmp/ran"
	"$M" "$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
	st=$?
	lines=$(wc -l <"$tmp/bad.err")
	if test "$st" = 2 && test "$lines" = 1 && ! test -e "$tmp/ran" &&
		! test -s "$tmp/bad.out"; then
		ok "$what: exit 2, one line: $(cat "$tmp/bad.err")"
	else
		notok "$what: status $st, $lines lines on stderr"
		diag "$tmp/bad.err" "$tmp/bad.out"
	fi
}
ran="touch $tmp/ran"
bad "unknown option" run --frobnicate -- sh -c "$ran"
bad "--heap-limit abc" run --heap-limit abc -- sh -c "$ran"
bad "--heap-limit 99999999999999999999G" run --heap-limit 99999999999999999999G -- sh -c "$ran"
bad "--heap-limit 18446744073709551616 (2^64)" run --heap-limit 18446744073709551616 -- sh -c "$ran"
bad "--alloc-limit -5" run --alloc-limit -5 -- sh -c "$ran"
bad "--alloc-limit ''" run --alloc-limit '' -- sh -c "$ran"
bad "--alloc-limit ' 5M' (blank)" run --alloc-limit ' 5M' -- sh -c "$ran"
bad "--heap-limit without a value" run --heap-limit
bad "--interval 0" run --interval 0 -- sh -c "$ran"
bad "--seed -1" run --seed -1 -- sh -c "$ran"
bad "--on-limit maybe" run --on-limit maybe -- sh -c "$ran"
bad "--stats on a missing directory" run --stats "$tmp/no/such" -- sh -c "$ran"
bad "--report in a missing directory" run --report "$tmp/no/such/r" -- sh -c "$ran"
bad "--report ''" run --report '' -- sh -c "$ran"
bad "missing program" run --heap-limit 1M
bad "missing program after --" run --heap-limit 1M --
bad "program not found" run -- memlimits-no-such-program-here
bad "program path not found" run -- "$tmp/no-such-program"
bad "a directory as program" run -- "$tmp"
printf 'just text\n' >"$tmp/text" && chmod +x "$tmp/text"
bad "an executable that is neither ELF nor #!" run -- "$tmp/text"
printf '#!/bin/sh\ntouch %s/ran\n' "$tmp" >"$tmp/noexec.sh"
bad "a file that is not executable" run -- "$tmp/noexec.sh"

# Programs the library cannot reach.
printf 'int main(void) { return 0; }\n' >"$tmp/s.c"
if have gcc && gcc -static -o "$tmp/static" "$tmp/s.c" 2>/dev/null; then
	bad "a static binary" run --heap-limit 1G -- "$tmp/static"
	printf '#!%s\n' "$tmp/static" >"$tmp/static.sh" && chmod +x "$tmp/static.sh"
	bad "a script whose interpreter is static" run -- "$tmp/static.sh"
else
	skip "gcc -static unavailable"
	skip "gcc -static unavailable"
fi
if have gcc && gcc -static-pie -o "$tmp/spie" "$tmp/s.c" 2>/dev/null; then
	bad "a static-pie binary" run -- "$tmp/spie"
else
	skip "gcc -static-pie unavailable"
fi
cat >"$tmp/ownmalloc.c" <<'C'
#include <stddef.h>
static char arena[1 << 20];
static size_t used;
void *malloc(size_t n) { void *p = arena + used; used += (n + 15) & ~(size_t)15; return used <= sizeof arena ? p : NULL; }
void free(void *p) { (void)p; }
int main(void) { return 0; }
C
if have gcc && gcc -O0 -o "$tmp/ownmalloc" "$tmp/ownmalloc.c" 2>/dev/null; then
	bad "a program with its own malloc" run -- "$tmp/ownmalloc"
else
	skip "gcc unavailable"
fi
if test "$(id -u)" = 0 && id nobody >/dev/null 2>&1 &&
	cp /bin/true "$tmp/suid" && chown nobody "$tmp/suid" &&
	chmod 4755 "$tmp/suid" &&
	! grep -qs " $(df -P "$tmp" | awk 'NR==2 {print $6}') .*nosuid" /proc/mounts; then
	bad "a set-user-ID program" run -- "$tmp/suid"
else
	skip "cannot make a set-user-ID program here (needs root, suid mount)"
fi

# ---- the environment the program sees --------------------------------------
LD_PRELOAD=libm.so.6 "$M" run --alloc-limit 1M --heap-limit 2KiB \
	--interval 4096 --seed 0x10 --on-limit fail --report "rel-report" \
	--profile "$tmp/p%p" --stats "$tmp" -- env >"$tmp/env.out" 2>"$tmp/env.err"
st=$?
lib=$(sed -n 's/^LD_PRELOAD=//p' "$tmp/env.out")
libfile=${lib%%:*}
if test "$st" = 0 && test "${lib#*:}" = libm.so.6 && test -f "$libfile" &&
	case $libfile in /*/lib/.libs/libmemlimits.so.0) true ;; *) false ;; esac; then
	ok "the library from the build tree is prepended to LD_PRELOAD: $lib"
else
	notok "LD_PRELOAD is '$lib' (status $st)"
	diag "$tmp/env.err"
fi
want="MEMLIMITS_ALLOC_LIMIT=1048576 MEMLIMITS_HEAP_LIMIT=2048
MEMLIMITS_SAMPLE_INTERVAL=4096 MEMLIMITS_SEED=0x10 MEMLIMITS_ON_LIMIT=fail
MEMLIMITS_REPORT=$PWD/rel-report MEMLIMITS_PROFILE=$tmp/p%p MEMLIMITS_STATS_DIR=$tmp"
missing=
for v in $want; do
	grep -qxF "$v" "$tmp/env.out" || missing="$missing $v"
done
rm -f rel-report
if test -z "$missing"; then
	ok "the program sees the settings, sizes in bytes, paths absolute"
else
	notok "settings missing from the environment:$missing"
	grep MEMLIMITS "$tmp/env.out" | diag
fi

# ---- python3: MemoryError under the heap limit --------------------------
py=
if test -n "$PYTHON3" && have "$PYTHON3"; then
	py=$("$PYTHON3" -c 'import sys; print(sys.executable)' 2>/dev/null)
fi
# Grows a list of 1 MiB buffers up to 1 GiB; prints how far it got.
grow='
got = 0
try:
    keep = []
    for i in range(1024):
        keep.append(bytearray(1 << 20))
        got += 1
    print("no MemoryError", got)
except MemoryError:
    keep = None
    print("MemoryError after", got)
print("still running:", sum(range(1000)))'
if test -n "$py" && test -x "$py"; then
	"$M" run --heap-limit 100M -- "$py" -c "$grow" >"$tmp/py.out" 2>"$tmp/py.err"
	st=$?
	got=$(sed -n 's/^MemoryError after //p' "$tmp/py.out")
	if test "$st" = 0 && test -n "$got" && test "$got" -ge 50 &&
		test "$got" -le 101 &&
		grep -qx 'still running: 499500' "$tmp/py.out"; then
		ok "python3 --heap-limit 100M: MemoryError after $got MiB, caught, the script goes on"
	else
		notok "python3 under --heap-limit 100M (status $st)"
		diag "$tmp/py.out" "$tmp/py.err"
	fi
	"$M" run --heap-limit 100M -- "$py" -c '
try:
    x = [0] * (10**9)
    print("no MemoryError")
except MemoryError:
    print("caught")
print("after", len(list(range(10))))' >"$tmp/py2.out" 2>"$tmp/py2.err"
	st=$?
	if test "$st" = 0 && test "$(cat "$tmp/py2.out")" = "caught
after 10"; then
		ok "python3: [0] * 10**9 under --heap-limit 100M raises MemoryError, caught"
	else
		notok "python3 [0] * 10**9 (status $st)"
		diag "$tmp/py2.out" "$tmp/py2.err"
	fi
	# The same over each allocator (issue 15): the library forwards to
	# it, meters its blocks, and the script gets a clean MemoryError.
	for a in jemalloc tcmalloc mimalloc; do
		"$M" run --allocator $a --heap-limit 100M --report "$tmp/pa.txt" \
			-- "$py" -c "$grow" >"$tmp/py.out" 2>"$tmp/py.err"
		st=$?
		got=$(sed -n 's/^MemoryError after //p' "$tmp/py.out")
		if grep -q 'not found in the system library path' "$tmp/py.err"; then
			skip "--allocator $a: not installed (scripts/install-deps)"
		elif test "$st" = 0 && test -n "$got" && test "$got" -ge 50 &&
			test "$got" -le 101 &&
			grep -qx 'still running: 499500' "$tmp/py.out" &&
			grep -q "^allocator: $a (" "$tmp/pa.txt"; then
			ok "python3 --allocator $a --heap-limit 100M: MemoryError after $got MiB, caught, the script goes on"
		else
			notok "python3 over $a under --heap-limit 100M (status $st)"
			diag "$tmp/py.out" "$tmp/py.err" "$tmp/pa.txt"
		fi
	done
else
	for i in 1 2 3 4 5; do
		skip "python3 not found"
	done
fi

# ---- xmllint: an entity-expansion bomb ----------------------------------
# Ten levels of ten references: 10^9 copies of "lol...".  --huge lifts
# libxml2's own amplification guard ("Detected an entity reference loop"),
# so that the heap limit is what stops it.  xmllint exits 0 after "Memory
# allocation failed" with --noout: judged by its messages and the report.
if have xmllint; then
	{
		echo '<?xml version="1.0"?>'
		echo '<!DOCTYPE lolz ['
		echo '<!ENTITY lol0 "lollollollollollollollollollollollollollollollollollollol">'
		i=1
		while test $i -le 9; do
			printf '<!ENTITY lol%d "' $i
			j=0
			while test $j -lt 10; do
				printf '&lol%d;' $((i - 1))
				j=$((j + 1))
			done
			printf '">\n'
			i=$((i + 1))
		done
		echo ']>'
		echo '<lolz>&lol9;</lolz>'
	} >"$tmp/bomb.xml"
	limit_mib=64
	start=$(date +%s)
	"$RSS" "$M" run --heap-limit ${limit_mib}M --report "$tmp/x.rep" -- \
		xmllint --noent --huge --noout "$tmp/bomb.xml" >"$tmp/x.out" 2>"$tmp/x.err"
	st=$?
	secs=$(($(date +%s) - start))
	kb=$(sed -n 's/^test-run-rss: maxrss_kb //p' "$tmp/x.err")
	if grep -q 'Memory allocation failed' "$tmp/x.err" &&
		grep -q '^limit reached: the heap limit' "$tmp/x.rep" &&
		test -n "$kb" && test "$kb" -lt $((2 * limit_mib * 1024)); then
		ok "xmllint --noent bomb under --heap-limit ${limit_mib}M: memory error, peak RSS $kb KiB < 2x the limit (status $st, ${secs}s)"
	else
		notok "xmllint --noent bomb: peak RSS '$kb' KiB, status $st"
		tail -3 "$tmp/x.err" | diag
		head -3 "$tmp/x.rep" | diag
	fi
else
	skip "xmllint not found (package libxml2-utils)"
fi

# ---- the report names the function that allocated most --------------------
"$M" run --alloc-limit 64M --on-limit abort --report "$tmp/hog.rep" -- \
	"$HOG" 512 >"$tmp/hog.out" 2>"$tmp/hog.err"
st=$?
first=$(sed -n '/^#1:/{n;p;q}' "$tmp/hog.rep")
tripped=$(sed -n '/^stack that tripped/{n;p;q}' "$tmp/hog.rep")
if test "$st" = 3 && ! grep -q 'allocated 512' "$tmp/hog.out" &&
	grep -q '^limit reached: the allocation limit' "$tmp/hog.rep" &&
	case $first in *hog_function+0x*test-run-hog*) true ;; *) false ;; esac &&
	case $tripped in *hog_function+0x*) true ;; *) false ;; esac; then
	ok "--on-limit abort: status 3, the report's top site and tripping stack are hog_function"
else
	notok "abort report: status $st, top frame '$first', tripped '$tripped'"
	head -20 "$tmp/hog.rep" | diag
fi
# Estimated bytes reach the limit, but not by much.
est=$(sed -n 's/^estimated bytes allocated: \([0-9]*\) .*/\1/p' "$tmp/hog.rep")
if test -n "$est" && test "$est" -ge $((64 << 20)) && test "$est" -le $((80 << 20)); then
	ok "the report's estimate ($est bytes) is at the 64 MiB limit"
else
	notok "the report's estimate is '$est'"
fi
# Without --report: on stderr.
"$M" run --alloc-limit 64M --on-limit abort -- "$HOG" 512 >/dev/null 2>"$tmp/hog2.err"
st=$?
if test "$st" = 3 && grep -q '^    hog_function+0x' "$tmp/hog2.err" &&
	grep -q '^==== memlimits report' "$tmp/hog2.err"; then
	ok "--on-limit abort without --report: the report on stderr, status 3"
else
	notok "report on stderr: status $st"
	head -5 "$tmp/hog2.err" | diag
fi
# fail: the allocations fail, the program carries on; the report goes to
# stderr at exit, as a limit was reached.
"$M" run --alloc-limit 64M -- "$HOG" 512 >"$tmp/hog3.out" 2>"$tmp/hog3.err"
st=$?
mib=$(sed -n 's/^hog: NULL after \([0-9]*\) MiB/\1/p' "$tmp/hog3.out")
# The trip comes at the k-th sample, k = ceil(64 MiB / 80000) = 839: a
# Gamma(839, 80000) point, mean 64.0 MiB, sd 2.2 MiB.  ml_bound_alloc gives
# P(not tripped by 78 MiB) = 1.5e-9 and P(tripped before 52 MiB) < 1e-8:
# false alarm below 1e-8 for the window [40, 78].
if test "$st" = 0 && test -n "$mib" && test "$mib" -ge 40 && test "$mib" -le 78 &&
	grep -q '^limit reached: the allocation limit' "$tmp/hog3.err"; then
	ok "--on-limit fail: malloc returns NULL after $mib MiB, exit 0, report on stderr"
else
	notok "--on-limit fail: status $st, NULL after '$mib' MiB"
	diag "$tmp/hog3.out" "$tmp/hog3.err"
fi
# Threads share the process's allocation limit: 4 x 32 MiB trips 64 MiB,
# though no thread alone reaches it.
"$M" run --alloc-limit 64M --on-limit abort --report "$tmp/thr.rep" -- \
	"$HOG" threads 32 >/dev/null 2>&1
st1=$?
"$M" run --alloc-limit 1G --on-limit abort -- "$HOG" threads 32 >/dev/null 2>&1
st2=$?
if test "$st1" = 3 && test "$st2" = 0; then
	ok "4 threads x 32 MiB trip a 64 MiB allocation limit together, not 1 GiB"
else
	notok "threads: status $st1 under 64M (want 3), $st2 under 1G (want 0)"
fi

# ---- sh -c: children get the limits, each its own budget -----------------
"$M" run --alloc-limit 64M --on-limit abort -- sh -c "'$HOG' 40 && '$HOG' 40" \
	>"$tmp/sh1.out" 2>"$tmp/sh1.err"
st=$?
if test "$st" = 0 && test "$(grep -c 'allocated 40 MiB' "$tmp/sh1.out")" = 2; then
	ok "sh -c 'hog 40 && hog 40' under 64M: each child has its own budget"
else
	notok "two children of 40 MiB under 64M: status $st"
	diag "$tmp/sh1.out" "$tmp/sh1.err"
fi
"$M" run --alloc-limit 64M --on-limit abort --report "$tmp/sh2.rep" --report-all -- \
	sh -c "'$HOG' 40 | cat; '$HOG' 200 | cat; exit 9" >"$tmp/sh2.out" 2>"$tmp/sh2.err"
st=$?
reports=$(grep -c '^==== memlimits report' "$tmp/sh2.rep")
fired=$(grep -c '^limit reached: the allocation limit' "$tmp/sh2.rep")
if test "$st" = 9 && grep -q 'allocated 40 MiB' "$tmp/sh2.out" &&
	! grep -q 'allocated 200' "$tmp/sh2.out" && test "$fired" = 1 &&
	test "$reports" -ge 4; then
	ok "a pipeline's children are limited: one of $reports processes tripped, all reported"
else
	notok "pipeline: status $st, $reports reports, $fired tripped"
	diag "$tmp/sh2.out" "$tmp/sh2.err"
fi
# Without --report-all the file gets the reports of PROGRAM (the process
# run started, the pid it keeps through exec) and of the processes that
# reached a limit: 0.2 appended one per process (CPython's suite: 875
# reports, 6 MB, all "limit reached: none").  dash leaves by _exit and
# writes none itself: the last hog, exec'd, is PROGRAM's pid.
for all in "" --report-all; do
	# shellcheck disable=SC2086 # $all is one word or none
	"$M" run --alloc-limit 4MiB --report "$tmp/sh4.rep" $all -- \
		sh -c "'$HOG' 1; '$HOG' 1; '$HOG' 8; /bin/true; exec '$HOG' 2" \
		>"$tmp/sh4.out" 2>"$tmp/sh4.err"
	st=$?
	got=$(grep -A1 '^==== memlimits report' "$tmp/sh4.rep" |
		sed -n 's/^==== memlimits report: pid [0-9]*, .*\/\([^/]*\)$/\1/p; s/^limit reached: \([a-z]*\).*/\1/p' |
		paste -sd' ' -)
	if test -z "$all"; then
		want="test-run-hog the test-run-hog none"
	else
		want="test-run-hog none test-run-hog none test-run-hog the true none test-run-hog none"
	fi
	if test "$st" = 0 && test "$got" = "$want"; then
		ok "--report FILE${all:+ $all}: the reports of $want"
	else
		notok "--report FILE${all:+ $all}: status $st, reports '$got', expected '$want'"
		diag "$tmp/sh4.err" "$tmp/sh4.rep"
	fi
done
if test -n "$py"; then
	"$M" run --heap-limit 100M -- sh -c "'$py' -c '$grow' | cat; echo shell goes on" \
		>"$tmp/sh3.out" 2>"$tmp/sh3.err"
	st=$?
	if test "$st" = 0 && grep -q '^MemoryError after' "$tmp/sh3.out" &&
		grep -q '^shell goes on' "$tmp/sh3.out"; then
		ok "sh -c 'python3 ... | cat': the child python3 gets MemoryError"
	else
		notok "sh -c python3 pipeline: status $st"
		diag "$tmp/sh3.out" "$tmp/sh3.err"
	fi
else
	skip "python3 not found"
fi

# ---- profile: collapsed stacks ------------------------------------------------
"$M" run --profile "$tmp/hog.prof" --report "$tmp/hog4.rep" -- "$HOG" 100 >/dev/null 2>&1
st=$?
lines=$(wc -l <"$tmp/hog.prof")
badlines=$(grep -cvE '^test-run-hog(;[^; ][^;]*)+ [0-9]+$' "$tmp/hog.prof")
sum=$(awk '{ s += $NF } END { printf "%.0f", s }' "$tmp/hog.prof")
est=$(sed -n 's/^estimated bytes allocated: \([0-9]*\) .*/\1/p' "$tmp/hog4.rep")
if test "$st" = 0 && test "$lines" -ge 2 && test "$badlines" = 0 &&
	grep -qE ';main;hog_function [0-9]+$' "$tmp/hog.prof"; then
	ok "--profile: $lines lines of 'root;...;leaf bytes', main;hog_function among them"
else
	notok "--profile: status $st, $lines lines, $badlines malformed"
	head -5 "$tmp/hog.prof" | diag
fi
# The profile holds every sample: its total is the report's estimate, and
# both are near the 101 MiB allocated (Poisson: sd ~ 1%).
if test -n "$est" && test "$sum" = "$est" &&
	test "$sum" -ge $((92 << 20)) && test "$sum" -le $((110 << 20)); then
	ok "the profile's bytes add up to the sampled total ($sum)"
else
	notok "profile total $sum, report's estimate '$est'"
fi

# ---- stats -------------------------------------------------------------------
mkdir -p "$tmp/st"
"$M" run --stats "$tmp/st" -- sh -c "/bin/true; /bin/true; '$HOG' 10 >/dev/null; exit 0"
st=$?
# dash leaves through _exit (no destructors): the shell itself may write
# no file, its three children must.
files=$(ls "$tmp/st" | grep -c '^memlimits\.[0-9]*\.json$')
others=$(ls -A "$tmp/st" | grep -vc '^memlimits\.[0-9]*\.json$')
if test "$st" = 0 && test "$files" -ge 3 && test "$others" = 0 &&
	test "$(grep -l '"program": ".*/true"' "$tmp"/st/*.json | wc -l)" = 2; then
	ok "--stats: one file per process (true, true, hog; $files files), no temporary left"
else
	notok "--stats: status $st, $files files, $others others"
	ls -A "$tmp/st" | diag
fi
if test -n "$py"; then
	"$py" - "$tmp/st" >"$tmp/st.py" 2>&1 <<'PY'
import glob, json, sys
tot = 0
for f in sorted(glob.glob(sys.argv[1] + "/memlimits.*.json")):
    d = json.load(open(f))
    assert d["format"] == "memlimits-stats" and d["version"] == 3
    assert 0 <= d["mapped_bytes"], f
    assert sum(h[1] for h in d["histogram"]) == d["allocations"], f
    assert sum(h[2] for h in d["histogram"]) == d["sampled_allocations"], f
    assert d["estimated_bytes"] == d["samples"] * d["interval"], f
    tot += d["allocations"]
print(tot)
PY
	pst=$?
	total=$(tail -1 "$tmp/st.py")
	check $pst "the statistics files are valid JSON and consistent ($total allocations)"
else
	skip "python3 not found"
	total=
fi
"$M" stats "$tmp/st" >"$tmp/stats.out" 2>"$tmp/stats.err"
st=$?
rows=$(grep -cE '^[0-9]+ ' "$tmp/stats.out")
tline=$(grep '^TOTAL' "$tmp/stats.out")
tallocs=$(echo "$tline" | awk '{ print $5 }')
if test "$st" = 0 && test "$rows" = "$files" && ! test -s "$tmp/stats.err" &&
	case $tline in *"($files processes)"*) true ;; *) false ;; esac &&
	{ test -z "$total" || test "$tallocs" = "$total"; } &&
	grep -qE '^[0-9]+ +test-run-hog ' "$tmp/stats.out"; then
	ok "memlimits stats merges $files processes into one table (total $tallocs allocations)"
else
	notok "memlimits stats: status $st, $rows rows, total '$tline' vs '$total'"
	diag "$tmp/stats.out" "$tmp/stats.err"
fi
# The hog's samples: ~10 MiB / 80000 = 131 expected (Poisson, sd 11.5).
hogf=$(grep -l 'test-run-hog' "$tmp"/st/memlimits.*.json | head -1)
samples=$(sed -n 's/^  "samples": \([0-9]*\),/\1/p' "$hogf")
if test -n "$samples" && test "$samples" -ge 85 && test "$samples" -le 190; then
	ok "the hog's sample count $samples is near the 131 expected"
else
	notok "the hog's sample count is '$samples'"
fi

# Malformed files: one line, exit 2.
badstats() {
	what=$1
	rm -rf "$tmp/bs" && mkdir "$tmp/bs"
	cat >"$tmp/bs/memlimits.1.json"
	"$M" stats "$tmp/bs" >"$tmp/bs.out" 2>"$tmp/bs.err"
	st=$?
	lines=$(wc -l <"$tmp/bs.err")
	if test "$st" = 2 && test "$lines" = 1; then
		ok "stats rejects $what: $(cat "$tmp/bs.err")"
	else
		notok "stats on $what: status $st, $lines lines"
		diag "$tmp/bs.err" "$tmp/bs.out"
	fi
}
good='{"format": "memlimits-stats", "version": 1, "pid": 1, "interval": 80000,
"allocations": 3, "bytes": 300, "sampled_allocations": 1, "samples": 1,
"unsampled_windows": 0, "histogram": [[64, 3, 1]]'
rm -rf "$tmp/bs" && mkdir "$tmp/bs" && echo "$good}" >"$tmp/bs/memlimits.1.json"
"$M" stats "$tmp/bs" >"$tmp/bs.out" 2>&1
check $? "stats accepts a minimal valid file"
echo "$good" >"$tmp/bs.in"
badstats "a truncated object" <"$tmp/bs.in"
echo "$good,}" >"$tmp/bs.in"
badstats "a trailing comma" <"$tmp/bs.in"
echo "$good, \"pid\": 2}" >"$tmp/bs.in"
badstats "a duplicate member" <"$tmp/bs.in"
echo "$good}x" >"$tmp/bs.in"
badstats "text after the object" <"$tmp/bs.in"
echo "$good}" | sed 's/"bytes": 300/"bytes": 99999999999999999999999/' >"$tmp/bs.in"
badstats "a count beyond 2^64" <"$tmp/bs.in"
echo "$good}" | sed 's/"bytes": 300/"bytes": -3/' >"$tmp/bs.in"
badstats "a negative count" <"$tmp/bs.in"
echo "$good}" | sed 's/"bytes": 300/"bytes": 3.5/' >"$tmp/bs.in"
badstats "a fractional count" <"$tmp/bs.in"
echo "$good}" | sed 's/"bytes": 300/"bytes": NaN/' >"$tmp/bs.in"
badstats "NaN" <"$tmp/bs.in"
echo "$good}" | sed 's/\[\[64, 3, 1\]\]/[[64, 2, 1]]/' >"$tmp/bs.in"
badstats "a histogram that does not add up" <"$tmp/bs.in"
echo "$good}" | sed 's/\[\[64, 3, 1\]\]/[[48, 3, 1]]/' >"$tmp/bs.in"
badstats "a bucket that is not a power of two" <"$tmp/bs.in"
echo "$good}" | sed 's/"samples": 1,//' >"$tmp/bs.in"
badstats "a missing member" <"$tmp/bs.in"
echo "$good}" | sed 's/"memlimits-stats"/"other"/' >"$tmp/bs.in"
badstats "another format" <"$tmp/bs.in"
echo "$good}" | sed 's/"format"/"for\\qmat"/' >"$tmp/bs.in"
badstats "a bad escape" <"$tmp/bs.in"
printf '%s, "x": "\001"}' "$good" >"$tmp/bs.in"
badstats "a control character in a string" <"$tmp/bs.in"
{
	printf '%s, "deep": ' "$good"
	i=0
	while test $i -lt 200; do printf '['; i=$((i + 1)); done
	printf '}'
} >"$tmp/bs.in"
badstats "nesting 200 deep" <"$tmp/bs.in"
printf '' >"$tmp/bs.in"
badstats "an empty file" <"$tmp/bs.in"
printf '{"a\0": 1}' >"$tmp/bs.in"
badstats "a NUL byte" <"$tmp/bs.in"
bad "run --allocator with an unknown name" run --allocator tlsf -- true
bad "run --allocator with no name" run --allocator "" -- true
bad "stats without a directory" stats
bad "stats on a missing directory" stats "$tmp/no/such"
rm -rf "$tmp/empty" && mkdir "$tmp/empty"
bad "stats on a directory without files" stats "$tmp/empty"

echo "1..$n"
