# A cluster of our own, sourced by tests/postgresql/test-postgresql.sh and
# bench/run-postgres.sh.
#
# pg_cluster PREFIX: a temporary directory $tmp (PREFIX.XXXXXX) with the
# library and the extension copied to $tmp/lib (where the server's user
# can read them), a cluster initialised in $data, and postgresql.conf's
# common settings: no TCP, a socket in $tmp/sock on a free $port, fsync
# off.  As root the server runs as postgres (initdb refuses root): as()
# runs a command as the server's user.  Needs bindir, LIB and EXT; sets
# tmp, data, port and as.  Returns 1 when initdb fails (its output in
# $tmp/initdb.out).  The caller's own settings go after these.
pg_cluster() {
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX") || return 1
	chmod 755 "$tmp"
	if [ "$(id -u)" = 0 ]; then
		as() { runuser -u postgres -- "$@"; }
		chown postgres "$tmp"
	else
		as() { "$@"; }
	fi
	data=$tmp/data
	as mkdir -p "$tmp/lib" "$tmp/sock"
	as cp "$LIB" "$tmp/lib/libmemlimits.so"
	as cp "$EXT" "$tmp/lib/memlimits.so"
	as "$bindir/initdb" -D "$data" -A trust -U postgres -E UTF8 \
		--locale=C --no-sync >"$tmp/initdb.out" 2>&1 || return 1
	port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null || echo 54329)
	as sh -c "cat >>'$data/postgresql.conf'" <<CONF
listen_addresses = ''
port = $port
unix_socket_directories = '$tmp/sock'
fsync = off
CONF
}
