#!/bin/sh
# Run each threaded test N times, J at once, and report the failures: the
# 16-core measurement of issue 33 (each 200 times, 8 at once) found races
# in the tests themselves that one run of make check never shows.
#
#   tests/concurrency/stress-tests.sh [-n N] [-j J] [TEST...]
#     from the build directory; N = 200, J = 8 by default; TEST: names
#     as in make check (tests/api/test-metrics); default: the list below.
# Prints one line per test (runs, failures, the first failing log) and
# exits 1 if any run failed.  Not part of make check (minutes of CPU).
set -u
n=200 j=8
while getopts n:j: o; do
	case $o in
	n) n=$OPTARG ;;
	j) j=$OPTARG ;;
	*) echo "usage: $0 [-n N] [-j J] [TEST...]" >&2 && exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || set -- tests/api/test-metrics tests/api/test-exact \
	tests/concurrency/test-threads tests/concurrency/test-fork \
	tests/api/test-meter-threads tests/unit/test-held-switch \
	tests/unit/test-faults tests/api/test-held tests/api/test-tasks \
	tests/api/test-task-objects tests/concurrency/test-tsan \
	tests/shared/test-shared
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
export top_srcdir
out=$(mktemp -d) || exit 2
trap 'rm -rf "$out"' EXIT
bad=0
for t in "$@"; do
	if [ ! -x "$t" ]; then
		echo "$t: not built (make check TESTS= first)"
		bad=1
		continue
	fi
	d="$out/$(echo "$t" | tr / _)"
	mkdir -p "$d"
	# J at once: xargs runs them; each run's TAP and status in a file.
	seq "$n" | xargs -P "$j" -I{} sh -c \
		'"$1" >"$2/{}.log" 2>&1; echo $? >"$2/{}.st"' sh "$t" "$d"
	fails=0 first=
	for i in $(seq "$n"); do
		st=$(cat "$d/$i.st" 2>/dev/null || echo missing)
		if [ "$st" != 0 ] || grep -q '^not ok' "$d/$i.log"; then
			fails=$((fails + 1))
			[ -n "$first" ] || first=$i
		fi
	done
	echo "$t: $n runs, $j at once: $fails failed"
	if [ "$fails" -gt 0 ]; then
		bad=1
		echo "  first failure (run $first, status $(cat "$d/$first.st")):"
		grep -E '^not ok|^Bail|^#' "$d/$first.log" | head -n 10 | sed 's/^/    /'
		tail -n 3 "$d/$first.log" | sed 's/^/    /'
	fi
done
exit $bad
