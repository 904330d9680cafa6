#!/bin/sh
# The guarded server's demo, short version: with memlimits, under
# well-behaved, streaming, runaway, leaking and bad clients at once, no
# well-behaved request fails, no well-behaved or streaming request is
# stopped by the global limit (it stops the largest holder), no streaming
# request (GiBs allocated, 64 KiB held) is stopped, every slow leak is
# stopped by a memory limit, every runaway request is stopped, peak RSS
# stays under the global limit plus the documented slack, and bad requests
# are answered and counted.  Then the same load without limits must fail those checks (the
# checker can tell), with the server killed by its RSS watchdog.
prog=${top_builddir:-.}/examples/guarded-server/guarded-server
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-server.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
. "$top_srcdir/tests/tap/tap.sh"
# check PATTERN NAME: one "check: PASS ..." line of the demo per condition.
check() {
	line=$(grep "^check: [A-Z]* \[2 limits+load\] $1" "$tmp/out" | head -1)
	case $line in
	"check: PASS "*) ok "$2: ${line#check: PASS }" ;;
	*) notok "$2: ${line:-no such line in the demo output}" ;;
	esac
}
if ! test -x "$prog"; then
	echo "1..0 # SKIP $prog not built"
	exit 0
fi
echo "1..11"

# timeout bounds the run whatever happens; the demo bounds itself too.
timeout 60 "$prog" --demo --quick >"$tmp/out" 2>"$tmp/err"
st=$?
diag "$tmp/out"
if test $st = 0 && grep -q '^guarded-server demo: PASS$' "$tmp/out"; then
	ok "demo --quick with memlimits passes (exit 0)"
else
	notok "demo --quick with memlimits: exit status $st"
	diag "$tmp/err"
fi
check "no well-behaved request failed" "well-behaved requests"
check "every runaway request was stopped" "runaway requests"
check "no bystander hit" "bystanders (global limit)"
check "every streaming request was served" "streaming requests"
check "every slow leak was stopped" "slow leaks"
check "peak RSS" "peak RSS"
check "the server survived" "bad requests"
# The baseline phase must pass the same conditions.
if grep -q '^check: PASS \[1 limits\] no well-behaved' "$tmp/out" &&
	! grep -q '^check: FAIL' "$tmp/out"; then
	ok "baseline phase passes too, no failed check"
else
	notok "a check failed"
fi

# Without limits the same load must be caught failing, cheaply: a lower
# watchdog so that the server dies fast.
timeout 60 "$prog" --demo --quick --no-limits --watchdog 512 \
	>"$tmp/out2" 2>"$tmp/err2"
st=$?
diag "$tmp/out2"
if test $st = 1 && grep -q '^guarded-server demo: FAIL$' "$tmp/out2"; then
	ok "demo --quick --no-limits fails its checks (exit 1)"
else
	notok "demo --quick --no-limits: exit status $st, expected 1"
	diag "$tmp/err2"
fi
if grep -q 'KILLED' "$tmp/out2"; then
	ok "without limits the runaway load killed the server (RSS watchdog)"
else
	notok "without limits the server was not killed"
fi
