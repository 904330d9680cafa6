#!/bin/sh
# 1030 processes under memlimits run --tree-heap-limit 512MiB (issue 35:
# 0.3 failed open past 1024 live processes, a python took 1.5 GiB under
# 512 MiB).  test-tree-many's tree (its opening comment says what each
# child takes; they hold until all have reported, through pipes):
#  - mix, the default table: one process holds 300 MiB, then 1028 at once
#    ask for 1 to 3 MiB each (2 GiB together), half of them exec'd (members
#    by name) and half forked (members by fork); then one asks for 600 MiB
#    in one block.  Each runs with the tree's limit, all fit the table, the
#    600 MiB block is refused (no process exceeds the limit), some are
#    refused, and the total held stays within the limit and the lateness
#    below;
#  - full, MEMLIMITS_SHARED_SLOTS=1024: 1000 small members with a slot
#    each, then 30 forked children taking 2 MiB each: the 7 that find no
#    slot say so once each and hold nothing (fails closed; their claim
#    once came at the fold after that block, which went through);
#  - small: 1030 forked children at once, taking 900 KiB each in 60 KiB
#    blocks (905 MiB together, each less than a publication batch): the
#    total stays within the limit and the lateness (a member once
#    published only when its heap had moved by a batch, 1 MiB: none of
#    them was ever seen, and all 905 MiB were taken).
# The lateness (docs/shared.md, "memlimits run --tree-heap-limit"): each
# member publishes its heap at each sampled allocation, that allocation
# included, so what the others cannot see of it is what it took between
# two samples, no more than the gap between two sample points (a Poisson
# process: the gap around a given moment is Gamma(2, S), S = 80 000
# bytes).  With M members the sum is below Gamma(2M, S); the bound
# 1.2 x 2MS is passed with probability below exp(-2M (0.2 - ln 1.2)),
# 1e-16 for M = 1031 (Chernoff), with independent streams: the children
# are forked, each with its own stream of the sampler's seed
# (MEMLIMITS_SEED=35 in the small case; mix's exec'd children draw their
# own seeds, and its 1 MiB blocks are sampled but for e^-13 each).
# The tree waits on pipes and a signalfd, never on time; `timeout` is
# only a backstop against a hang, which fails with a message.
: "${top_builddir:?}" "${top_srcdir:?}"
T=$top_builddir/tests/shared/test-tree-many
. "$top_srcdir/tests/tap/tree.sh"
tree_setup treemany "$T"
N=1030
MIB=1048576
L=$((512 * MIB))

# run MODE [VAR=VALUE]: the tree under --tree-heap-limit 512MiB.
run() {
	mode=$1
	shift
	env "$@" timeout 300 "$M" run --tree-heap-limit 512MiB -- \
		"$T" $N "$mode" >"$tmp/$mode.out" 2>"$tmp/$mode.err"
	st=$?
	[ $st != 124 ] || echo "# $mode: no end within 300 s: a hang"
	check $st "$mode: memlimits run ends, status 0 (got $st)" ||
		diag "$tmp/$mode.out"
}
# val MODE KEY: the value the tree printed for KEY.
val() {
	sed -n "s/^$2 \([0-9]*\).*/\1/p" "$tmp/$1.out"
}
# Checks of the cases: every child started and reported, ran with the
# tree's limit, is counted if it holds memory, and exited 0.
reported() {
	[ "$(val "$1" reported)" = $N ] && [ "$(val "$1" ended_early)" = 0 ]
	check $? "$1: each of the $N children started and reported" ||
		diag "$tmp/$1.out"
}
with_limit() {
	[ "$(val "$1" limit)" = $L ] && [ "$(val "$1" with_limit)" = $N ]
	check $? "$1: each child ran with the tree's limit, 512 MiB" ||
		diag "$tmp/$1.out"
}
counted() {
	[ "$(val "$1" uncounted_held)" = 0 ]
	check $? "$1: every child holding memory is counted in the table" ||
		diag "$tmp/$1.out"
}
exits() {
	[ "$(val "$1" exits_bad)" = 0 ]
	check $? "$1: every child exits 0" || diag "$tmp/$1.out"
}
# within MODE: the total held within the limit and the lateness of its
# members (above), the program's own included.
within() {
	m=$(($(val "$1" children) + 1))
	total=$(val "$1" total)
	bound=$((L + 12 * 2 * m * 80000 / 10))
	echo "# $1: $m members hold $total bytes, $((total - L)) over the limit; the bound: $((bound - L))"
	[ -n "$total" ] && [ "$total" -le $bound ]
	check $? "$1: the total held stays within 512 MiB and the lateness of $m members"
}

if tap_case mix; then
	run mix
	reported mix
	! grep -q 'no free slot\|does not start' "$tmp/mix.err"
	check $? "mix: the default table has a slot for each (none refused one)"
	with_limit mix
	counted mix
	[ "$(val mix large)" = 300 ] && [ "$(val mix giant)" = 0 ]
	check $? "mix: 300 MiB taken first, the 600 MiB block refused" ||
		diag "$tmp/mix.out"
	max=$(val mix max)
	[ -n "$max" ] && [ "$max" -le $L ]
	check $? "mix: no process holds more than the limit ($max bytes)"
	[ "$(val mix refused)" -ge 1 ]
	check $? "mix: the 2 GiB asked for went over: $(val mix refused) refused"
	within mix
	exits mix
fi

if tap_case full; then
	run full MEMLIMITS_SHARED_SLOTS=1024
	reported full
	[ "$(val full members)" = 1024 ]
	check $? "full: the table of 1024 slots is full ($(val full members) members)"
	over=$((N + 1 - 1024))
	[ "$(grep -c 'no free slot of 1024: this process is not counted$' "$tmp/full.err")" = $over ] &&
		[ "$(val full uncounted)" = $over ]
	check $? "full: the $over processes past 1024 each say once that they are not counted" ||
		diag "$tmp/full.out" "$tmp/full.err"
	[ "$(val full uncounted_held)" = 0 ]
	check $? "full: and hold nothing: their 2 MiB blocks refused ($(val full uncounted_held) bytes held)"
	with_limit full
	exits full
fi

if tap_case small; then
	run small MEMLIMITS_SEED=35
	reported small
	with_limit small
	counted small
	[ "$(val small refused)" -ge 1 ]
	check $? "small: the 905 MiB asked for went over: $(val small refused) refused"
	within small
	exits small
fi
tap_done
