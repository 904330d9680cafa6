#!/usr/bin/env bash
# Issue 34's and 41's evidence: eighteen real programs (python3 three
# ways, node, the JVM, cc1, ruby, perl, sqlite3, git hash-object, sort,
# ImageMagick; PHP, Lua, a Rust program, R, git pack-objects, make -j2, a
# multiprocessing.Pool), each run plain (its peak RSS,
# ru_maxrss through /usr/bin/time, the figure -v prints as "Maximum
# resident set size"), then with L = half that peak under
#   memlimits run --heap-limit L     (must stop it near L, the runtime's way)
#   prlimit --data=L                 (RLIMIT_DATA, for comparison)
#   a cgroup memory limit of L       (v1 memory.limit_in_bytes or v2
#                                     memory.max, where it can be written)
# and under --heap-limit 1.5 x peak (must complete with its normal output
# and status; its report's and timeline's peaks are compared with RSS).
# The JVM's report is compared with what it commits, by its own Native
# Memory Tracking, not its RSS (below, and docs/mapped.md, "The JVM").
# Issue 41: under L the peak RSS must be within 0.85-1.15 x L.  CI stage o.
# Prints a TAP stream (the must-show checks of issue 34) with the table as
# comments; writes the table to OUTDIR/runtimes.tsv too.
#
# Usage: compare.sh [OUTDIR]; MEMLIMITS names the command (default: the
# build tree's, as make check-runtimes sets it).  Workloads are generated
# at run time in a temporary directory; sizes keep the whole run to a few
# minutes on 2 cores.  A program whose package is missing: its checks are
# "ok N # SKIP <package> not installed".
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
. "$top_srcdir/tests/tap/tap.sh"
ML=${MEMLIMITS:-memlimits}
outdir=${1:-runtimes-results}
mkdir -p "$outdir" && outdir=$(cd "$outdir" && pwd) || exit 1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-runtimes.XXXXXX") || exit 1
cgroups=()
cleanup() {
	local c
	for c in "${cgroups[@]}"; do rmdir "$c" 2>/dev/null; done
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
# Backstops per run, never measurements: CPU seconds (plain, each program
# takes seconds; Ruby near a limit can collect garbage for ever:
# docs/mapped.md), and a wall-clock limit far above them, as a machine
# shared with other work can starve a run of CPU for minutes.
TMO=${ML_RUNTIMES_TIMEOUT:-120}
WALL=$((TMO * 8))
PY=/usr/bin/python3             # Debian's, not a pyenv shim

if ! "$ML" run --help >/dev/null 2>&1; then
	echo "1..0 # SKIP no memlimits command ($ML)"
	exit 0
fi
for t in /usr/bin/time prlimit timeout; do
	if ! command -v "$t" >/dev/null; then
		echo "1..0 # SKIP $t not installed"
		exit 0
	fi
done

# ---- the cgroup, where one can be made -------------------------------
cg_kind= cg_why=
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
	if grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
		mkdir "/sys/fs/cgroup/ml-runtimes.$$" 2>/dev/null; then
		rmdir "/sys/fs/cgroup/ml-runtimes.$$"
		cg_kind=v2
	else
		cg_why="cgroup v2: /sys/fs/cgroup not writable or no memory controller"
	fi
elif [ -d /sys/fs/cgroup/memory ]; then
	if mkdir "/sys/fs/cgroup/memory/ml-runtimes.$$" 2>/dev/null; then
		rmdir "/sys/fs/cgroup/memory/ml-runtimes.$$"
		cg_kind=v1
	else
		cg_why="cgroup v1: /sys/fs/cgroup/memory not writable"
	fi
else
	cg_why="no cgroup memory controller mounted"
fi

# ---- the workloads ------------------------------------------------------
# wl NAME PACKAGE BINARY MUST RSS15 ERE COMMAND.  MUST: in issue 34's list
# of programs that half their peak must stop; RSS15: its report's and
# timeline's peaks must agree with its peak RSS within 15 %; ERE: how its
# runtime says a failed allocation or mapping (stderr).
W=()
wl() { W+=("$(printf '%s\037' "$@")"); }
wl py_str python3 "$PY" 1 1 'MemoryError' \
	"$PY -c 'x=[str(i)*3 for i in range(10**7)]; print(len(x))'"
wl py_dict python3 "$PY" 1 1 'MemoryError' \
	"$PY -c 'd={i:[i,i+1,i+2] for i in range(2*10**6)}; print(len(d))'"
wl node nodejs node 1 1 'out of memory|Allocation failed' \
	"node -e 'const a=[]; for (let i=0;i<5e6;i++) a.push({i:i, s:\"k\"+i}); console.log(a.length)'"
wl java openjdk-17-jdk-headless java 1 1 \
	'insufficient memory for the Java Runtime|OutOfMemoryError' \
	"java -Xmx2g -XX:ErrorFile=$tmp/hs_err.%p.log Objs.java 10000000"
wl gcc gcc gcc 1 1 'out of memory|virtual memory exhausted' \
	"gcc -O2 -c big.c -o big.o && echo compiled"
wl ruby ruby ruby 1 0 'NoMemoryError|failed to allocate memory' \
	"ruby -e 'a=Array.new(5_000_000){|i| \"s#{i}\"}; puts a.size'"
wl perl perl perl 1 0 'Out of memory' \
	"perl -e 'my @a = map { (\"x\" x 20) . \$_ } 1..5_000_000; print scalar(@a), \"\\n\"'"
wl sqlite3 sqlite3 sqlite3 1 0 'out of memory' \
	"sqlite3 :memory: 'create table t(a integer primary key, b); with recursive c(x) as (select 1 union all select x+1 from c limit 2000000) insert into t select x, randomblob(100) from c; select count(*) from t;'"
# From a pipe: git reads a regular file on stdin through a file-backed
# mmap, which no heap limit counts (nor RLIMIT_DATA).
wl git git git 0 0 'Out of memory' "cat big.txt | git hash-object --stdin"
wl py_bytes python3 "$PY" 0 0 'MemoryError' \
	"$PY -c 'a=[bytearray(b\"x\")*(1<<20) for _ in range(400)]; print(len(a))'"
wl sort coreutils sort 0 0 'memory exhausted' "sort sort.txt"
wl convert imagemagick /usr/bin/convert 0 0 'memory|cache resources' \
	"/usr/bin/convert -limit memory 4GiB -limit map 4GiB -size 4000x4000 gradient: -flip -scale 150% -format '%wx%h\\n' info:"
# Issue 41's six more (the 0.4 review's eighteen): PHP's packed array (its
# huge blocks grow by mremap in place), Lua's table, a Rust Vec of Strings
# (its allocation failure handler aborts), R's vectors (large ones are
# malloc blocks), git pack-objects' delta window (two threads), and two
# trees: make -j2 running two cc1s, a multiprocessing.Pool of two workers
# (its own timeout: a worker the cgroup kills is lost and the Pool would
# wait for it for ever).  A tree's peak is its largest process's
# (/usr/bin/time), and each limit is per process, as RLIMIT_DATA's is.
# Reports are not compared with RSS for the Rust program (a Vec grows by
# doubling: its last buffer is counted as asked, as git's is) nor for the
# Pool (its workers leave by os._exit, which writes no report; the
# timeline, written as it goes, is in the table), nor for pack-objects
# (glibc's arenas for its threads keep freed memory resident).
wl php php-cli php 1 1 'Out of memory|Allowed memory size' \
	"php -n -d memory_limit=-1 -r '\$a=[]; for(\$i=0;\$i<6000000;\$i++) \$a[]=\"s\".\$i; echo count(\$a),\"\\n\";'"
wl lua lua5.4 lua5.4 1 1 'not enough memory' \
	"lua5.4 -e 'local t={} for i=1,3000000 do t[i]=\"s\"..i end print(#t)'"
wl rust rustc rustc 1 0 'memory allocation of [0-9]* bytes failed' \
	"./rs_vec 5000000"
wl R r-base-core Rscript 1 1 'cannot allocate|memory exhausted' \
	"Rscript -e 'x <- paste0(\"s\", 1:1e6); l <- lapply(1:16, function(i) runif(2e6)); cat(length(x) + length(l), \"\\n\")'"
wl pack git git 1 0 'Out of memory|out of memory' \
	"set -o pipefail; echo HEAD | git -C repo pack-objects --revs --stdout --threads=2 --window=40 >/dev/null && echo packed"
wl make make make 1 1 'out of memory|virtual memory exhausted' \
	"make -rR -B -s -j2 -f two.mk && echo built"
wl pool python3 "$PY" 1 0 'MemoryError' \
	"$PY pool.py"
split() {
	local IFS=$'\037'
	read -r name pkg bin must rss15 end_re cmd <<<"$1"
}

# The generated inputs, in $tmp (the workloads run there).
gen_inputs() {
	cat >"$tmp/Objs.java" <<'EOF'
import java.util.ArrayList;
public class Objs {
    static final class Node { long a; int b; Node(long a, int b) { this.a = a; this.b = b; } }
    public static void main(String[] args) {
        int n = Integer.parseInt(args[0]);
        ArrayList<Node> l = new ArrayList<>();
        for (int i = 0; i < n; i++) l.add(new Node(i, i));
        System.out.println(l.size());
    }
}
EOF
	# cc1 keeps a large initializer's trees in its GC pages (mmap).  Large
	# enough that cc1's own 19 MiB of code and libraries (resident, never
	# heap) stay under 15 % of half its peak.
	"$PY" - "$tmp" <<'EOF'
import random, sys
d = sys.argv[1]
n = 2500000
with open(d + "/big.c", "w") as f:
    f.write("const int t[] = {\n")
    for i in range(0, n, 10):
        f.write(",".join(str((j * 2654435761) % 100003) for j in range(i, i + 10)) + ",\n")
    f.write("};\nint get(int i) { return t[i]; }\n")
r = random.Random(34)
with open(d + "/sort.txt", "w") as f:
    for i in range(1500000):
        f.write("%016x %d\n" % (r.getrandbits(64), i))
with open(d + "/big.txt", "wb") as f:
    block = bytes(r.getrandbits(8) for _ in range(1 << 20))
    for i in range(150):
        f.write(block[i:] + block[:i])
EOF
	# make -j2: two cc1s at once, each on big.c (cc1's 19 MiB of code
	# stay under 15 % of half its peak only for a unit that large), and
	# the Pool's program; git pack-objects' repository.
	"$PY" - "$tmp" <<'EOF'
import sys
d = sys.argv[1]
with open(d + "/two.mk", "w") as f:
    f.write("all: a.o b.o\na.o b.o: big.c\n\tgcc -O2 -c big.c -o $@\n")
with open(d + "/pool.py", "w") as f:
    f.write("""import multiprocessing as mp
def f(n):
    return len([str(i) * 3 for i in range(n)])
if __name__ == "__main__":
    with mp.get_context("fork").Pool(2) as p:
        print(sum(p.map_async(f, [3 * 10**6] * 4).get(timeout=90)))
""")
# git pack-objects: 40 similar blobs of 2 MiB (a delta window over them).
import os, random, subprocess
r = random.Random(41)
base = r.randbytes(1 << 21)
os.mkdir(d + "/repo")
for i in range(40):
    b = bytearray(base)
    for j in range(200):
        b[r.randrange(len(b))] = r.getrandbits(8)
    with open("%s/repo/f%02d.bin" % (d, i), "wb") as f:
        f.write(b)
g = ["git", "-C", d + "/repo", "-c", "user.name=t", "-c", "user.email=t@t"]
subprocess.run(g + ["init", "-q"], check=True)
subprocess.run(g + ["add", "."], check=True)
subprocess.run(g + ["commit", "-qm", "blobs"], check=True)
EOF
	# A Rust program, where rustc is (often not: rustup's is in ~/.cargo).
	if command -v rustc >/dev/null 2>&1; then
		cat >"$tmp/rs_vec.rs" <<'EOF'
fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(5_000_000);
    let mut v: Vec<String> = Vec::new();
    for i in 0..n {
        v.push(format!("s{}", i));
    }
    println!("{}", v.len());
}
EOF
		rustc -O -o "$tmp/rs_vec" "$tmp/rs_vec.rs" 2>"$tmp/rustc.err" ||
			sed 's/^/# rustc: /' "$tmp/rustc.err"
	fi
}

