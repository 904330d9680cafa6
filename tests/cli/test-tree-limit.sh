#!/bin/sh
# memlimits run --tree-heap-limit (issue 27; docs/shared.md): the heap of
# the program and all its descendants together.  Two children of one sh
# taking 80 MiB each under 100 MiB together: one is refused (the report
# names it), the total as the members see it stays within the limit and
# its slack, where --heap-limit 100MiB lets both through; no object of the
# run is left in /dev/shm after it, also when the program is killed;
# --verbose shows the budget; bad values are one line and status 2.  The
# allocations are ordered (the second waits for the first's file) and
# both hold until both have allocated; no wall-clock threshold.
: "${top_builddir:?}" "${top_srcdir:?}"
A=$top_builddir/tests/cli/test-tree-alloc
. "$top_srcdir/tests/tap/tree.sh"
tree_setup tree "$A"
ulimit -v 4000000 2>/dev/null
uid=$(id -u)
MIB=1048576
# Objects of the run whose command had pid $1.
left() {
	ls /dev/shm 2>/dev/null | grep -E "^memlimits\.$uid\.run\.$1\." || true
}

# two OPTION...: memlimits run OPTION... -- sh -c 'a & b; wait', a and b
# taking 80 MiB each, b after a, both holding until both are done.
two() {
	rm -f "$tmp"/*.done
	"$M" run "$@" -- sh -c "'$A' '$tmp' a 80 - b & '$A' '$tmp' b 80 a a; wait" \
		>"$tmp/out" 2>"$tmp/err" &
	runpid=$!
	wait $runpid
	st=$?
}

# ---- the tree limit: one of the two is refused ----------------------------
two --tree-heap-limit 100MiB
grep -q ': refused$' "$tmp/out"
check $? "--tree-heap-limit 100MiB: one of two children taking 80 MiB is refused"
grep -q ': allocated$' "$tmp/out"
check $? "--tree-heap-limit 100MiB: the other one allocates"
[ "$(grep -c ': refused$' "$tmp/out")" = 1 ]
check $? "--tree-heap-limit 100MiB: exactly one is refused" || diag "$tmp/out"
# The report on stderr names the process refused.
rpid=$(sed -n 's/^. pid \([0-9]*\): refused$/\1/p' "$tmp/out")
grep -q "^==== memlimits report: pid $rpid," "$tmp/err" &&
	grep -q '^limit reached: the tree heap limit' "$tmp/err"
check $? "the report names the process whose allocation was refused" ||
	diag "$tmp/err"
# The members' total while both hold: within the limit plus the slack
# (docs/shared.md: a batch of 1 MiB per member, 3 members here).
bad=$(awk -v lim=$((100 * MIB)) -v slack=$((3 * MIB)) '
	/holding: total/ { if ($4 > lim + slack || $6 != lim) print }' "$tmp/out")
grep -q 'holding: total' "$tmp/out" && [ -z "$bad" ]
check $? "the total as the members see it stays within 100 MiB and its slack" ||
	diag "$tmp/out"
[ -z "$(left $runpid)" ]
check $? "no /dev/shm object of the run is left after it"
[ "$st" = 0 ]
check $? "the command exits with the program's status (sh's wait: 0)"

# ---- --heap-limit: a budget per process, both through -------------------
two --heap-limit 100MiB
[ "$(grep -c ': allocated$' "$tmp/out")" = 2 ]
check $? "--heap-limit 100MiB: both children take 80 MiB" || diag "$tmp/out" "$tmp/err"

# ---- both limits together ------------------------------------------------
two --heap-limit 50MiB --tree-heap-limit 1GiB
[ "$(grep -c ': refused$' "$tmp/out")" = 2 ]
check $? "--heap-limit 50MiB with --tree-heap-limit 1GiB: each refused by its own limit" ||
	diag "$tmp/out"

# The program writes its pid to $tmp/pid once it runs (60 s at most).
wait_pid_file() {
	i=0
	while [ ! -s "$tmp/pid" ] && [ $i -lt 3000 ]; do
		sleep 0.02 # not ordering: the poll of a wait on the pid file
		i=$((i + 1))
	done
}

# ---- a program killed mid-run leaves nothing -----------------------------
rm -f "$tmp/pid" "$tmp/shm"
# not ordering: the program runs until the test kills it (sleep 300)
"$M" run --tree-heap-limit 64MiB -- sh -c \
	"ls /dev/shm >'$tmp/shm'; echo \$\$ >'$tmp/pid.new'; mv '$tmp/pid.new' '$tmp/pid'; exec sleep 300" \
	>/dev/null 2>"$tmp/err" &
runpid=$!
wait_pid_file
if [ ! -s "$tmp/pid" ]; then
	# The program never ran: end the run now (its wait would last as
	# long as the sleep) and let the checks below fail.
	echo "# no pid file after 60 s: killing the run"
	kill -KILL $runpid 2>/dev/null
fi
grep -qE "^memlimits\.$uid\.run\.$runpid\." "$tmp/shm"
check $? "the run's budget exists while the program runs"
kill -KILL "$(cat "$tmp/pid")" 2>/dev/null
wait $runpid
st=$?
[ -z "$(left $runpid)" ]
check $? "SIGKILL to the program: no /dev/shm object of the run is left"
[ "$st" = 137 ]
check $? "SIGKILL to the program: the command ends as the program did (137, got $st)"

# ---- signals to the command reach the program ----------------------------
rm -f "$tmp/pid"
# not ordering: the program's loop runs until the test's SIGTERM (sleep 0.05)
"$M" run --tree-heap-limit 64MiB -- sh -c \
	"trap 'echo got-term >\"$tmp/term\"; exit 7' TERM; echo \$\$ >'$tmp/pid'; while :; do sleep 0.05; done" \
	>/dev/null 2>&1 &
runpid=$!
wait_pid_file
kill -TERM $runpid
wait $runpid
st=$?
[ "$st" = 7 ] && grep -q got-term "$tmp/term"
check $? "SIGTERM to the command is passed on to the program (status $st)"
[ -z "$(left $runpid)" ]
check $? "... and no object is left"

# ---- --verbose -----------------------------------------------------------
"$M" run --verbose --tree-heap-limit 100MiB -- true 2>"$tmp/err"
check $? "--verbose --tree-heap-limit runs the program"
grep -q '^memlimits run: tree heap limit = 104857600 bytes (100MiB) .*shared budget run\.[0-9]*\.[0-9a-f]*' "$tmp/err"
check $? "--verbose shows the tree budget" || diag "$tmp/err"
"$M" run --verbose --tree-heap-limit 50% -- true 2>"$tmp/err"
grep -q '^memlimits run: tree heap limit = [0-9]* bytes (50% of ' "$tmp/err"
check $? "--verbose shows a percentage's bytes and what it is of" || diag "$tmp/err"
"$M" run --verbose -- true 2>"$tmp/err"
grep -q '^memlimits run: tree heap limit = none (default)' "$tmp/err"
check $? "--verbose without it: none"

# ---- bad values: one line, status 2, nothing run -------------------------
for v in foo 0 -1 101% 0% '' 1.5x 18446744073709551615; do
	rm -f "$tmp/ran"
	"$M" run --tree-heap-limit "$v" -- touch "$tmp/ran" >"$tmp/out" 2>"$tmp/err"
	st=$?
	[ "$st" = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && [ ! -e "$tmp/ran" ] &&
		[ ! -s "$tmp/out" ]
	check $? "--tree-heap-limit '$v': one line, status 2, nothing run" ||
		diag "$tmp/err"
done
"$M" run --tree-heap-limit >"$tmp/out" 2>"$tmp/err"
[ $? = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ]
check $? "--tree-heap-limit without a value: one line, status 2"

echo "1..$n"
