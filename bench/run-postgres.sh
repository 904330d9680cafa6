#!/bin/sh
# make bench-postgres: pgbench -S and -N transactions per second with the
# memlimits extension (libmemlimits preloaded, shared_preload_libraries =
# memlimits, statement_limit = '1GB', cluster_limit = '4GB': limits set,
# none reached) against the plain server (nothing preloaded, no
# extension), one cluster restarted between modes, runs interleaved
# (plain, memlimits, plain, ...), ROUNDS rounds of SECONDS seconds each;
# prints each mode's median and its range.  Not part of make check (a
# timing, no verdict).  ROUNDS=5 SECONDS_PER_RUN=5 CLIENTS=2 SCALE=10 by
# default.
: "${top_builddir:?}" "${PG_BINDIR:?}"
export LC_ALL=C
unset LD_PRELOAD PGHOST PGPORT PGUSER PGDATABASE PGOPTIONS
ROUNDS=${ROUNDS:-5} SECS=${SECONDS_PER_RUN:-5} CLIENTS=${CLIENTS:-2} SCALE=${SCALE:-10}
EXT=$top_builddir/contrib/postgresql/build/memlimits.so
LIB=$top_builddir/lib/.libs/libmemlimits.so
bindir=$PG_BINDIR
[ -f "$EXT" ] || { echo "bench-postgres: the extension is not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-pgbench.XXXXXX") || exit 1
chmod 755 "$tmp"
if [ "$(id -u)" = 0 ]; then
	as() { runuser -u postgres -- "$@"; }
	chown postgres "$tmp"
else
	as() { "$@"; }
fi
data=$tmp/data
trap 'as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1; rm -rf "$tmp"' EXIT INT TERM
as mkdir -p "$tmp/lib" "$tmp/sock"
as cp "$LIB" "$tmp/lib/libmemlimits.so"
as cp "$EXT" "$tmp/lib/memlimits.so"
as "$bindir/initdb" -D "$data" -A trust -U postgres -E UTF8 --locale=C \
	--no-sync >"$tmp/initdb.out" 2>&1 || { cat "$tmp/initdb.out"; exit 1; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 54331)
as sh -c "cat >>'$data/postgresql.conf'" <<CONF
listen_addresses = ''
port = $port
unix_socket_directories = '$tmp/sock'
fsync = off
synchronous_commit = off
max_connections = 20
shared_buffers = 128MB
include_if_exists = 'mode.conf'
CONF
mode() { # mode plain|memlimits: (re)start the server in that mode
	as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
	if [ "$1" = plain ]; then
		as sh -c ": >'$data/mode.conf'"
		as "$bindir/pg_ctl" -D "$data" -l "$tmp/log" -w start >/dev/null
	else
		as sh -c "cat >'$data/mode.conf'" <<CONF
shared_preload_libraries = '$tmp/lib/memlimits.so'
memlimits.statement_limit = '1GB'
memlimits.cluster_limit = '4GB'
CONF
		as env LD_PRELOAD="$tmp/lib/libmemlimits.so" "$bindir/pg_ctl" \
			-D "$data" -l "$tmp/log" -w start >/dev/null
	fi
}
pgb() { "$bindir/pgbench" -h "$tmp/sock" -p "$port" -U postgres "$@" postgres; }
mode plain
pgb -i -s "$SCALE" -q >/dev/null 2>&1
for r in $(seq "$ROUNDS"); do
	for m in plain memlimits; do
		mode $m
		for t in S N; do
			tps=$(pgb -$t -c "$CLIENTS" -j "$CLIENTS" -T "$SECS" 2>/dev/null |
				sed -n 's/^tps = \([0-9.]*\) .*/\1/p')
			echo "$m $t $tps" >>"$tmp/runs"
		done
	done
done
echo "pgbench, $ROUNDS interleaved runs of ${SECS}s, $CLIENTS clients, scale $SCALE ($(nproc) CPUs):"
for t in S N; do
	for m in plain memlimits; do
		awk -v m=$m -v t=$t '$1 == m && $2 == t { print $3 }' "$tmp/runs" | sort -n |
			awk -v m=$m -v t=$t '{ v[NR] = $1 } END {
				med = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
				printf "  -%s %-9s median %8.0f tps  (range %.0f-%.0f, %d runs)\n", t, m, med, v[1], v[NR], NR }'
	done
done
grep -E 'terminated by signal|PANIC' "$tmp/log" && exit 1
exit 0