# have PKG BIN: the program is there (and, for java, can run a source file).
have() {
	command -v "$2" >/dev/null 2>&1 || return 1
	if [ "$1" = openjdk-17-jdk-headless ]; then
		# java File.java needs the jdk.compiler module: the JRE alone
		# (openjdk-17-jre-headless) has no compiler.
		java --list-modules 2>/dev/null | grep -q '^jdk.compiler' || return 1
	fi
	if [ "$1" = rustc ]; then
		[ -x "$tmp/rs_vec" ] || return 1
	fi
	if [ "$1" = imagemagick ]; then
		"$2" -version 2>/dev/null | grep -q ImageMagick || return 1
	fi
	return 0
}

# measure TAG PREFIX...: run the workload's command under PREFIX (words),
# in $tmp, through /usr/bin/time; sets rss (KiB), st (exit status; 128+N
# for signal N), and leaves $tmp/TAG.out and TAG.err.
measure() {
	local tag=$1
	shift
	(cd "$tmp" && /usr/bin/time -o "$tmp/$tag.time" -f '%e %M %x' \
		timeout -k 5 "$WALL" prlimit --cpu="$TMO" -- "$@" bash -c "$cmd" \
		>"$tmp/$tag.out" 2>"$tmp/$tag.err" </dev/null)
	local l
	l=$(tail -n 1 "$tmp/$tag.time")
	secs=${l%% *}
	l=${l#* }
	rss=${l% *}
	st=${l#* }
	if grep -q 'terminated by signal' "$tmp/$tag.time"; then
		st=$((128 + $(sed -n 's/.*terminated by signal \([0-9]*\).*/\1/p' "$tmp/$tag.time")))
	fi
}

# How a run ended, in a few words.
ending() {
	local tag=$1 s=$2 m
	# RLIMIT_CPU: SIGXCPU (152); timeout(1): 124 after TERM, 137 when it
	# had to KILL.
	if [ "$s" = 152 ] || { [ "$s" != 0 ] &&
		awk -v e="$secs" -v t="$WALL" 'BEGIN { exit !(e >= t) }'; }; then
		echo "stopped by the backstop ($TMO CPU s, $WALL s), status $s"
		return
	fi
	if [ "$s" = 0 ]; then
		if cmp -s "$tmp/$tag.out" "$tmp/$name.plain.out"; then
			echo "completed"
		else
			echo "exit 0, other output"
		fi
		return
	fi
	m=$(grep -h -m1 -oE 'MemoryError|NoMemoryError[^.]*|failed to allocate memory|Fatal JavaScript invalid size error|Fatal process out of memory[^)]*|JavaScript heap out of memory|insufficient memory for the Java Runtime Environment|OutOfMemoryError[^"]*|out of memory[^0-9]*|Out of memory[^.]*|virtual memory exhausted[^.]*|Killed signal terminated program [a-z0-9]*|memory exhausted|Cannot allocate memory|cache resources exhausted|cannot allocate vector of size [0-9.]* [GMK]b|not enough memory|memory allocation of [0-9]* bytes failed' \
		"$tmp/$tag.err" "$tmp/$tag.out" | head -n 1 | cut -c1-60)
	case $s in
	13[3-9] | 1[4-5][0-9])
		echo "signal $((s - 128))$(kill -l $((s - 128)) 2>/dev/null | sed 's/^/ SIG/')${m:+: $m}" ;;
	*) echo "exit $s${m:+: $m}" ;;
	esac
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }
mib() { awk -v k="$1" 'BEGIN { printf "%.0f", k / 1024 }'; }

