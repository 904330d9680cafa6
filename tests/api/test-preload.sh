#!/bin/sh
# Real programs run unchanged under LD_PRELOAD of the library: python3, gcc
# (driver, cc1, as, ld), git, and shell pipelines.  Each runs twice, plain
# and preloaded with a tiny sample interval (so that nearly every
# allocation takes the slow path); stdout, stderr and the exit status must
# be identical.  A malformed MEMLIMITS_SAMPLE_INTERVAL must cost exactly one
# line on stderr, and doubles as proof that the library was really loaded
# into each program (a static binary would silently ignore LD_PRELOAD).
lib=${MEMLIMITS_LIB:?}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-preload.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
interval=64
. "$top_srcdir/tests/tap/tap.sh"
have() {
	command -v "$1" >/dev/null 2>&1
}

# same NAME DIR CMD: run the shell command CMD in DIR/plain and DIR/pre
# (fresh directories with the same contents), plain and preloaded; compare.
same() {
	name=$1 dir=$2 cmd=$3
	mkdir -p "$dir/plain" "$dir/pre"
	(cd "$dir/plain" && sh -c "$cmd") >"$dir/out.plain" 2>"$dir/err.plain"
	st_plain=$?
	(cd "$dir/pre" && LD_PRELOAD=$lib MEMLIMITS_SAMPLE_INTERVAL=$interval \
		MEMLIMITS_SEED=7 sh -c "$cmd") >"$dir/out.pre" 2>"$dir/err.pre"
	st_pre=$?
	if test "$st_plain" = "$st_pre" &&
		cmp -s "$dir/out.plain" "$dir/out.pre" &&
		cmp -s "$dir/err.plain" "$dir/err.pre"; then
		ok "$name: same output and status ($st_pre) under LD_PRELOAD," \
			"interval $interval ($(wc -l <"$dir/out.pre") lines)"
		return 0
	fi
	notok "$name: differs under LD_PRELOAD (status $st_plain vs $st_pre)"
	diff "$dir/out.plain" "$dir/out.pre" | head -20 | diag
	diff "$dir/err.plain" "$dir/err.pre" | head -20 | diag
	return 1
}

# loaded NAME MIN CMD...: the library's one complaint per process about a
# malformed interval shows that it is loaded into CMD and at least MIN-1 of
# its subprocesses.
loaded() {
	name=$1 min=$2
	shift 2
	LD_PRELOAD=$lib MEMLIMITS_SAMPLE_INTERVAL=abc "$@" >"$tmp/l.out" 2>"$tmp/l.err"
	got=$(grep -c 'memlimits: .*MEMLIMITS_SAMPLE_INTERVAL=abc' "$tmp/l.err")
	if test "$got" -ge "$min"; then
		ok "the library is loaded into $name ($got processes)"
	else
		notok "the library is loaded into $got processes of $name, want >= $min"
		head -5 "$tmp/l.err" | diag
	fi
}

test -f "$lib" || {
	echo "Bail out! $lib not built"
	exit 1
}

# ---- malformed environment ---------------------------------------------
# Exactly one line: a complaint per allocation, or per thread, would flood.
for bad in abc 0 -5 12q; do
	LD_PRELOAD=$lib MEMLIMITS_SAMPLE_INTERVAL=$bad /bin/echo hello \
		>"$tmp/m.out" 2>"$tmp/m.err"
	st=$?
	lines=$(wc -l <"$tmp/m.err")
	if test "$st" = 0 && test "$(cat "$tmp/m.out")" = hello &&
		test "$lines" = 1 &&
		grep -q "MEMLIMITS_SAMPLE_INTERVAL=$bad" "$tmp/m.err"; then
		ok "MEMLIMITS_SAMPLE_INTERVAL=$bad: one line on stderr, echo runs"
	else
		notok "MEMLIMITS_SAMPLE_INTERVAL=$bad: status $st, $lines stderr lines"
		diag "$tmp/m.err"
	fi
done
LD_PRELOAD=$lib MEMLIMITS_SAMPLE_INTERVAL=64KiB /bin/echo hello \
	>"$tmp/m.out" 2>"$tmp/m.err"
if test $? = 0 && test "$(cat "$tmp/m.out")" = hello && ! test -s "$tmp/m.err"; then
	ok "MEMLIMITS_SAMPLE_INTERVAL=64KiB is accepted silently"
else
	notok "MEMLIMITS_SAMPLE_INTERVAL=64KiB complains or fails"
	diag "$tmp/m.err"
fi

# ---- python3 ------------------------------------------------------------
# The interpreter itself, not a wrapper script (pyenv's shims are bash).
py=
if test -n "$PYTHON3" && have "$PYTHON3"; then
	py=$("$PYTHON3" -c 'import sys; print(sys.executable)' 2>/dev/null)
fi
if test -n "$py" && test -x "$py"; then
	cat >"$tmp/alloc.py" <<'PY'
# Allocation-heavy and deterministic: big buffers come from malloc,
# small objects from Python's own arenas.
import hashlib, json, random
rng = random.Random(12345)
h = hashlib.sha256()
bufs = []
for i in range(3000):
    b = bytearray(rng.randrange(1, 70000))
    b[::97] = bytes([i & 255]) * len(b[::97])
    bufs.append(b)
    if len(bufs) > 40:
        h.update(bufs.pop(rng.randrange(len(bufs))))
words = ["w%d" % rng.randrange(50000) for _ in range(200000)]
counts = {}
for w in words:
    counts[w] = counts.get(w, 0) + 1
