#!/bin/sh
# The examples, one per delivery, run and do what they say (TAP):
# untrusted-task (JUMP), fail-mode (FAIL), poll-flag (FLAG).
ex="${top_builddir:-.}/examples"
n=0
failed=0

# check NAME STATUS OUTPUT PATTERN...: one test point per pattern (grep -E,
# each must match a line), and one for the exit status.
check() {
	name=$1 status=$2 out=$3 bad=0
	shift 3
	n=$((n + 1))
	if [ "$status" -eq 0 ]; then
		echo "ok $n - $name exits with status 0"
	else
		echo "not ok $n - $name exits with status 0 (got $status)"
		bad=1
	fi
	for pat in "$@"; do
		n=$((n + 1))
		if printf '%s\n' "$out" | grep -Eq -- "$pat"; then
			echo "ok $n - $name prints /$pat/"
		else
			echo "not ok $n - $name prints /$pat/"
			bad=1
		fi
	done
	if [ $bad -ne 0 ]; then
		printf '%s\n' "$out" | sed 's/^/# /'
		failed=1
	fi
}

run() {
	prog=$1
	shift
	out=$(timeout 120 "$ex/$prog" "$@" 2>&1)
	status=$?
}

run untrusted-task
check untrusted-task "$status" "$out" \
	'^runaway task: +allocation limit reached +after ~6[4-9] MiB' \
	'^well-behaved task: ok .*"parsed input.json"'

run fail-mode
check fail-mode "$status" "$out" \
	'^small +ok: 100 rows, [0-9]+ bytes of JSON' \
	'^huge +allocation limit reached: the writer failed \(Cannot allocate memory\) after [0-9]+ rows, partial document freed' \
	'^small again +ok: 100 rows' \
	'^heap in use: [0-9]+ KiB before, [0-9]+ KiB after'

run poll-flag
check poll-flag "$status" "$out" \
	'^deadline \(token, 200 ms\): +cancelled after [0-9]+ numbers.*stopped itself$' \
	'^allocation limit \(64 MiB\): +allocation limit reached after [0-9]+ numbers.*stopped itself$' \
	'^small search \(below 1e5\): +ok after 99999 numbers: longest chain so far starts at 77031 \(351 steps\)$'

# One request's four threads share one budget: the runaway is stopped at
# its 64 MiB limit, not at 4 x 64 MiB.  The estimate is in samples: it ends
# at k - 1 = 838 samples of S (the refused allocation's are taken back),
# plus the samples of blocks other threads' slices had under way; the
# range 50-79 MiB leaves room for those and for a different interval.
run fan-out
check fan-out "$status" "$out" \
	'^normal request: +ok, ~[0-9]+ MiB allocated in all by 4 threads' \
	'^runaway request: +allocation limit reached, ~(5[0-9]|6[0-9]|7[0-9]) MiB allocated in all by 4 threads'

# The event-loop server: runaway requests (on the loop thread and in the
# thread pool) stopped, every other request served, one loop thread.
if [ -x "$ex/event-loop/event-loop" ]; then
	run event-loop/event-loop --quick
	check event-loop "$status" "$out" \
		'^small +[0-9]+ +[0-9]+ +0  all served$' \
		'^leak +[0-9]+ +0 +[0-9]+  all stopped$' \
		'^pool +[0-9]+ +[0-9]+ +0  all served$' \
		'^pool-leak +[0-9]+ +0 +[0-9]+  all stopped$' \
		'^ok: every runaway request stopped, no other request failed'
else
	n=$((n + 1))
	echo "ok $n # SKIP the event-loop example is not built (no libuv)"
fi

echo "1..$n"
exit $failed
