#!/bin/sh
# make bench-postgres: the memlimits extension's cost in PostgreSQL
# (docs/postgresql.md "Overhead").  Not part of make check (figures, no
# verdict).  Two measures:
#  1. pgbench -S and -N transactions per second with the memlimits
#     extension (libmemlimits preloaded, shared_preload_libraries =
#     memlimits, statement_limit = '1GB', cluster_limit = '4GB': limits
#     set, none reached) against the plain server (nothing preloaded, no
#     extension), one cluster restarted between modes, runs interleaved
#     (plain, memlimits, plain, ...), ROUNDS rounds of SECONDS_PER_RUN
#     seconds each; each mode's median and its range.  Wall-clock: as
#     noisy as the machine (pitfalls.md).
#  2. callgrind's instructions (Ir) per pgbench -S transaction in the
#     backend, exact and repeatable whatever the load: the postmaster runs
#     under callgrind with --trace-children=yes, so every backend it forks
#     is measured on its own (a file per pid, written at its exit); one
#     client runs CG_TRANSACTIONS transactions in one connection, then
#     2 x CG_TRANSACTIONS in another, with the same --random-seed (the
#     same accounts, whose pages a first run of 2 x CG_TRANSACTIONS has
#     already brought into shared buffers); the difference of the two
#     backends' Ir over CG_TRANSACTIONS is the cost of one transaction,
#     connection start and cache warm-up cancelled out.  Modes: plain;
#     preload (libmemlimits preloaded, no extension: the allocator's own
#     cost); nolimits (the extension loaded, all limits 0: its hooks
#     alone); statement (statement_limit = '1GB' only: a task per
#     statement, no cluster budget); memlimits (as in 1).
# ROUNDS=5 SECONDS_PER_RUN=5 CLIENTS=2 SCALE=10 CG_TRANSACTIONS=1000 by
# default; CG_TRANSACTIONS=0 skips 2, ROUNDS=0 skips 1; TPS_MODES (plain
# memlimits) and TPS_TESTS (S N) choose what 1 compares.
: "${top_builddir:?}" "${top_srcdir:?}" "${PG_BINDIR:?}"
export LC_ALL=C
unset LD_PRELOAD PGHOST PGPORT PGUSER PGDATABASE PGOPTIONS
ROUNDS=${ROUNDS:-5} SECS=${SECONDS_PER_RUN:-5} CLIENTS=${CLIENTS:-2} SCALE=${SCALE:-10}
CG_TX=${CG_TRANSACTIONS:-1000}
# The modes compared for tps (of those of mode_conf below) and the tests.
TPS_MODES=${TPS_MODES:-plain memlimits} TPS_TESTS=${TPS_TESTS:-S N}
EXT=$top_builddir/contrib/postgresql/build/memlimits.so
LIB=$top_builddir/lib/.libs/libmemlimits.so
bindir=$PG_BINDIR
[ -f "$EXT" ] || { echo "bench-postgres: the extension is not built"; exit 1; }
. "$top_srcdir/tests/postgresql/pg-cluster.sh"
tmp= data=
trap '[ -z "$data" ] || as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1; wait; [ -n "${KEEP_TMP:-}" ] || [ -z "$tmp" ] || rm -rf "$tmp"' EXIT INT TERM
pg_cluster ml-pgbench || { cat "$tmp/initdb.out"; exit 1; }
as sh -c "cat >>'$data/postgresql.conf'" <<CONF
synchronous_commit = off
max_connections = 20
shared_buffers = 128MB
include_if_exists = 'mode.conf'
CONF
# mode_conf MODE: the settings of plain, preload, nolimits, statement or
# memlimits;
# mode_preload MODE: LD_PRELOAD=... where the mode preloads the library.
mode_conf() {
	case $1 in
	memlimits) as sh -c "cat >'$data/mode.conf'" <<CONF ;;
shared_preload_libraries = '$tmp/lib/memlimits.so'
memlimits.statement_limit = '1GB'
memlimits.cluster_limit = '4GB'
CONF
	statement) as sh -c "cat >'$data/mode.conf'" <<CONF ;;
shared_preload_libraries = '$tmp/lib/memlimits.so'
memlimits.statement_limit = '1GB'
CONF
	nolimits) as sh -c "cat >'$data/mode.conf'" <<CONF ;;