top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
big = [list(range(rng.randrange(1000, 100000))) for _ in range(30)]
s = sum(sum(x[-10:]) for x in big)
text = json.dumps({"top": top, "s": s, "n": len(counts)}, sort_keys=True)
assert json.loads(text)["s"] == s
print(text)
print(h.hexdigest())
print(len("".join(words)), sorted(set(words))[:3])
PY
	same python3 "$tmp/py" "PYTHONHASHSEED=0 '$py' '$tmp/alloc.py'"
	# Both runs could fail alike: check the answer itself too.
	if test "$(sed -n '2p' "$tmp/py/out.pre" | tr -d 0-9a-f | wc -c)" = 1 &&
		grep -q '"top": \[\["w' "$tmp/py/out.pre"; then
		ok "python3's output under LD_PRELOAD is complete"
	else
		notok "python3's output under LD_PRELOAD is incomplete"
		diag "$tmp/py/out.pre" "$tmp/py/err.pre"
	fi
	loaded python3 1 "$py" -c 'pass'
else
	skip "python3 not found"
	skip "python3 not found"
	skip "python3 not found"
fi

# ---- gcc ------------------------------------------------------------------
if have gcc; then
	cat >"$tmp/hello.c" <<'C'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int cmp(const void *a, const void *b)
{
	return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b);
}
int main(void)
{
	int n = 100000, *v = malloc(n * sizeof *v);
	unsigned x = 1;
	for (int i = 0; i < n; i++)
		v[i] = (int)((x = x * 1103515245u + 12345u) >> 8);
	qsort(v, n, sizeof *v, cmp);
	long long s = 0;
	for (int i = 0; i < n; i += 1000)
		s += v[i];
	printf("sum %lld min %d max %d\n", s, v[0], v[n - 1]);
	free(v);
	return 0;
}
C
	# Same relative paths in both trees, so the objects are comparable.
	mkdir -p "$tmp/cc/plain" "$tmp/cc/pre"
	cp "$tmp/hello.c" "$tmp/cc/plain/" && cp "$tmp/hello.c" "$tmp/cc/pre/"
	same "gcc -O2 compiles and links" "$tmp/cc" \
		'gcc -O2 -Wall -c hello.c -o hello.o && gcc hello.o -o hello && ./hello'
	if cmp -s "$tmp/cc/plain/hello.o" "$tmp/cc/pre/hello.o"; then
		ok "gcc under LD_PRELOAD writes the same object file"
	else
		notok "gcc under LD_PRELOAD writes a different object file"
	fi
	# The program built under the preload runs, also preloaded itself.
	if test -x "$tmp/cc/pre/hello" &&
		LD_PRELOAD=$lib MEMLIMITS_SAMPLE_INTERVAL=$interval \
			"$tmp/cc/pre/hello" >"$tmp/cc/run.out" 2>&1 &&
		cmp -s "$tmp/cc/run.out" "$tmp/cc/out.plain"; then
		ok "the program gcc built runs, preloaded too"
	else
		notok "the program gcc built does not run the same"
		diag "$tmp/cc/run.out"
	fi
	# The driver, cc1 and as.
	loaded "gcc -c" 3 gcc -c -o "$tmp/cc/x.o" "$tmp/hello.c"
else
	skip "gcc not found"
	skip "gcc not found"
	skip "gcc not found"
	skip "gcc not found"
fi

# ---- git --------------------------------------------------------------------
if have git; then
	# A private configuration and fixed identities and dates make the
	# hashes reproducible.
	mkdir -p "$tmp/home"
	gitcmd='
	export HOME='"$tmp/home"' GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
	export GIT_AUTHOR_NAME=A GIT_AUTHOR_EMAIL=a@example.org
	export GIT_COMMITTER_NAME=C GIT_COMMITTER_EMAIL=c@example.org
	export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
	git init -q -b main repo && cd repo &&
	i=0; while test $i -lt 200; do echo "line $i of file $i" >f$i.txt; i=$((i + 1)); done &&
	seq 1 20000 >numbers &&
	git add . && git commit -q -m "first commit" &&
	sed -i s/1/one/ numbers && git rm -q f7.txt && git commit -q -am "second" &&
	git log --stat --format="%H %an <%ae> %s" &&
	git show --format=%T HEAD:numbers | tail -3 &&
	git diff HEAD~1 --shortstat && git gc -q && git fsck --no-progress 2>&1 &&
	git rev-list --count HEAD'
	same "git init, commit, log, gc, fsck" "$tmp/git" "$gitcmd"
	loaded git 1 git --version
else
	skip "git not found"
	skip "git not found"
fi

# ---- shell pipelines ---------------------------------------------------------
if have sort && have uniq && have wc && have awk && have seq; then
	pipe='seq 1 300000 | awk "{ print (\$1 * 7919) % 1009 }" | sort | uniq -c |
		sort -k1,1nr -k2,2n | head -5
	seq 1 300000 | awk "{ print (\$1 * 7919) % 1009 }" | sort -n | uniq -c | wc
	seq 1 50000 | sort -r | tr 0-9 a-j | sort | uniq | wc -lc'
	same "sort | uniq -c | wc pipelines" "$tmp/sh" "$pipe"
	loaded "sh -c 'seq | sort'" 3 sh -c 'seq 1 10 | sort'
	if test "$(cat "$tmp/l.out" | wc -l)" = 10; then
		ok "sh -c 'seq | sort' still runs with a malformed interval"
	else
		notok "sh -c 'seq | sort' with a malformed interval printed:"
		diag "$tmp/l.out"
	fi
else
	skip "coreutils or awk not found"
	skip "coreutils or awk not found"
	skip "coreutils or awk not found"
fi

echo "1..$n"
