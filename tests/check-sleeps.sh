#!/bin/sh
# Reject a sleep in a test that nobody has said is no ordering: make check
# orders with pipes, barriers and waits on conditions, never by sleeping
# and hoping (docs/reliability.md).  A sleep, usleep, nanosleep or
# time.sleep call passes only when its line or the line before says
# "not ordering:" and why, e.g.
#   usleep(1000); /* not ordering: a request blocked on I/O */
#   sleep 0.02 # not ordering: the poll of a wait on a pid file
#
#   tests/check-sleeps.sh [FILE...]   default: every test source in tests/
#                                     and python/tests/
#   tests/check-sleeps.sh --self-test checks that it catches each kind
# Prints one line per offending line (FILE:LINE: text); exit 1 if any.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)

check() {
	awk -v f="$1" '
	{
		line = $0
		call = line ~ /(^|[^A-Za-z0-9_])(sleep|usleep|nanosleep|clock_nanosleep)[ \t]*\(/ ||
			line ~ /time\.sleep[ \t]*\(/ ||
			line ~ /(^|[;&|({ \t"\x27])sleep[ \t]+[0-9.$]/
		# A comment that only mentions one is no call.
		if (call && line ~ /^[ \t]*(\/?\*|\/\/|#)/)
			call = 0
		if (call && line !~ /not ordering:/ && prev !~ /not ordering:/ && prev2 !~ /not ordering:/)
			printf "%s:%d: %s\n", f, NR, line
		prev2 = prev
		prev = line
	}' "$1"
}

if [ "${1:-}" = --self-test ]; then
	tmp=$(mktemp -d) || exit 2
	trap 'rm -rf "$tmp"' EXIT
	printf '%s\n' 'usleep(1000);' 'nanosleep(&ts, NULL);' 'sleep(1);' \
		'	time.sleep(0.5)' >"$tmp/bad.c"
	printf '%s\n' 'sleep 0.1' 'while :; do sleep 1; done' >"$tmp/bad.sh"
	printf '%s\n' 'usleep(1000); /* not ordering: I/O */' \
		'/* not ordering: the backstop'"'"'s pace */' 'nanosleep(&ts, NULL);' \
		'/* we never sleep(1) here */' 'int sleepy = 1;' >"$tmp/good.c"
	printf '%s\n' 'sleep 0.1 # not ordering: a poll' \
		'# sleep 5 in a comment' 'echo asleep 3' >"$tmp/good.sh"
	got=$("$0" "$tmp/bad.c" "$tmp/bad.sh" | wc -l)
	clean=$("$0" "$tmp/good.c" "$tmp/good.sh") && clean=
	if [ "$got" -eq 6 ] && [ -z "$clean" ]; then
		echo "self-test: 6 of 6 sleeps caught, no annotated one flagged"
		exit 0
	fi
	echo "self-test FAILED: $got of 6 caught; flagged good lines:"
	printf '%s\n' "$clean"
	exit 1
fi

if [ $# -eq 0 ]; then
	set -- $(find "$top/tests" "$top/python/tests" \( -name '*.c' -o -name '*.cc' \
		-o -name '*.h' -o -name '*.sh' -o -name '*.py' \) \
		! -name check-sleeps.sh ! -path '*/data/*' | sort)
fi
out=$(for f in "$@"; do check "$f"; done)
if [ -n "$out" ]; then
	printf '%s\n' "$out"
	exit 1
fi
echo "no sleep used for ordering in $# files"