cg_run() { # cg_run DIR PREFIX...: run in the cgroup DIR
	local dir=$1
	shift
	measure "$name.cg" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$dir" "$@"
}

gen_inputs
tsv=$outdir/runtimes.tsv
printf 'program\tplain_rss_mib\tL_mib\tml_half_rss_over_L\tml_half_end\tml_15x_end\treport_peak_over_rss\ttimeline_peak_over_rss\tprlimit_rss_over_L\tprlimit_end\tcgroup_rss_over_L\tcgroup_end\n' >"$tsv"
{
	echo "$("$ML" --version 2>/dev/null | head -n 1), $(date -u +%Y-%m-%d), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
	echo "cgroup: ${cg_kind:-not used ($cg_why)}"
} >"$outdir/runtimes.env"
diag "$outdir/runtimes.env"

for w in "${W[@]}"; do
	split "$w"
	# ML_RUNTIMES_ONLY="name ...": a few of them (while working on one).
	case " ${ML_RUNTIMES_ONLY:-$name} " in *" $name "*) ;; *) continue ;; esac
	if ! have "$pkg" "$bin"; then
		why="$pkg not installed"
		[ "$pkg" = openjdk-17-jdk-headless ] && command -v java >/dev/null &&
			why="$pkg not installed (java File.java needs jdk.compiler)"
		if [ "$must" = 1 ]; then
			skip "$why: $name stopped under --heap-limit half its peak"
			skip "$why: $name peak RSS at most 1.15 x L"
			skip "$why: $name peak RSS at least 0.85 x L"
		fi
		skip "$why: $name completes under --heap-limit 1.5 x peak"
		if [ "$rss15" = 1 ]; then
			skip "$why: $name report's peak within 15 % of RSS"
			skip "$why: $name timeline's peak within 15 % of RSS"
		fi
		printf '%s\t(skipped: %s)\n' "$name" "$why" >>"$tsv"
		continue
	fi
	# Plain: the peak every limit is taken from.
	measure "$name.plain"
	plain_rss=$rss plain_st=$st
	if [ "$plain_st" != 0 ]; then
		notok "$name runs plain (exit $plain_st)"
		sed 's/^/# /' "$tmp/$name.plain.err" | tail -n 5
		continue
	fi
	# The peak the limits are taken from (KiB): the peak RSS.  The
	# reports are compared with it too, but for the JVM with what it
	# commits: it commits (makes writable) 2.3 x what it touches, and
	# committed writable memory is what the heap limit counts, as
	# RLIMIT_DATA and overcommit accounting count it, so no count of
	# committed bytes is within 15 % of its RSS; its own Native Memory
	# Tracking's committed total (a plain run; G1 gives nothing back in
	# this run, so at exit is its peak) is.  Issue 34 restated the JVM's
	# limits on that total too, since 1.5 x its RSS refused its heap's
	# growth; issue 41's check of what a process really holds before a
	# refusal (docs/mapped.md, "The JVM") lets it run there, and its
	# limits are its RSS's again.
	base=$plain_rss base_what="peak RSS" cmp_base=
	if [ "$name" = java ]; then
		(cd "$tmp" && java -Xmx2g -XX:NativeMemoryTracking=summary \
			-XX:+UnlockDiagnosticVMOptions -XX:+PrintNMTStatistics \
			Objs.java 10000000 >"$tmp/nmt.txt" 2>&1)
		nmt=$(sed -n 's/^Total: reserved=[0-9]*, committed=\([0-9]*\).*/\1/p' "$tmp/nmt.txt" | head -n 1)
		if [ -z "$nmt" ]; then
			notok "java: no Native Memory Tracking total"
			tail -n 5 "$tmp/nmt.txt" | sed 's/^/# /'
			continue
		fi
		cmp_base=$((nmt / 1024)) base_what="the JVM's committed (NMT)"
		echo "# java alone: peak RSS $((plain_rss >> 10)) MiB, committed (NMT) $((nmt >> 20)) MiB"
	fi
	L=$((base * 1024 / 2))
	Lk=$((base / 2))

	# memlimits, half the peak.
	measure "$name.half" "$ML" run --heap-limit "$L" \
		--report "$tmp/$name.half.report.%p" --report-all --
	half_rss=$rss half_st=$st half_end=$(ending "$name.half" "$st")
	half_r=$(ratio "$half_rss" "$Lk")
	cat "$tmp/$name.half.err" "$tmp/$name.half.out" >"$outdir/$name.half.txt" 2>/dev/null
	segv=0
	case $half_st in 139 | 135) segv=1 ;; esac
	if [ "$must" = 1 ]; then
		if [ "$half_st" != 0 ] && [ "$segv" = 0 ] && [ "$half_st" != 124 ] &&
			cat "$tmp/$name.half.err" "$tmp/$name.half.out" |
			grep -qE "$end_re"; then
			ok "$name stopped under --heap-limit $((L >> 20)) MiB: $half_end"
		else
			notok "$name stopped under --heap-limit $((L >> 20)) MiB (expected /$end_re/): $half_end"
			tail -n 5 "$tmp/$name.half.err" | sed 's/^/# /'
		fi
		if awk -v r="$half_r" 'BEGIN { exit !(r <= 1.15) }'; then
			ok "$name peak RSS $(mib "$half_rss") MiB = $half_r x L (at most 1.15)"
		else
			notok "$name peak RSS $(mib "$half_rss") MiB = $half_r x L (at most 1.15)"
		fi
		# Not early either (issue 41): at least 0.85 x L, but for the
		# JVM, whose initial heap (1/64 of physical memory, committed
		# at start) is larger than L itself on a machine with more than
		# 32 times its peak: a mapping larger than the limit is always
		# refused, as RLIMIT_DATA refuses it (docs/mapped.md).
		if [ "$name" = java ] && [ "$half_rss" -lt $((Lk / 2)) ]; then
			skip "java peak RSS $(mib "$half_rss") MiB = $half_r x L: its initial heap alone is over L, refused at start (as under prlimit --data)"
		elif awk -v r="$half_r" 'BEGIN { exit !(r >= 0.85) }'; then
			ok "$name peak RSS = $half_r x L (at least 0.85)"
		else
			notok "$name peak RSS = $half_r x L (at least 0.85)"
		fi
	elif [ "$segv" = 1 ]; then
		notok "$name under --heap-limit half its peak: $half_end"
	fi

	# memlimits, 1.5 x the peak: completes; report and timeline vs RSS.
	L15=$((base * 1024 * 3 / 2))
	measure "$name.over" "$ML" run --heap-limit "$L15" \
		--report "$tmp/$name.over.report.%p" --report-all \
		--timeline "$tmp/$name.over.tsv" --
	over_rss=$rss over_end=$(ending "$name.over" "$st")
	if [ "$over_end" = completed ]; then
		ok "$name completes under --heap-limit 1.5 x peak ($((L15 >> 20)) MiB)"
	else
		notok "$name completes under --heap-limit 1.5 x peak ($((L15 >> 20)) MiB): $over_end"
		tail -n 5 "$tmp/$name.over.err" | sed 's/^/# /'
	fi
	rpeak=$(cat "$tmp/$name.over.report."* 2>/dev/null |
		sed -n 's/^ *peak heap: \([0-9]*\) bytes.*/\1/p' | sort -n | tail -n 1)
	tpeak=$(awk -F'\t' '$1 ~ /^[0-9]+$/ && $3 > m { m = $3 } END { print m + 0 }' \
		"$tmp/$name.over.tsv" 2>/dev/null)
	# Against the peak RSS of this run (the JVM: its committed total).
	base=${cmp_base:-$over_rss}
	rr=$(ratio "$((${rpeak:-0} / 1024))" "$base")
	# No report: a process that leaves by _exit(2) writes none (the JVM
	# after a refusal; memlimits(1)).
	[ -n "$rpeak" ] || rr="none"
	tr=$(ratio "$((${tpeak:-0} / 1024))" "$base")
	if [ "$rss15" = 1 ]; then
		for k in "report's:$rr" "timeline's:$tr"; do
			r=${k#*:}
			if [ "$r" = none ]; then
				notok "$name ${k%%:*} peak: no report written ($over_end)"
			elif awk -v r="$r" 'BEGIN { exit !(r >= 0.85 && r <= 1.15) }'; then
				ok "$name ${k%%:*} peak = $r x $base_what (within 15 %)"
			else
				notok "$name ${k%%:*} peak = $r x $base_what (within 15 %)"
			fi
		done
	fi

	# prlimit --data=L.
	measure "$name.prl" prlimit --data="$L" --
	prl_r=$(ratio "$rss" "$Lk") prl_end=$(ending "$name.prl" "$st")

	# A cgroup of L (the largest process's RSS; the cgroup's own peak
	# counts page cache too).
	if [ -n "$cg_kind" ]; then
		if [ "$cg_kind" = v1 ]; then
			d=/sys/fs/cgroup/memory/ml-runtimes.$$.$name
			mkdir "$d" && cgroups+=("$d")
			echo "$L" >"$d/memory.limit_in_bytes"
		else
			d=/sys/fs/cgroup/ml-runtimes.$$.$name
			mkdir "$d" && cgroups+=("$d")
			echo "$L" >"$d/memory.max"
			echo 0 >"$d/memory.swap.max" 2>/dev/null
		fi
		cg_run "$d"
		cg_r=$(ratio "$rss" "$Lk") cg_end=$(ending "$name.cg" "$st")
	else
		cg_r=- cg_end="not run: $cg_why"
	fi

	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" \
		"$(mib "$plain_rss")" "$((L >> 20))" "$half_r" "$half_end" \
		"$over_end" "$rr" "$tr" "$prl_r" "$prl_end" "$cg_r" "$cg_end" >>"$tsv"
done

diag "$tsv"
echo "1..$n"
