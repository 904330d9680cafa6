#!/bin/sh
# memlimits run --tree-heap-limit fails closed (issue 35): a process of the
# tree that cannot be counted (the table is full) does not start, with one
# line; none runs without the tree's limit.  A table of 4 slots
# (MEMLIMITS_SHARED_SLOTS, read by the program that makes it) and 30
# processes started at once, each waiting for "go" before it allocates, so
# that those which started hold their slots while the others try.  The
# shell's child forked for each one is a member too, until it execs: one
# whose sampled allocation finds no slot says once that it is not counted
# and is refused it (dash then ends it: "Out of space"), so it never
# starts its program.  The test waits (a condition, with a hang limit as a
# backstop) until every one of the 30 has started or said why not; no
# wall-clock threshold.
: "${top_builddir:?}" "${top_srcdir:?}"
A=$top_builddir/tests/cli/test-tree-alloc
. "$top_srcdir/tests/tap/tree.sh"
tree_setup treefull "$A"
N=30
MEMLIMITS_SHARED_SLOTS=4 "$M" run --tree-heap-limit 64MiB -- sh -c "
	i=0
	while [ \$i -lt $N ]; do
		i=\$((i + 1))
		'$A' '$tmp' p\$i 1 go &
	done
	wait" >"$tmp/out" 2>"$tmp/err" &
runpid=$!
# outcomes: how many started, and said they do not or are not counted.
outcomes() {
	started=$(ls "$tmp" | grep -c '\.start$')
	refused=$(grep -c 'this process does not start' "$tmp/err")
	uncounted=$(grep -c 'no free slot of 4: this process is not counted$' "$tmp/err")
}
# Until each has started or said why not (backstop: 120 s, then fail).
tries=0
while :; do
	outcomes
	[ $((started + refused + uncounted)) -ge $N ] && break
	tries=$((tries + 1))
	if [ $tries -gt 2400 ]; then
		notok "the $N processes started or refused within 120 s ($started, $refused, $uncounted)"
		break
	fi
	sleep 0.05 # not ordering: the poll of a bounded wait
done
: >"$tmp/go.done"
wait $runpid
st=$?
check $st "memlimits run ends (status $st)"
outcomes
[ $((started + refused + uncounted)) = $N ]
check $? "each of $N processes started ($started), said it does not ($refused) or, forked, that it is not counted ($uncounted)" ||
	diag "$tmp/err"
[ "$refused" -ge 1 ] && [ "$started" -le 3 ]
check $? "4 slots (the program's and 3): at most 3 of the $N start" ||
	diag "$tmp/err"
grep -c ': allocated$' "$tmp/out" | grep -qx "$started"
check $? "each one started allocated its MiB" || diag "$tmp/out"
bad=$(grep ' total ' "$tmp/out" | grep -cv ' limit 67108864$')
[ "$bad" = 0 ]
check $? "each one started ran with the tree's 64 MiB limit (none without)" ||
	diag "$tmp/out"
tap_done
