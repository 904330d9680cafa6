#!/bin/sh
# tests/run-tests, the runner that reruns one program or one case by name:
# it lists a program's cases (those its source names), runs one case of a
# C program and of a shell test alone, and refuses an unknown case; and
# the programs themselves (tests/tap) honour TAP_LIST and TAP_CASE.
: "${top_srcdir:?}" "${top_builddir:?}"
. "$top_srcdir/tests/tap/tap.sh"
R=$top_srcdir/tests/run-tests
P=$top_builddir/tests/api/test-tasks
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-run-tests-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# The cases test-tasks.c runs, in order, from its source.
sed -n 's/^	TAP_RUN(\(test_[a-z0-9_]*\));$/\1/p' \
	"$top_srcdir/tests/api/test-tasks.c" >"$tmp/want"
sh "$R" --list test-tasks >"$tmp/list" 2>"$tmp/err"
st=$?
sed -n 's/^  //p' "$tmp/list" >"$tmp/got"
if test "$st" = 0 && test "$(head -n 1 "$tmp/list")" = tests/api/test-tasks &&
	test "$(wc -l <"$tmp/want")" -gt 1 && cmp -s "$tmp/want" "$tmp/got"; then
	ok "--list test-tasks: the $(wc -l <"$tmp/got") cases its source runs, in order"
else
	notok "--list test-tasks: status $st, not the cases of test-tasks.c"
	diag "$tmp/list" "$tmp/err"
fi

# Every test's case names are unique (TAP_CASE would run two cases of one
# name) and there is at least one program with named cases.
sh "$R" --list >"$tmp/all" 2>"$tmp/err"
st=$?
awk '/^[^ ]/ { t = $1 } /^  / { print t, $0 }' "$tmp/all" | sort | uniq -d >"$tmp/dup"
progs=$(grep -c '^[^ ].*[^)]$' "$tmp/all")
if test "$st" = 0 && test "$progs" -gt 1 && ! test -s "$tmp/dup" &&
	! grep -qx '  ' "$tmp/all"; then
	ok "--list: $progs tests with named cases, no name twice in one"
else
	notok "--list: status $st, $progs tests with named cases, names twice:"
	diag "$tmp/dup" "$tmp/err"
fi

# One case alone: fewer results than the whole program, all of them ok.
whole=$("$P" | grep -c '^ok ')
one=$(sed -n 2p "$tmp/want")
sh "$R" test-tasks "$one" >"$tmp/one" 2>&1
st=$?
n1=$(grep -c '^ok ' "$tmp/one")
if test "$st" = 0 && test "$n1" -gt 0 && test "$n1" -lt "$whole" &&
	! grep -q '^not ok' "$tmp/one" &&
	grep -q "^PASS: tests/api/test-tasks $one " "$tmp/one"; then
	ok "test-tasks $one: $n1 results of the program's $whole, all ok"
else
	notok "test-tasks $one: status $st, $n1 ok of $whole"
	diag "$tmp/one"
fi

# PROGRAM:CASE, a shell test's case.
sh "$R" test-version.sh:man-pages >"$tmp/sh" 2>&1
st=$?
if test "$st" = 0 && test "$(grep -c '^ok ' "$tmp/sh")" = 2 &&
	grep -q "^ok 1 - every man page in docs/ is installed" "$tmp/sh" &&
	! grep -q "version-prog\|--version" "$tmp/sh"; then
	ok "test-version.sh:man-pages runs that case alone"
else
	notok "test-version.sh:man-pages: status $st"
	diag "$tmp/sh"
fi

# An unknown case: a usage error naming the program's cases, nothing run.
sh "$R" test-tasks no_such_case >"$tmp/bad" 2>"$tmp/bad.err"
st=$?
if test "$st" = 2 && ! test -s "$tmp/bad" &&
	grep -q "no case 'no_such_case'" "$tmp/bad.err" &&
	grep -q "^  $one\$" "$tmp/bad.err"; then
	ok "an unknown case: status 2, the cases listed, nothing run"
else
	notok "an unknown case: status $st"
	diag "$tmp/bad" "$tmp/bad.err"
fi
sh "$R" no-such-test >"$tmp/bad" 2>"$tmp/bad.err"
st=$?
if test "$st" = 2 && ! test -s "$tmp/bad"; then
	ok "an unknown program: status 2, nothing run"
else
	notok "an unknown program: status $st"
	diag "$tmp/bad" "$tmp/bad.err"
fi

# The program itself (tests/tap/tap.c): TAP_LIST prints the names and
# no result; an unknown TAP_CASE is a failure.
TAP_LIST=1 "$P" >"$tmp/tl"
st=$?
if test "$st" = 0 && cmp -s "$tmp/want" "$tmp/tl"; then
	ok "TAP_LIST=1 test-tasks: the case names and nothing else"
else
	notok "TAP_LIST=1 test-tasks: status $st"
	diag "$tmp/tl"
fi
TAP_CASE=no_such_case "$P" >"$tmp/tc"
st=$?
if test "$st" != 0 && grep -q "^not ok 1 - no case named 'no_such_case'" "$tmp/tc" &&
	test "$(grep -c '^ok ' "$tmp/tc")" = 0; then
	ok "TAP_CASE=no_such_case test-tasks: fails, runs no case"
else
	notok "TAP_CASE=no_such_case test-tasks: status $st"
	diag "$tmp/tc"
fi
tap_done