shared_preload_libraries = '$tmp/lib/memlimits.so'
CONF
	*) as sh -c ": >'$data/mode.conf'" ;;
	esac
}
mode_preload() { [ "$1" = plain ] || echo "LD_PRELOAD=$tmp/lib/libmemlimits.so"; }
mode() { # mode MODE: (re)start the server in that mode
	as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
	mode_conf "$1"
	as env $(mode_preload "$1") "$bindir/pg_ctl" -D "$data" -l "$tmp/log" \
		-w start >/dev/null
}
pgb() { "$bindir/pgbench" -h "$tmp/sock" -p "$port" -U postgres "$@" postgres; }
mode plain
pgb -i -s "$SCALE" -q >/dev/null 2>&1
if [ "$ROUNDS" -gt 0 ]; then
	for r in $(seq "$ROUNDS"); do
		for m in $TPS_MODES; do
			mode $m
			for t in $TPS_TESTS; do
				tps=$(pgb -$t -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" 2>/dev/null |
					sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
				echo "$m $t $tps" >>"$tmp/runs"
			done
		done
	done
	echo "pgbench, $ROUNDS interleaved runs of ${SECS}s, $CLIENTS clients, scale $SCALE ($(nproc) CPUs):"
	for t in $TPS_TESTS; do
		for m in $TPS_MODES; do
			awk -v m=$m -v t=$t '$1 == m && $2 == t { print $3 }' "$tmp/runs" | sort -n |
				awk -v m=$m -v t=$t '{ v[NR] = $1 } END {
					med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
					printf "  -%s %-9s median %8.0f tps  (range %.0f-%.0f, %d runs)\n", t, m, med, v[1], v[NR], NR }'
		done
	done
fi

# ---- 2. instructions per transaction (callgrind) ------------------------------
# cg_start MODE: the postmaster under callgrind in that mode (autovacuum
# off: no worker comes and goes), each process's figures in
# $tmp/cg/MODE.PID at its exit.
cg_start() {
	as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
	wait
	mode_conf "$1"
	as env $(mode_preload "$1") valgrind --tool=callgrind --trace-children=yes \
		--callgrind-out-file="$tmp/cg/$1.%p" "$bindir/postgres" -D "$data" \
		-c autovacuum=off >>"$tmp/cg.log" 2>&1 &
	tries=0
	until "$bindir/pg_isready" -q -h "$tmp/sock" -p "$port"; do
		tries=$((tries + 1))
		[ $tries -gt 600 ] && { echo "bench-postgres: no server under callgrind"; tail "$tmp/cg.log"; exit 1; }
		sleep 0.2
	done
	# Until the startup process and pg_isready's backends are gone: the
	# postmaster's children the same for a second (cg_run counts them).
	pm=$(head -n 1 "$data/postmaster.pid") prev=-1 same=0
	while [ $same -lt 5 ]; do
		n=$(ps --ppid "$pm" --no-headers | wc -l)
		if [ "$n" = "$prev" ]; then same=$((same + 1)); else same=0; fi
		prev=$n
		sleep 0.2
	done
}
# cg_run MODE N: Ir of the backend that ran N pgbench -S transactions
# (the biggest of the backends that exited during the run, two or more:
# pgbench's first connection, which only reads the scale, is small).
cg_run() {
	kids=$(ps --ppid "$pm" --no-headers | wc -l)
	ls "$tmp/cg" >"$tmp/cg.before"
	pgb -S -c 1 -j 1 -t "$2" --random-seed=29 >"$tmp/cg.pgbench" 2>&1 ||
		{ cat "$tmp/cg.pgbench"; exit 1; }
	# The backends write their files as they exit, after pgbench's: done
	# when the postmaster has as many children as before (the others
	# stay: autovacuum is off) and every new file is whole.
	tries=0
	while :; do
		new=$(ls "$tmp/cg" | grep -vxF -f "$tmp/cg.before")
		done_=0
		for f in $new; do
			grep -q '^totals:' "$tmp/cg/$f" 2>/dev/null && done_=$((done_ + 1))
		done
		[ "$(ps --ppid "$pm" --no-headers | wc -l)" -le "$kids" ] &&
			[ "$done_" -ge 2 ] && [ "$done_" = "$(echo $new | wc -w)" ] && break
		tries=$((tries + 1))
		[ $tries -gt 600 ] && { echo "bench-postgres: no callgrind file for the backend"; exit 1; }
		sleep 0.2
	done
	for f in $new; do awk '/^totals:/ { print $2 }' "$tmp/cg/$f"; done | sort -n | tail -n 1
}
if [ "$CG_TX" -gt 0 ] && command -v valgrind >/dev/null 2>&1; then
	as mkdir -p "$tmp/cg"
	for m in plain preload nolimits statement memlimits; do
		cg_start $m
		cg_run $m $((2 * CG_TX)) >/dev/null # warms the pages the runs read
		a=$(cg_run $m "$CG_TX")
		b=$(cg_run $m $((2 * CG_TX)))
		echo "$m $a $b" >>"$tmp/cg.runs"
	done
	as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
	wait
	echo "callgrind, instructions per pgbench -S transaction in the backend (Ir of $((2 * CG_TX)) minus $CG_TX transactions, over $CG_TX):"
	awk -v n="$CG_TX" '{ per = ($3 - $2) / n; if (NR == 1) base = per
		printf "  %-9s %8.0f Ir  (%.4fx plain)\n", $1, per, per / base }' "$tmp/cg.runs"
elif [ "$CG_TX" -gt 0 ]; then
	echo "callgrind: skipped (no valgrind)"
fi
grep -E 'terminated by signal|PANIC' "$tmp/log" && exit 1
exit 0
