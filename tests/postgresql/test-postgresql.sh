#!/bin/sh
# PostgreSQL with the memlimits extension (issue 28, docs/postgresql.md):
# a cluster made by initdb in a temporary directory (as the postgres user
# when run as root: initdb and postgres refuse root), its socket there,
# the library and the extension copied there (nothing is installed).
#  - without libmemlimits preloaded the server refuses to start, with one
#    FATAL line naming the fix (LD_PRELOAD, the systemd drop-in);
#  - with it and memlimits.statement_limit = '256MB', five runaway
#    statements (array_agg, string_agg, jsonb_agg, a PL/pgSQL string
#    doubled, a hash aggregate under work_mem = '4GB') each fail with
#    SQLSTATE 53200 and a message starting "memlimits:", and the session's
#    next statement runs; pgbench -S runs beside them with 0 failed
#    transactions;
#  - a statement that streams gigabytes through small rows, and one that
#    allocates 3 GB through malloc in 1 MB pieces, are not stopped; the
#    latter is under memlimits.statement_alloc_limit = '512MB';
#  - the server log never shows a backend killed by a signal or the
#    cluster restarting;
#  - a non-superuser cannot SET memlimits.statement_limit; ALTER ROLE ...
#    SET gives it a limit, which SHOW shows, and which stops its
#    statements;
#  - memlimits_activity() (the extension's SQL script) returns the calling
#    backend's row.
#  - a limit under 1kB ('1B' to '512B' rounded to 0, no limit, before) is
#    refused; '1025B' is 2kB;
#  - work a statement leaves to COMMIT runs under the limits: bob's
#    deferred trigger building 1 GB and WITH HOLD cursor materialised at
#    COMMIT are stopped with 53200 at 64 MB, as is bob's PL/pgSQL in a
#    deferred exclusion constraint's index expression rechecked at
#    COMMIT; small ones commit; under
#    the cluster limit, with no statement limit, the same trigger is the
#    one stopped when the total passes 1 GB;
#  - a cursor's state counts against the fetches that grow it: bob's
#    SCROLL cursor over a materialised CTE, 60 MOVE 20000 of 1 kB rows,
#    is stopped with 53200 at 64 MB; memlimits.transaction_limit is
#    superuser-only, per role and per database, and stops carol's
#    transaction of 8 statements keeping 10 MB each at 64 MB (the same
#    as postgres commits), statements after ROLLBACK TO failing too;
#  - the regex engine's own "out of memory" (2201B) after a refusal is
#    memlimits' 53200, and every runaway's DETAIL names the refused
#    request;
#  - no statement's task is left open (memlimits_tasks_open) after an
#    ExecutorEnd that failed inside a subtransaction, or a SQL function's
#    query ended by the outer query's ExecutorEnd.
#  - memlimits_metrics(): after two statements stopped by statement_limit
#    in one session and one by statement_alloc_limit in another, a third
#    session reads exactly those counts (and the statements started), its
#    own heap only, the session's limits; with the cluster limit, every
#    holder's heap, the budget and its usage, the one global_limit stop;
#    promtool check metrics accepts both, no series twice.
#  - restarted with memlimits.cluster_limit = '1GB': three sessions each
#    holding ~180 MB in one statement finish while a fourth, growing
#    without bound, fails with 53200 "memlimits: cluster memory limit
#    reached"; memlimits_activity() shows the three while they wait
#    (skipped, with the reason, where the library has no shared budgets);
#  - a parallel worker's share of a statement is limited on its own: a
#    worker's private hash table over a 16 MB statement_limit fails in the
#    worker, and the client gets 53200.
#  - a role that is not a superuser, under a 64 MB statement_limit with
#    its own work_mem 1GB, is planned without parallel hash (whose table
#    is in DSM, which no limit counts): its join gets 53200 from a worker
#    while the leader maps under 64 MB of /dev/shm; a superuser's plan
#    keeps parallel hash.
# Probabilities: a held limit of 256 MiB needs 3355 samples at the default
# interval (80000 bytes); the statements that should go on hold under
# 1 MiB (13 samples on average): stopped with probability below 1e-300.
# The runaways keep what they allocate: stopped with certainty.
: "${top_builddir:?}" "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_HELD_LIMIT MEMLIMITS_SAMPLE_INTERVAL \
	PGHOST PGPORT PGUSER PGDATABASE PGOPTIONS
EXT=$top_builddir/contrib/postgresql/build/memlimits.so
LIB=${MEMLIMITS_LIB:-$top_builddir/lib/.libs/libmemlimits.so}
bindir=${PG_BINDIR:-}
# CI runs the real-server suites in one stage (.ci/run, ML_SKIP_SERVERS).
if [ -n "${ML_SKIP_SERVERS:-}" ]; then
	echo "1..0 # SKIP $ML_SKIP_SERVERS"
	exit 0
fi
why=
if [ ! -f "$EXT" ]; then
	why="the extension is not built (configure found no pg_config: Debian's postgresql-server-dev-15)"
elif [ -z "$bindir" ] || [ ! -x "$bindir/initdb" ] || [ ! -x "$bindir/pg_ctl" ]; then
	why="no initdb/pg_ctl in '$bindir' (Debian: apt-get install postgresql-15)"
elif [ ! -x "$bindir/pgbench" ] || [ ! -x "$bindir/psql" ]; then
	why="no psql/pgbench in $bindir (Debian: postgresql-client-15)"
elif [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then
	why="running as root and there is no postgres user to run the server"
elif [ "$(id -u)" = 0 ] && ! command -v runuser >/dev/null 2>&1; then
	why="running as root without runuser"
fi
if [ -n "$why" ]; then
	echo "1..0 # SKIP $why"
	exit 0
fi

. "$top_srcdir/tests/postgresql/pg-cluster.sh"
tmp= data= started=
stop_server() {
	[ -n "$started" ] && as "$bindir/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1
	started=
}
trap 'stop_server; [ -z "$tmp" ] || rm -rf "$tmp"' EXIT INT TERM
if ! pg_cluster ml-pg; then
	echo "Bail out! initdb failed"
	cat "$tmp/initdb.out"
	exit 1
fi
log=$tmp/server.log
as sh -c "cat >>'$data/postgresql.conf'" <<CONF
shared_preload_libraries = '$tmp/lib/memlimits.so'
memlimits.statement_limit = '256MB'
max_connections = 20
shared_buffers = 32MB
CONF

start() { # start [PRELOAD]
	: >"$tmp/start.out"
	as env ${1:+LD_PRELOAD=$1} "$bindir/pg_ctl" -D "$data" -l "$log" -w -t 60 \
		start >"$tmp/start.out" 2>&1
}
q() { # q [psql options...] -c SQL: as postgres, messages with SQLSTATEs
	"$bindir/psql" -X -h "$tmp/sock" -p "$port" -U postgres -d postgres \
		-v VERBOSITY=verbose -qAt "$@" 2>&1
}

# ---- without the preload: refused ------------------------------------------
as sh -c ": >'$log'"
if start; then
	started=1
	notok "without libmemlimits preloaded the server starts"
	stop_server
else
	ok "without libmemlimits preloaded the server refuses to start"
fi
fatal=$(grep -c 'FATAL:.*memlimits:' "$log")
if [ "$fatal" = 1 ] && grep 'FATAL:.*memlimits:' "$log" | grep -q 'LD_PRELOAD' &&
	grep 'FATAL:.*memlimits:' "$log" | grep -q 'drop-in'; then
	ok "one FATAL line names the fix: $(grep 'FATAL:.*memlimits:' "$log" | sed 's/.*FATAL: *//' | cut -c1-100)..."
else
	notok "no single FATAL line naming LD_PRELOAD and the drop-in"
	diag "$log"
fi

# ---- with it ----------------------------------------------------------------
as sh -c ": >'$log'"
if start "$tmp/lib/libmemlimits.so"; then
	started=1
	ok "with libmemlimits preloaded the server starts"
else
	notok "with libmemlimits preloaded the server does not start"
	diag "$tmp/start.out"
	diag "$log"
	echo "Bail out! no server"
	exit 1
fi
if [ "$(q -c 'show memlimits.statement_limit')" = 256MB ]; then
	ok "SHOW memlimits.statement_limit: 256MB"
else
	notok "SHOW memlimits.statement_limit: $(q -c 'show memlimits.statement_limit')"
fi

# pgbench -S beside the runaways, in rounds of 2 x 200 transactions until
# they are done (no duration to guess).
"$bindir/pgbench" -h "$tmp/sock" -p "$port" -U postgres -i -s 1 -q postgres \
	>"$tmp/pgbench-init.out" 2>&1
(
	while [ ! -f "$tmp/done" ]; do
		"$bindir/pgbench" -h "$tmp/sock" -p "$port" -U postgres -S -c 2 -j 1 \
			-t 200 postgres >>"$tmp/pgbench.out" 2>&1 ||
			echo "pgbench exited with status $?" >>"$tmp/pgbench.out"
	done
) &
bench=$!

# runaway NAME SQL: fails with 53200 "memlimits:", and the next statement of
# the same session runs.
runaway() {
	out=$(q -c "$2" -c "select 'next ' || 42")
	if printf '%s\n' "$out" | grep -q '^ERROR:  53200: memlimits: statement memory limit reached' &&
		printf '%s\n' "$out" | grep -q '^next 42$'; then
		ok "$1: 53200 memlimits: statement memory limit reached; the session goes on"
	else
		notok "$1: not stopped by the statement limit, or the session did not go on"
		printf '%s\n' "$out" | head -n 20 | sed 's/^/# /'
	fi
	printf '%s\n' "$out" | grep -q '^DETAIL:.*memlimits.statement_limit is 256.0 MB' ||
		{ notok "$1: the DETAIL names the limit"; printf '%s\n' "$out" | sed 's/^/# /'; }
	# ... and the refused request, with its size (PostgreSQL's words).
	printf '%s\n' "$out" | grep -q '^DETAIL:.*The refused request (not counted in those): Failed on request of size [0-9]* in memory context' ||
		{ notok "$1: the DETAIL names the refused request"; printf '%s\n' "$out" | sed 's/^/# /'; }
}
runaway array_agg "select array_agg(repeat('x', 1000)) from generate_series(1, 10000000)"
runaway string_agg "select length(string_agg(repeat('x', 1000), ',')) from generate_series(1, 10000000)"
runaway jsonb_agg "select jsonb_agg(repeat('x', 1000)) from generate_series(1, 10000000)"
runaway plpgsql "do \$\$ declare s text := 'x'; begin for i in 1..40 loop s := s || s; end loop; raise notice '%', length(s); end \$\$"
runaway hashagg "set work_mem = '4GB'; select count(*) from (select g, count(*) from generate_series(1, 50000000) g group by g) s"

# Streams, which hold little: 1 GB through small rows (each freed with its
# row, in a block PostgreSQL reuses), and 600 MB through malloc in 1 MB
# pieces (each malloc'd and freed: past the statement limit's bytes).
# "g % 2" keeps the planner from folding repeat() into one constant.
out=$(q -c "select sum(length(repeat('x', 1000 + g % 2))) from generate_series(1, 1000000) g")
if [ "$out" = 1000500000 ]; then
	ok "a statement streaming 1 GB through small rows is not stopped"
else
	notok "the streaming statement: $out"
fi
big="select sum(length(repeat('x', 1000000 + g % 2))) from generate_series(1, 600) g"
out=$(q -c "$big")
if [ "$out" = 600000300 ]; then
	ok "600 MB through malloc in 1 MB pieces, holding little: not stopped by the 256MB statement limit"
else
	notok "600 MB in 1 MB pieces: $out"
fi
# The allocation limit stops it: it allocates, without holding.
out=$(q -c "set memlimits.statement_alloc_limit = '128MB'" -c "$big" \
	-c "select 'next ' || 42")
if printf '%s\n' "$out" | grep -q '^ERROR:  53200: memlimits: statement allocation limit reached' &&
	printf '%s\n' "$out" | grep -q '^next 42$'; then
	ok "statement_alloc_limit 128MB stops the same statement (allocating, not holding)"
else
	notok "statement_alloc_limit did not stop it"
	printf '%s\n' "$out" | head -n 20 | sed 's/^/# /'
fi

: >"$tmp/done"
wait "$bench"
rounds=$(grep -c '^number of transactions actually processed: 400/400$' "$tmp/pgbench.out")
if [ "$rounds" -ge 1 ] &&
	[ "$(grep -c '^number of failed transactions: 0 ' "$tmp/pgbench.out")" = "$rounds" ] &&
	! grep -q 'pgbench exited' "$tmp/pgbench.out"; then
	ok "pgbench -S beside them: $rounds rounds of 400 transactions, 0 failed"
else
	notok "pgbench -S beside them failed transactions"
	diag "$tmp/pgbench.out"
fi

# ---- settings: superuser only, ALTER ROLE -------------------------------------
q -c "create role alice login" >/dev/null
out=$("$bindir/psql" -X -h "$tmp/sock" -p "$port" -U alice -d postgres -qAt \
	-c "set memlimits.statement_limit = '1GB'" 2>&1)
if printf '%s\n' "$out" | grep -q 'permission denied to set parameter "memlimits.statement_limit"'; then
	ok "a non-superuser cannot SET memlimits.statement_limit"
else
	notok "a non-superuser's SET memlimits.statement_limit: $out"
fi
q -c "alter role alice set memlimits.statement_limit = '64MB'" >/dev/null
out=$("$bindir/psql" -X -h "$tmp/sock" -p "$port" -U alice -d postgres -qAt \
	-c "show memlimits.statement_limit" \
	-c "select array_agg(repeat('x', 1000)) from generate_series(1, 10000000)" 2>&1)
if printf '%s\n' "$out" | grep -q '^64MB$' &&
	printf '%s\n' "$out" | grep -q 'memlimits: statement memory limit reached'; then
	ok "ALTER ROLE alice SET memlimits.statement_limit = '64MB': SHOW says 64MB, and it stops her runaway"
else
	notok "ALTER ROLE ... SET memlimits.statement_limit"
	printf '%s\n' "$out" | head | sed 's/^/# /'
fi

# ---- memlimits_activity() -------------------------------------------------------
sed -e '/^\\echo/d' -e "s|MODULE_PATHNAME|$tmp/lib/memlimits.so|" \
	"$top_srcdir/contrib/postgresql/memlimits--0.3.sql" >"$tmp/ext.sql"
chmod 644 "$tmp/ext.sql"
q -f "$tmp/ext.sql" >/dev/null
out=$(q -c "select pid = pg_backend_pid(), heap_bytes > 1000000, statement_held_bytes >= 0 from memlimits_activity()")
if [ "$out" = "t|t|t" ]; then
	ok "memlimits_activity(): the calling backend's row (pid, heap, statement held)"
else
	notok "memlimits_activity(): $out"
fi

# ---- memlimits_metrics() ---------------------------------------------------------
# Counted in shared memory by every backend: two statements stopped by
# statement_limit in one session, one by statement_alloc_limit in
# another, read from a third (before and after: the earlier cases'
# statements are in the totals too).  Started: every statement run as a
# task in between, the reading statements included (each is started
# before it reads): 3 + 2 + 2 after the first read.
# metric FILE SERIES: the value of one series ("" when absent).
metric() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }
# prom_ok FILE WHAT: promtool accepts it (skipped without promtool), and
# no family or series appears twice (promtool does not check that).
prom_ok() {
	dup=$(grep -v '^# ' "$1" | sed 's/ [^ ]*$//' | sort | uniq -d)
	dup=$dup$(grep -E '^# (HELP|TYPE) ' "$1" | cut -d' ' -f2,3 | sort | uniq -d)
	if [ -n "$dup" ]; then
		notok "$2: series or families twice: $(echo $dup)"
	elif ! command -v promtool >/dev/null 2>&1; then
		skip "$2: promtool check metrics (no promtool: Debian's prometheus)"
	elif promtool check metrics <"$1" >"$tmp/promtool.out" 2>&1; then
		ok "$2: promtool check metrics accepts it, no series twice"
	else
		notok "$2: promtool check metrics"
		diag "$tmp/promtool.out"
	fi
}
q -c "select memlimits_metrics()" >"$tmp/metrics0"
q -c "set memlimits.statement_limit = '32MB'" \
	-c "select array_agg(repeat('x', 1000)) from generate_series(1, 10000000)" \
	-c "select jsonb_agg(repeat('x', 1000)) from generate_series(1, 10000000)" \
	>"$tmp/metrics-s1.out"
q -c "set memlimits.statement_alloc_limit = '128MB'" -c "$big" >"$tmp/metrics-s2.out"
q -c "select pg_backend_pid()" -c "select memlimits_metrics()" >"$tmp/metrics1.out"
reader=$(head -n 1 "$tmp/metrics1.out")
sed 1d "$tmp/metrics1.out" >"$tmp/metrics1"
delta() { # delta SERIES: its change from metrics0 to metrics1
	awk -v n="$1" 'FNR == NR { if ($1 == n) a = $2; next }
		$1 == n { b = $2 } END { print a == "" || b == "" ? "missing" : b - a }' \
		"$tmp/metrics0" "$tmp/metrics1"
}
i=memlimits_tasks_interrupted_total
got="started $(delta memlimits_tasks_started_total) held $(delta "$i{reason=\"held_limit\"}") alloc $(delta "$i{reason=\"alloc_limit\"}") global $(delta "$i{reason=\"global_limit\"}") cancelled $(delta "$i{reason=\"cancelled\"}")"
if [ "$(grep -c 'ERROR:  53200: memlimits: statement memory limit' "$tmp/metrics-s1.out")" = 2 ] &&
	grep -q 'ERROR:  53200: memlimits: statement allocation limit' "$tmp/metrics-s2.out" &&
	[ "$got" = "started 7 held 2 alloc 1 global 0 cancelled 0" ]; then
	ok "memlimits_metrics() from a third session counts both sessions' stopped statements: $got"
else
	notok "memlimits_metrics() after 2 + 1 stopped statements in two sessions: $got"
	sed 's/^/# /' "$tmp/metrics-s1.out" "$tmp/metrics-s2.out" "$tmp/metrics1"
fi
if [ "$(grep -c '^memlimits_heap_bytes{' "$tmp/metrics1")" = 1 ] &&
	[ "$(metric "$tmp/metrics1" "memlimits_heap_bytes{pid=\"$reader\"}")" -gt 1000000 ] 2>/dev/null &&
	[ "$(metric "$tmp/metrics1" memlimits_statement_limit_bytes)" = 268435456 ] &&
	[ "$(metric "$tmp/metrics1" memlimits_statement_alloc_limit_bytes)" = 0 ] &&
	[ "$(metric "$tmp/metrics1" memlimits_global_limit_bytes)" = +Inf ] &&
	! grep -q '^memlimits_shared_' "$tmp/metrics1"; then
	ok "without a cluster limit: the calling backend's heap only, the session's limits (256MB, 0), the per-process limit (+Inf), no cluster gauges"
else
	notok "memlimits_metrics() gauges without a cluster limit"
	sed 's/^/# /' "$tmp/metrics1"
fi
prom_ok "$tmp/metrics1" "memlimits_metrics()"

# ---- limits under 1kB: refused ---------------------------------------------------
# The settings are in kB; an integer setting rounded '1B' to '512B' to 0,
# which is no limit at all.  Refused now (22023, invalid value); a
# fraction of a kB above 1kB is rounded up.
out=$(q -c "set memlimits.statement_limit = '1B'" -c "set memlimits.statement_limit = '512B'" \
	-c "set memlimits.statement_alloc_limit = '100B'" \
	-c "select set_config('memlimits.statement_limit', '1025B', false)")
# set_config answers the new value from a statement that began without it:
# a statement run under 2kB (a SHOW) is stopped whenever one of its
# allocations is sampled (a sample weighs 80 kB), as 1 run in 20 was.
# (a session of its own: under a 2kB limit, its next SET would be stopped)
out=$out$(printf '\n%s' "$(q -c "set memlimits.statement_limit = 0" -c "show memlimits.statement_limit")")
if [ "$(printf '%s\n' "$out" | grep -c '^ERROR:  22023: invalid value for parameter "memlimits.statement')" = 3 ] &&
	[ "$(printf '%s\n' "$out" | grep -v '^[A-Z]*:  ' | tr '\n' ' ')" = "2kB 0 " ]; then
	ok "memlimits.statement_limit '1B' and '512B', statement_alloc_limit '100B': refused (22023); '1025B' is 2kB; 0 is none"
else
	notok "limits under 1kB"
	printf '%s\n' "$out" | sed 's/^/# /'
fi

# ---- work a statement leaves to COMMIT ------------------------------------------
# As an ordinary role with ALTER ROLE ... SET memlimits.statement_limit =
# '64MB': a deferred constraint trigger building 1 GB (a PL/pgSQL string
# doubled: simple expressions, which run no planner or executor hook) and
# a WITH HOLD cursor materialised at COMMIT (200 MB through string_agg)
# run after the statement that caused them has ended, at COMMIT.  Each is
# stopped with 53200, in autocommit and in BEGIN ... COMMIT; the same
# trigger not deferred is stopped as before; small ones still work, and
# the backend is left with no task open (memlimits_tasks_open: only the
# reading statement's).
q -c "create role bob login" -c "alter role bob set memlimits.statement_limit = '64MB'" \
	-c "create table ml_def (x int)" -c "create table ml_imm (x int)" \
	-c "create table ml_def_small (x int)" \
	-c "create function ml_build() returns trigger language plpgsql as \$\$
declare s text := repeat('x', 1000);
begin
	for i in 1..tg_argv[0]::int loop s := s || s; end loop;
	raise notice 'built %', length(s);
	return null;
end \$\$" \
	-c "create constraint trigger ml_def_t after insert on ml_def deferrable initially deferred for each row execute function ml_build(20)" \
	-c "create constraint trigger ml_def_small_t after insert on ml_def_small deferrable initially deferred for each row execute function ml_build(10)" \
	-c "create trigger ml_imm_t after insert on ml_imm for each row execute function ml_build(20)" \
	-c "grant insert on ml_def, ml_imm, ml_def_small to bob" >/dev/null
bob() { "$bindir/psql" -X -h "$tmp/sock" -p "$port" -U bob -d postgres \
	-v VERBOSITY=verbose -qAt "$@" 2>&1; }
stopped() { # stopped WHAT OUTPUT: one 53200 from the statement limit, nothing built, the session goes on
	if [ "$(printf '%s\n' "$2" | grep -c '^ERROR:  53200: memlimits: statement memory limit reached')" = 1 ] &&
		printf '%s\n' "$2" | grep -q '^DETAIL:  memlimits.statement_limit is 64.0 MB' &&
		! printf '%s\n' "$2" | grep -q 'built [0-9]\{9\}' &&
		! printf '%s\n' "$2" | grep -q '^200000000$' &&
		printf '%s\n' "$2" | grep -q '^next 42$'; then
		ok "bob (statement_limit 64MB): $1 is stopped with 53200"
	else
		notok "bob (statement_limit 64MB): $1 is not stopped"
		printf '%s\n' "$2" | head -n 20 | sed 's/^/# /'
	fi
}
stopped "a deferred trigger building 1 GB at the COMMIT of an autocommit INSERT" \
	"$(bob -c "insert into ml_def values (1)" -c "select 'next ' || 42")"
stopped "a deferred trigger building 1 GB at COMMIT" \
	"$(bob -c "begin" -c "insert into ml_def values (1)" -c "commit" -c "select 'next ' || 42")"
stopped "a WITH HOLD cursor materialised at COMMIT (200 MB)" \
	"$(bob -c "begin" -c "declare c cursor with hold for select length(string_agg(repeat('x', 1000), '')) from generate_series(1, 200000)" \
		-c "commit" -c "fetch 1 from c" -c "select 'next ' || 42")"
stopped "the same trigger, not deferred" \
	"$(bob -c "insert into ml_imm values (1)" -c "select 'next ' || 42")"
# A deferrable exclusion constraint over an index expression that is
# the role's own PL/pgSQL function: a conflict at INSERT queues a recheck
# (unique_key_recheck, builtin), which at COMMIT evaluates the expression
# again, outside every statement; the function builds 1 GB when ml.big is
# on (set after the INSERTs, so only the recheck builds).  Before issue
# 44 it built it twice, unstopped, and the COMMIT failed with 23P01.
q -c "create table ml_exc (x int)" \
	-c "create function ml_key(x int) returns int language plpgsql immutable as \$\$
declare s text := repeat('x', 1000);
begin
	if current_setting('ml.big', true) = 'on' then
		for i in 1..20 loop s := s || s; end loop;
		raise notice 'key built %', length(s);
	end if;
	return abs(x);
end \$\$" \
	-c "alter table ml_exc add constraint ml_exc_c exclude using btree (ml_key(x) with =) deferrable initially deferred" \
	-c "grant insert on ml_exc to bob" >/dev/null
stopped "a deferred exclusion constraint's recheck calling bob's PL/pgSQL, building 1 GB at COMMIT" \
	"$(bob -c "begin" -c "insert into ml_exc values (1)" -c "insert into ml_exc values (-1)" \
		-c "set ml.big = on" -c "commit" -c "select 'next ' || 42")"
out=$(bob -c "begin" -c "insert into ml_exc values (2)" -c "insert into ml_exc values (-2)" -c "commit")
if printf '%s\n' "$out" | grep -q '^ERROR:  23P01: conflicting key value violates exclusion constraint "ml_exc_c"'; then
	ok "the same recheck, small: the constraint's own 23P01 at COMMIT"
else
	notok "the small recheck at COMMIT"
	printf '%s\n' "$out" | head -n 20 | sed 's/^/# /'
fi
out=$(bob -c "insert into ml_def_small values (1)" \
	-c "begin" -c "declare c cursor with hold for select length(string_agg(repeat('x', 1000), '')) from generate_series(1, 2000)" \
	-c "commit" -c "fetch 1 from c" -c "close c" -c "select memlimits_metrics()")
if printf '%s\n' "$out" | grep -q 'built 1024000$' && printf '%s\n' "$out" | grep -q '^2000000$' &&
	printf '%s\n' "$out" | grep -q '^memlimits_tasks_open{pid="[0-9]*"} 1$' &&
	! printf '%s\n' "$out" | grep -q 'ERROR'; then
	ok "a deferred trigger building 1 MB and a WITH HOLD cursor of 2 MB commit; no task left open"
else
	notok "small deferred trigger, WITH HOLD cursor"
	printf '%s\n' "$out" | grep -v '^# ' | head -n 20 | sed 's/^/# /'
fi

# ---- a cursor's state, a transaction's statements (issue 44, item 2) ----------
# A SCROLL cursor over a materialised CTE (work_mem 4GB, bob's own: no
# spill to disk) keeps every row it passes; 60 MOVE 20000 of 1 kB rows
# would keep 1.2 GB, each MOVE adding ~25 MB, under its 64 MB.  The
# cursor's portal task holds what its fetches kept, under the statement
# limit: the MOVE that takes it past 64 MB is stopped.  (Before issue
# 44 all 60 ran, each MOVE's task holding only what it added.)
cur_args() { # the transaction: DECLARE, 60 MOVEs, COMMIT
	set -- -c "set work_mem = '4GB'" -c "begin" \
		-c "declare c scroll cursor for with m as materialized (select g, repeat('x', 1000) as s from (select generate_series(1, 2000000) g) t) select * from m"
	for i in $(seq 1 60); do set -- "$@" -c "move 20000 in c"; done
	set -- "$@" -c "fetch backward 1 from c" -c "commit" -c "select 'next ' || 42"
	bob "$@"
}
out=$(cur_args)
if [ "$(printf '%s\n' "$out" | grep -c '^ERROR:  53200: memlimits: statement memory limit reached')" = 1 ] &&
	printf '%s\n' "$out" | grep -q "^DETAIL:  memlimits.statement_limit is 64.0 MB; the cursor's fetches (what the cursor kept) held about" &&
	printf '%s\n' "$out" | grep -q '^next 42$'; then
	ok "bob (statement_limit 64MB): a SCROLL cursor over a materialised CTE moved 60 x 20000 rows is stopped with 53200 ($(printf '%s\n' "$out" | grep '^DETAIL' | cut -c 10-90)...)"
else
	notok "bob's SCROLL cursor moved 60 x 20000 rows is not stopped"
	printf '%s\n' "$out" | grep -v '25P02\|^LOCATION' | head -n 20 | sed 's/^/# /'
fi
# memlimits.transaction_limit: superuser only, per role and per
# database; carol's transaction keeps 10 MB per statement (a local
# setting's value, freed at its end), 8 of them: each statement is far
# under the 256 MB statement limit, the transaction over its 64 MB.  The
# same transaction as postgres (no transaction limit) commits; so does
# carol's with 1 MB values.  In a savepoint, the statements after ROLLBACK
# TO fail too (the transaction stays over its limit until it ends).
carol() { "$bindir/psql" -X -h "$tmp/sock" -p "$port" -U carol -d postgres \
	-v VERBOSITY=verbose -qAt "$@" 2>&1; }
q -c "create role carol login" -c "alter role carol set memlimits.transaction_limit = '64MB'" \
	-c "create database ml_txdb" -c "alter database ml_txdb set memlimits.transaction_limit = '32MB'" >/dev/null
txn() { # txn SIZE: a transaction of 8 statements each keeping SIZE bytes
	set -- "$1" -c "begin"
	for i in 1 2 3 4 5 6 7 8; do
		set -- "$@" -c "select length(set_config('ml.v$i', repeat('x', $1), true))"
	done
	shift
	printf '%s\0' "$@" -c "commit" -c "select 'next ' || 42"
}
run_txn() { who=$1; shift; txn "$@" | xargs -0 "$bindir/psql" -X -h "$tmp/sock" -p "$port" -U "$who" -d postgres -v VERBOSITY=verbose -qAt 2>&1; }
out=$(carol -c "show memlimits.transaction_limit" -c "set memlimits.transaction_limit = '1GB'")
if printf '%s\n' "$out" | grep -q '^64MB$' &&
	printf '%s\n' "$out" | grep -q 'permission denied to set parameter "memlimits.transaction_limit"' &&
	[ "$(q -d ml_txdb -c "show memlimits.transaction_limit")" = 32MB ]; then
	ok "memlimits.transaction_limit: carol cannot SET it; ALTER ROLE gives her 64MB, ALTER DATABASE ml_txdb 32MB"
else
	notok "memlimits.transaction_limit's settings"
	printf '%s\n' "$out" | sed 's/^/# /'
fi
out=$(run_txn carol 10000000)
if [ "$(printf '%s\n' "$out" | grep -c '^ERROR:  53200: memlimits: transaction memory limit reached')" = 1 ] &&
	printf '%s\n' "$out" | grep -q "^DETAIL:  memlimits.transaction_limit is 64.0 MB; the transaction's statements held about" &&
	[ "$(printf '%s\n' "$out" | grep -c '^10000000$')" -lt 8 ] &&
	printf '%s\n' "$out" | grep -q '^next 42$'; then
	ok "carol (transaction_limit 64MB): 8 statements keeping 10 MB each: 53200 after $(printf '%s\n' "$out" | grep -c '^10000000$'), the session goes on"
else
	notok "carol's transaction over 64 MB is not stopped"
	printf '%s\n' "$out" | grep -v '25P02\|^LOCATION' | head -n 20 | sed 's/^/# /'
fi
out=$(run_txn postgres 10000000)
small=$(run_txn carol 1000000)
if [ "$(printf '%s\n' "$out" | grep -c '^10000000$')" = 8 ] && ! printf '%s\n' "$out" | grep -q ERROR &&
	[ "$(printf '%s\n' "$small" | grep -c '^1000000$')" = 8 ] && ! printf '%s\n' "$small" | grep -q ERROR; then
	ok "the same transaction without a transaction limit commits, and carol's with 1 MB values"
else
	notok "a transaction under its limits failed"
	printf '%s\n' "$out" "$small" | grep -v '^LOCATION' | head -n 20 | sed 's/^/# /'
fi
out=$(carol -c "begin" -c "savepoint s" -c "select length(set_config('ml.v1', repeat('x', 30000000), true))" \
	-c "select length(set_config('ml.v2', repeat('x', 30000000), true))" \
	-c "select length(set_config('ml.v3', repeat('x', 30000000), true))" \
	-c "rollback to savepoint s" -c "select 'after ' || 1" -c "rollback" -c "select 'next ' || 42")
if [ "$(printf '%s\n' "$out" | grep -c '^ERROR:  53200: memlimits: transaction memory limit reached')" = 2 ] &&
	! printf '%s\n' "$out" | grep -q '^after 1$' && printf '%s\n' "$out" | grep -q '^next 42$'; then
	ok "carol's transaction over its limit in a savepoint: after ROLLBACK TO its statements still fail (53200), ROLLBACK ends it"
else
	notok "carol's transaction over its limit in a savepoint"
	printf '%s\n' "$out" | grep -v '^LOCATION' | head -n 20 | sed 's/^/# /'
fi

# ---- code that reports its own malloc's failure -----------------------------------
# PostgreSQL 15's regex engine calls malloc itself and turns its failure
# into "invalid regular expression: out of memory" (2201B): memlimits
# refused it, so the error is the limit's, and the DETAIL quotes it.
out=$(q -c "set memlimits.statement_limit = '8MB'" -c "select 'x' ~ repeat('(x|y)', 20000)" \
	-c "select 'next ' || 42")
if printf '%s\n' "$out" | grep -q '^ERROR:  53200: memlimits: statement memory limit reached' &&
	printf '%s\n' "$out" | grep -q '^DETAIL:.*memlimits.statement_limit is 8192.0 kB.*The refused request.*invalid regular expression: out of memory (SQLSTATE 2201B)' &&
	printf '%s\n' "$out" | grep -q '^next 42$'; then
	ok "a regex over an 8MB limit: 53200 memlimits, the DETAIL quoting the regex engine's 2201B"
else
	notok "a regex over an 8MB limit is not memlimits' 53200"
	printf '%s\n' "$out" | head -n 20 | sed 's/^/# /'
fi

# ---- tasks of statements that end in an ExecutorEnd -------------------------------
# An ExecutorEnd that fails (file_fdw's program exits 3 when it is closed)
# inside a subtransaction, a later statement after ROLLBACK TO; and a SQL
# function's query that the outer query's ExecutorEnd ends (a set-
# returning SQL function stopped by LIMIT).  Each statement's task is
# freed: memlimits_tasks_open is 1, the reading statement's.
q -c "create function ml_srf() returns setof int language sql as 'select g from generate_series(1, 10) g'" >/dev/null
if [ "$(q -c "select count(*) from pg_available_extensions where name = 'file_fdw'")" != 1 ]; then
	skip "an ExecutorEnd that fails inside a subtransaction: no file_fdw (Debian's postgresql-15 has it)"
else
	q -c "create extension file_fdw" -c "create server ml_files foreign data wrapper file_fdw" \
		-c "create foreign table ml_fail (x int) server ml_files options (program 'echo 1; exit 3')" >/dev/null
	out=$(q -c "begin" -c "savepoint s" -c "select * from ml_fail" -c "rollback to savepoint s" \
		-c "select 'then ' || 1" -c "commit" -c "select memlimits_metrics()")
	if printf '%s\n' "$out" | grep -q '^ERROR:  38000: program "echo 1; exit 3" failed' &&
		printf '%s\n' "$out" | grep -q '^then 1$' &&
		printf '%s\n' "$out" | grep -q '^memlimits_tasks_open{pid="[0-9]*"} 1$'; then
		ok "an ExecutorEnd that fails inside a subtransaction leaves no task open"
	else
		notok "an ExecutorEnd that fails inside a subtransaction leaves a task open"
		printf '%s\n' "$out" | grep -v '^# ' | sed 's/^/# /'
	fi
fi
out=$(q -c "select ml_srf() limit 1" -c "select memlimits_metrics()")
if printf '%s\n' "$out" | grep -q '^1$' &&
	printf '%s\n' "$out" | grep -q '^memlimits_tasks_open{pid="[0-9]*"} 1$'; then
	ok "a SQL function's query ended by the outer query's ExecutorEnd leaves no task open"
else
	notok "a SQL function's query ended by the outer ExecutorEnd leaves a task open"
	printf '%s\n' "$out" | grep -v '^# ' | sed 's/^/# /'
fi

# ---- the cluster limit ----------------------------------------------------------
# Restarted with memlimits.cluster_limit = '1GB' (a server start setting)
# and no statement limit.  Three sessions each hold ~180 MB in one
# statement (a PL/pgSQL string, kept while the function waits for a row in
# ml_flag); once the three show in memlimits_activity(), a fourth grows
# without bound (array_agg).  Over 1 GB in all, the statement holding the
# most in the cluster -- the fourth's -- is stopped; the row in ml_flag
# then lets the three finish.  Every wait is a bounded poll on a state,
# never a verdict on time.  Probabilities: 180 MB held is ~2400 samples
# (the estimate within a few percent); the fourth holds over 400 MB when
# the total passes 1 GB, the holders 180 MB each: the most is the fourth's.
hold_mb=180
cluster_case() {
	as sh -c "cat >>'$data/postgresql.conf'" <<CONF
memlimits.cluster_limit = '1GB'
memlimits.statement_limit = 0
CONF
	as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
	started=
	if start "$tmp/lib/libmemlimits.so"; then
		started=1
	else
		notok "the server does not start with memlimits.cluster_limit = '1GB'"
		diag "$tmp/start.out"
		return
	fi
	if [ "$(q -c 'show memlimits.cluster_limit')" = 1GB ]; then
		ok "restarted with memlimits.cluster_limit = '1GB'"
	else
		notok "SHOW memlimits.cluster_limit: $(q -c 'show memlimits.cluster_limit')"
	fi
	q -c "create table ml_flag (x int)" \
		-c "create function ml_hold(mb int) returns int language plpgsql as \$\$
declare s text := repeat('x', mb * 1048576);
begin
	perform set_config('application_name', 'ml_holding', false);
	for i in 1..6000 loop
		exit when exists (select from ml_flag);
		perform pg_sleep(0.05);
	end loop;
	return length(s);
end \$\$" >/dev/null
	for i in 1 2 3; do
		q -c "select ml_hold($hold_mb)" >"$tmp/hold$i.out" &
		eval "hold$i=\$!"
		# Each holder is seen holding before the next one starts, past
		# the copy on assignment that doubles it for a moment: its
		# body has begun (application_name, set after the DECLARE's
		# copy and the free of repeat's result), and its published
		# heap and estimate are back under 200 MB.  (The estimate alone
		# is also 180 MB before the copy: a holder slowed down by a
		# loaded machine then made its copy while the next ones made
		# theirs, three at 370 MB over the 1 GB limit, and one was
		# rightly stopped: the flake of issue 35's first CI runs.)
		tries=0
		until [ "$(q -c "select count(*) from memlimits_activity() a join pg_stat_activity s using (pid) where s.application_name = 'ml_holding' and a.heap_bytes < 200 * 1048576 and a.statement_held_bytes between 160 * 1048576 and 200 * 1048576")" = "$i" ]; do
			tries=$((tries + 1))
			[ $tries -gt 600 ] && break
			sleep 0.1 # not ordering: the poll of a bounded wait
		done
	done
	rows=$(q -c "select statement_held_bytes / 1048576 from memlimits_activity() where statement_held_bytes > 100 * 1048576 order by 1")
	if [ "$(printf '%s\n' "$rows" | grep -c .)" = 3 ] &&
		[ "$(printf '%s\n' "$rows" | awk '$1 >= 160 && $1 <= 200' | grep -c .)" = 3 ]; then
		ok "memlimits_activity() shows the three holders while they wait: $(echo $rows | tr ' ' ',') MB held"
	else
		notok "memlimits_activity() does not show the three holders at ~$hold_mb MB"
		q -c "select * from memlimits_activity()" | sed 's/^/# /'
	fi
	q -c "select * from memlimits_activity() order by 3 desc" >"$tmp/activity.out"
	out=$(q -c "select array_agg(repeat('x', 1000)) from generate_series(1, 10000000)" \
		-c "select 'next ' || 42")
	if printf '%s\n' "$out" | grep -q '^ERROR:  53200: memlimits: cluster memory limit reached' &&
		printf '%s\n' "$out" | grep -q '^DETAIL:.*memlimits.cluster_limit is 1024.0 MB' &&
		printf '%s\n' "$out" | grep -q '^next 42$'; then
		ok "the fourth, growing without bound, is stopped: $(printf '%s\n' "$out" | grep '^DETAIL' | cut -c 10-)"
	else
		notok "the fourth session was not stopped by the cluster limit"
		printf '%s\n' "$out" | head -n 20 | sed 's/^/# /'
	fi
	# The metrics while the three still hold: every backend's heap
	# (the three holders', the reader's), the budget, the one stop
	# (counters start again with the server).
	q -c "select memlimits_metrics()" >"$tmp/metrics2"
	big_heaps=$(grep -c '^memlimits_heap_bytes{pid="[0-9]*"} [0-9]\{9,\}$' "$tmp/metrics2")
	usage=$(metric "$tmp/metrics2" memlimits_shared_usage_bytes)
	if [ "$big_heaps" -ge 3 ] &&
		[ "$(metric "$tmp/metrics2" memlimits_shared_limit_bytes)" = 1073741824 ] &&
		[ "$(metric "$tmp/metrics2" memlimits_global_limit_bytes)" = +Inf ] &&
		[ "${usage:-0}" -gt $((3 * hold_mb * 1048576)) ] &&
		[ "$(metric "$tmp/metrics2" 'memlimits_tasks_interrupted_total{reason="global_limit"}')" = 1 ] &&
		[ "$(metric "$tmp/metrics2" 'memlimits_tasks_interrupted_total{reason="held_limit"}')" = 0 ]; then
		ok "memlimits_metrics() with the cluster limit: $(grep -c '^memlimits_heap_bytes{' "$tmp/metrics2") backends' heaps ($big_heaps over 100 MB), limit 1 GiB, usage $((usage / 1048576)) MiB, 1 stopped by global_limit"
	else
		notok "memlimits_metrics() with the cluster limit"
		sed 's/^/# /' "$tmp/metrics2"
	fi
	prom_ok "$tmp/metrics2" "memlimits_metrics() with the cluster limit"
	# Other processes' rows: only for pg_read_all_stats (alice is not).
	alice_rows() { "$bindir/psql" -X -h "$tmp/sock" -p "$port" -U alice -d postgres -qAt \
		-c "select count(*), bool_and(pid = pg_backend_pid()) from memlimits_activity()" \
		-c "select memlimits_metrics()" 2>&1; }
	out=$(alice_rows)
	q -c "grant pg_read_all_stats to alice" >/dev/null
	out2=$(alice_rows)
	q -c "revoke pg_read_all_stats from alice" >/dev/null
	if [ "$(printf '%s\n' "$out" | head -n 1)" = "1|t" ] &&
		[ "$(printf '%s\n' "$out" | grep -c '^memlimits_heap_bytes{')" = 1 ] &&
		[ "$(printf '%s\n' "$out2" | head -n 1 | cut -d'|' -f1)" -gt 4 ] &&
		[ "$(printf '%s\n' "$out2" | grep -c '^memlimits_heap_bytes{')" -gt 4 ]; then
		ok "memlimits_activity() and memlimits_metrics(): other processes' rows only for pg_read_all_stats ($(printf '%s\n' "$out2" | head -n 1 | cut -d'|' -f1) rows with it, 1 without)"
	else
		notok "other processes' rows and pg_read_all_stats"
		printf '%s\n' "$out" "$out2" | grep -v '^# ' | sed 's/^/# /'
	fi
	# Work at COMMIT is seen by the cluster limit too: the deferred
	# trigger building 1 GB (ml_def, above), with no statement limit,
	# holds the most when the total passes 1 GB (its string doubled to
	# 512 MB while the three hold ~540 MB): it is the one stopped, and
	# the three still finish below.
	out=$(q -c "insert into ml_def values (1)" -c "select 'next ' || 42")
	if printf '%s\n' "$out" | grep -q '^ERROR:  53200: memlimits: cluster memory limit reached' &&
		! printf '%s\n' "$out" | grep -q 'built [0-9]\{9\}' &&
		printf '%s\n' "$out" | grep -q '^next 42$'; then
		ok "a deferred trigger building 1 GB at COMMIT is stopped by the cluster limit"
	else
		notok "a deferred trigger building 1 GB at COMMIT is not stopped by the cluster limit"
		printf '%s\n' "$out" | head -n 20 | sed 's/^/# /'
	fi
	q -c "insert into ml_flag values (1)" >/dev/null
	good=0
	for i in 1 2 3; do
		eval "wait \$hold$i"
		if [ "$(cat "$tmp/hold$i.out")" = $((hold_mb * 1048576)) ]; then
			good=$((good + 1))
		else
			sed "s/^/# holder $i: /" "$tmp/hold$i.out"
		fi
	done
	if [ $good = 3 ]; then
		ok "the three holders finish, each with its $hold_mb MB string"
	else
		notok "only $good of the three holders finished"
	fi
}
if ! ${NM:-nm} -D --defined-only "$LIB" | grep -q ' ml_shared_join'; then
	skip "memlimits.cluster_limit: this libmemlimits has no shared budgets (ml_shared_join) yet"
else
	cluster_case
fi

# ---- the stop reaches a statement that waits (issue 35) -------------------------
# Restarted with memlimits.cluster_limit = '450MB', the issue's case at its
# sizes: A builds a 20-million-element array (its contexts ~388 MB) and
# then waits; B, a DISTINCT over 2 million md5s under work_mem = '1GB'
# (~200 MB), takes the total over.  A holds the most: its statement is
# stopped with 53200 while it waits, B finishes.  Four waits: pg_sleep, a
# row lock held by a third session, a cursor whose client sends nothing
# (the session, idle in its transaction, can only be ended: one FATAL
# with the same 53200 message), and a statement blocked writing rows to
# a client that reads nothing (ended too: the FATAL in the log).  Every wait is a poll on a state
# with a generous backstop, never a verdict on time: the time from B's
# start to A's stop is measured and printed.  A sampler reads the total
# (the members' published heaps) all along: its maximum over the limit is
# bounded by the publication lateness, M x (K + 32 KiB) with K = 1 MiB
# (docs/shared.md, "Bounds"), plus what B allocates while A's memory goes
# back, which the test prints.  Probabilities: A holds ~390 MB, B at most
# ~200 MB when the choice is made: A's estimate (~4900 samples) is the
# larger with certainty.
wake_case() {
	as sh -c "cat >>'$data/postgresql.conf'" <<CONF
memlimits.cluster_limit = '450MB'
log_line_prefix = '%m [%p] '
CONF
	as "$bindir/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1
	started=
	# 0.3's object was /dev/shm/memlimits.UID.pg.SYSID.DEV.INO.
	sysid=$("$bindir/pg_controldata" -D "$data" 2>/dev/null |
		sed -n 's/^Database system identifier: *//p')
	shm() { ls /dev/shm/ 2>/dev/null | grep "^memlimits\..*\.pg\.$sysid\."; }
	if [ -z "$sysid" ]; then
		notok "pg_controldata gives no system identifier"
	elif shm >/dev/null; then
		notok "a budget object is left in /dev/shm after a clean stop: $(shm | tr '\n' ' ')"
	else
		ok "no budget object in /dev/shm after a clean stop"
	fi
	if start "$tmp/lib/libmemlimits.so"; then
		started=1
	else
		notok "the server does not start with memlimits.cluster_limit = '450MB'"
		diag "$tmp/start.out"
		return
	fi
	if [ -z "$sysid" ] || shm >/dev/null; then
		notok "the running cluster has a budget object in /dev/shm: $(shm)"
	else
		ok "the running cluster's budget has no name: nothing in /dev/shm"
	fi
	q -c "create table ml_lock (x int)" -c "insert into ml_lock values (1)" >/dev/null
	limit=$((450 * 1048576))
	a_sql="set memlimits.statement_limit = 0"
	arr="(select array_agg(g) a from generate_series(1, 20000000) g) s"
	b_sql="set work_mem = '1GB'; select count(*) from (select distinct md5(g::text) from generate_series(1, 2000000) g) s"
	now() { date +%s.%N; }
	# fatal_time PID [LEVEL]: when the server logged PID's FATAL (or
	# LEVEL) (log_line_prefix's %m), else now.
	fatal_time() {
		t=$(sed -n "s/^\(.*\) UTC \[$1\] ${2:-FATAL}: .*/\1/p" "$log" | head -n 1)
		if [ -n "$t" ] && date -d "$t UTC" +%s.%N 2>/dev/null; then :; else now; fi
	}
	# wait_for WHAT SQL: polls until SQL says t (backstop 300 s).
	wait_for() {
		tries=0
		until [ "$(q -c "$2")" = t ]; do
			tries=$((tries + 1))
			if [ $tries -gt 3000 ]; then
				notok "$1: not seen in 300 s"
				return 1
			fi
			sleep 0.1 # not ordering: the poll of a bounded wait
		done
	}
	todo=
	held_sql="select exists (select from memlimits_activity() where statement_held_bytes > 300 * 1048576)"
	sampler_start() {
		printf '%s\n' "select coalesce(sum(heap_bytes), 0) || ' ' || count(*) from memlimits_activity()" '\watch 0.02' |
			"$bindir/psql" -X -h "$tmp/sock" -p "$port" -U postgres -d postgres -qAt >"$tmp/sampler.out" 2>&1 &
		sampler=$!
	}
	sampler_stop() {
		kill "$sampler" 2>/dev/null
		wait "$sampler" 2>/dev/null
		max=$(awk '$1 ~ /^[0-9]+$/ && $1 > m { m = $1; k = $2 } END { print m + 0, k + 0 }' "$tmp/sampler.out")
		over=$(( ${max% *} - limit ))
		members=${max#* }
		lateness=$((members * (1048576 + 32768)))
	}
	# check_case NAME AFILE AEND PATTERN: A stopped with 53200 (PATTERN),
	# B finished, the total's maximum.
	check_case() {
		b_out=$(cat "$tmp/b.out")
		took=$(echo "$3 $b_start" | awk '{ printf "%.2f", $1 - $2 }')
		if grep -q "$4" "$2" && grep -q '^DETAIL:.*memlimits.cluster_limit is 450.0 MB' "$2" &&
			[ "$(printf '%s\n' "$b_out" | tail -n 1)" = 2000000 ]; then
			ok "$1: A stopped with 53200 ${took} s after B started; B finished ($(grep '^DETAIL' "$2" | head -n 1 | cut -c 10-))"
		else
			notok "$1: A not stopped with 53200, or B did not finish$todo"
			sed 's/^/# A: /' "$2"
			printf '%s\n' "$b_out" | sed 's/^/# B: /'
		fi
		echo "# $1: B started at $b_start, A stopped at $3 (${took} s)"
		if [ "$over" -le "$lateness" ]; then
			ok "$1: the total seen never over the limit by more than the lateness: max $(( (over + limit) / 1048576 )) MiB, $((over / 1024)) KiB over ($members members: $((lateness / 1024)) KiB)"
		else
			notok "$1: the total went $((over / 1048576)) MiB over the limit ($members members: lateness $((lateness / 1024)) KiB)$todo"
		fi
	}

	# b_stops PID [LEVEL]: B run with the sampler on; a_end: when A's
	# backend PID logged its FATAL (or LEVEL).
	b_stops() {
		sampler_start
		b_start=$(now)
		q -c "$b_sql" >"$tmp/b.out"
		a_end=$(fatal_time "$1" "${2:-FATAL}")
		sampler_stop
	}
	# a_fifo: A's session started, reading its statements from fd 7 (a
	# fifo), its output in $tmp/a.out.
	a_fifo() {
		rm -f "$tmp/a.fifo"
		mkfifo "$tmp/a.fifo"
		(q <"$tmp/a.fifo" >"$tmp/a.out"; now >"$tmp/a.end") &
		a=$!
		exec 7>"$tmp/a.fifo"
	}

	# ---- A in pg_sleep
	rm -f "$tmp/a.end"
	(q -c "$a_sql" -c "select pg_sleep(300), cardinality(a) from $arr" >"$tmp/a.out"; now >"$tmp/a.end") &
	a=$!
	if wait_for "A holding 300 MB in pg_sleep" "$held_sql"; then
		apid=$(q -c "select pid from pg_stat_activity where query like '%pg_sleep(300)%' and pid <> pg_backend_pid()")
		# Within 10 % of its memory contexts (pg_log_backend_memory_contexts).
		held=$(q -c "select statement_held_bytes from memlimits_activity() where pid = $apid")
		q -c "select pg_log_backend_memory_contexts($apid)" >/dev/null
		tries=0
		until grep -q "\[$apid\] LOG:  Grand total: " "$log" || [ $tries -gt 600 ]; do
			tries=$((tries + 1)); sleep 0.1 # not ordering: the poll of a bounded wait
		done
		total=$(sed -n "s/.*\[$apid\] LOG:  Grand total: \([0-9]*\) bytes.*/\1/p" "$log" | tail -n 1)
		if [ -n "$total" ] && [ -n "$held" ] &&
			[ $((held * 10)) -ge $((total * 9)) ] && [ $((held * 10)) -le $((total * 11)) ]; then
			ok "memlimits_activity() during A's sleep: held $((held / 1048576)) MiB, its contexts $((total / 1048576)) MiB (within 10 %)"
		else
			notok "memlimits_activity() during A's sleep: held '$held', contexts '$total'"
		fi
		sampler_start
		b_start=$(now)
		q -c "$b_sql" >"$tmp/b.out"
		wait "$a"
		sampler_stop
		check_case "A in pg_sleep" "$tmp/a.out" "$(cat "$tmp/a.end")" '^ERROR:  53200: memlimits: cluster memory limit reached'
	else
		kill "$a" 2>/dev/null; wait "$a"
	fi

	# ---- A waiting on a row lock
	q -c "begin" -c "select x from ml_lock for update" -c "select pg_sleep(300)" >"$tmp/l.out" 2>&1 &
	l=$!
	wait_for "the lock holder" "select exists (select from pg_stat_activity where query = 'select pg_sleep(300)' and state = 'active')"
	(q -c "$a_sql" -c "select cardinality(a), (select x from ml_lock for update) from $arr" >"$tmp/a.out"; now >"$tmp/a.end") &
	a=$!
	if wait_for "A holding 300 MB behind a row lock" "select exists (select from pg_stat_activity where wait_event_type = 'Lock' and query like '%ml_lock for update) from%') and ($held_sql)"; then
		sampler_start
		b_start=$(now)
		q -c "$b_sql" >"$tmp/b.out"
		wait "$a"
		sampler_stop
		check_case "A waiting on a row lock" "$tmp/a.out" "$(cat "$tmp/a.end")" '^ERROR:  53200: memlimits: cluster memory limit reached'
	fi
	q -c "select pg_cancel_backend(pid) from pg_stat_activity where query = 'select pg_sleep(300)'" >/dev/null
	kill "$a" 2>/dev/null
	wait "$l" "$a"

	# ---- A inside a cursor its client stops reading
	a_fifo
	printf '%s\n' "$a_sql;" "begin;" "declare c cursor for select cardinality(a), g2 from $arr, generate_series(1, 3) g2;" \
		"fetch 1 from c;" >&7
	if wait_for "A's cursor holding 300 MB, its client silent" "select exists (select from pg_stat_activity where state = 'idle in transaction' and query like 'fetch 1 from c%') and ($held_sql)"; then
		apid=$(q -c "select pid from pg_stat_activity where state = 'idle in transaction' and query like 'fetch 1 from c%'")
		# A's end: its backend's FATAL in the log (the client learns it
		# when it next speaks).
		b_stops "$apid"
		gone=$(q -c "select count(*) from pg_stat_activity where query like 'fetch 1 from c%'")
		printf '%s\n' "fetch 1 from c;" >&7
		exec 7>&-
		wait "$a"
		check_case "A in a cursor its client stops reading" "$tmp/a.out" "$a_end" 'FATAL:  53200: memlimits: cluster memory limit reached'
		if [ "$gone" = 0 ] && grep -q '^HINT:  The session was idle in a transaction whose open cursor held the memory' "$tmp/a.out"; then
			ok "A in a cursor its client stops reading: its session ended, as idle_in_transaction_session_timeout ends one, with the HINT"
		else
			notok "A in a cursor its client stops reading: its session not ended ($gone left) or no HINT"
		fi
	else
		exec 7>&-
		wait "$a"
	fi

	# ---- A's cursor while its session runs another statement
	# The cursor (its portal task) holds the most; the session sleeps in
	# another statement: that statement ends with the 53200 error, its
	# HINT naming the cursor, and the transaction's abort frees it.
	a_fifo
	printf '%s\n' "$a_sql;" "begin;" "declare c cursor for select cardinality(a), g2 from $arr, generate_series(1, 3) g2;" \
		"fetch 1 from c;" "select pg_sleep(301);" >&7
	if wait_for "A's cursor holding 300 MB, its session in pg_sleep" "select exists (select from pg_stat_activity where state = 'active' and query like 'select pg_sleep(301)%') and ($held_sql)"; then
		apid=$(q -c "select pid from pg_stat_activity where state = 'active' and query like 'select pg_sleep(301)%'")
		b_stops "$apid" ERROR
		exec 7>&-
		wait "$a"
		check_case "A's cursor while its session sleeps" "$tmp/a.out" "$a_end" '^ERROR:  53200: memlimits: cluster memory limit reached'
		if grep -q '^HINT:  The memory was held by an open cursor of this transaction' "$tmp/a.out"; then
			ok "A's cursor while its session sleeps: the sleeping statement's error names the cursor (HINT)"
		else
			notok "A's cursor while its session sleeps: no HINT naming the cursor"
		fi
	else
		exec 7>&-
		wait "$a"
	fi

	# ---- A blocked writing to a client that does not read
	# A client of our own (the protocol's start-up and one Query, in
	# Python) asks for A's array and then 100 million rows, and reads
	# nothing: A's backend blocks in ClientWrite, where PostgreSQL takes
	# no cancel (ProcessClientWriteInterrupt: only a termination).  The
	# session ends with our FATAL in the log (the client, whose socket is
	# full, is sent nothing: PostgreSQL's own rule there).
	if ! command -v "${PYTHON3:-python3}" >/dev/null 2>&1; then
		skip "A blocked writing to its client: no python3 for the client that stops reading"
	else
		cat >"$tmp/stall.py" <<'PY'
import socket, struct, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
p = b'user\0postgres\0database\0postgres\0\0'
s.sendall(struct.pack('!ii', 8 + len(p), 196608) + p)
buf = b''
while True:  # the start-up's messages, up to ReadyForQuery
    d = s.recv(65536)
    if not d:
        sys.exit('closed during start-up')
    buf += d
    while len(buf) >= 5:
        n = struct.unpack('!i', buf[1:5])[0]
        if len(buf) < 1 + n:
            break
        kind, buf = buf[:1], buf[1 + n:]
        if kind == b'E':
            sys.exit('refused at start-up')
        if kind == b'Z':
            break
    else:
        continue
    if kind == b'Z':
        break
q = sys.argv[2].encode() + b'\0'
s.sendall(b'Q' + struct.pack('!i', 4 + len(q)) + q)
sys.stdin.read()  # reads nothing until the test says
n = 0
try:
    while True:
        d = s.recv(1 << 20)
        if not d:
            break
        n += len(d)
except OSError:
    pass
print('closed after %d bytes' % n)
PY
		rm -f "$tmp/w.fifo"
		mkfifo "$tmp/w.fifo"
		"${PYTHON3:-python3}" "$tmp/stall.py" "$tmp/sock/.s.PGSQL.$port" \
			"$a_sql; select cardinality(a), g2 from $arr, generate_series(1, 100000000) g2" <"$tmp/w.fifo" >"$tmp/w.out" 2>&1 &
		a=$!
		exec 7>"$tmp/w.fifo"
		if wait_for "A holding 300 MB, blocked writing to its client" "select exists (select from pg_stat_activity where wait_event = 'ClientWrite' and query like '%generate_series(1, 100000000)%') and ($held_sql)"; then
			apid=$(q -c "select pid from pg_stat_activity where wait_event = 'ClientWrite' and query like '%generate_series(1, 100000000)%'")
			b_stops "$apid"
			gone=$(q -c "select count(*) from pg_stat_activity where pid = $apid")
			grep "\[$apid\] \(FATAL\|DETAIL\|HINT\)" "$log" | sed "s/^.*\[$apid\] //" >"$tmp/wlog.out"
			check_case "A blocked writing to its client" "$tmp/wlog.out" "$a_end" '^FATAL:  memlimits: cluster memory limit reached'
			if [ "$gone" = 0 ] && grep -q '^HINT:  The session was blocked writing to a client that did not read' "$tmp/wlog.out"; then
				ok "A blocked writing to its client: its session ended, as pg_terminate_backend ends one, with the HINT in the log"
			else
				notok "A blocked writing to its client: its session not ended ($gone left) or no HINT"
				sed 's/^/# /' "$tmp/wlog.out"
			fi
		fi
		exec 7>&-
		wait "$a"
		sed 's/^/# the client: /' "$tmp/w.out"
	fi
	grep -c 'memlimits: cluster memory limit reached' "$log" | sed 's/^/# stops in the log: /'
}
if ! ${NM:-nm} -D --defined-only "$LIB" | grep -q ' ml_shared_create'; then
	skip "the stop of a waiting statement: this libmemlimits has no ml_shared_create"
else
	wake_case
fi

# ---- a parallel worker: its share is limited on its own -------------------------
# A hash join under Gather, without parallel hash: each of two workers
# (the leader does not take part) builds its own hash table of the whole
# inner table, 2 million rows (~100 MB) in its own memory, over a 16 MB
# statement limit set in the leader's session, which the workers take
# with its settings.  The error is the worker's ("CONTEXT: parallel
# worker"), passed to the client by the leader.
q -c "create table ml_par as select g from generate_series(1, 2000000) g" \
	-c "analyze ml_par" >/dev/null
par="set max_parallel_workers_per_gather = 2; set parallel_setup_cost = 0;
set parallel_tuple_cost = 0; set min_parallel_table_scan_size = 0;
set parallel_leader_participation = off; set work_mem = '1GB';
set enable_parallel_hash = off; set enable_mergejoin = off;
set enable_nestloop = off; set memlimits.statement_limit = '16MB';"
join="select count(*) from ml_par a join ml_par b using (g)"
plan=$(q -c "$par" -c "explain $join")
out=$(q -c "$par" -c "$join" -c "select 'next ' || 42")
if printf '%s\n' "$plan" | grep -q 'Workers Planned: 2' &&
	printf '%s\n' "$plan" | grep -q 'Hash Join' &&
	! printf '%s\n' "$plan" | grep -q 'Parallel Hash' &&
	printf '%s\n' "$out" | grep -q '^ERROR:  53200: memlimits: statement memory limit reached' &&
	printf '%s\n' "$out" | grep -q '^CONTEXT:  parallel worker' &&
	printf '%s\n' "$out" | grep -q '^next 42$'; then
	ok "a parallel worker's hash table is stopped by statement_limit 16MB in the worker: 53200 reaches the client ($(printf '%s\n' "$out" | grep '^DETAIL' | cut -c 10-))"
else
	notok "the parallel worker's share was not stopped on its own"
	printf '%s\n' "$plan" "$out" | head -n 30 | sed 's/^/# /'
fi

# ---- a parallel hash join's dynamic shared memory (issue 44, item 3) ----------
# A parallel hash join builds its table in DSM (/dev/shm segments that
# the leader and its workers map), which no heap counts: ml_pj, under
# ALTER ROLE ... SET memlimits.statement_limit = '64MB', with its own
# work_mem = '1GB' and hash_mem_multiplier = 4, joins 2 million rows of
# 100 bytes with themselves.  Before issue 44: a Parallel Hash plan, the
# join completed, the leader mapping 396 MB of /dev/shm.  Now a role that
# is not a superuser is planned without parallel hash under a statement
# limit: each worker builds its own hash table in its heap, and is
# stopped at 64 MB (53200 from the worker); the leader's /dev/shm
# mappings (sampled every 20 ms from /proc/PID/maps, each segment
# counted once) stay under the limit.  A superuser's plan keeps parallel
# hash (docs/postgresql.md says why).
q -c "create role ml_pj login" -c "alter role ml_pj set memlimits.statement_limit = '64MB'" \
	-c "create table ml_pj (g int, s text)" \
	-c "insert into ml_pj select g, repeat('y', 100) from generate_series(1, 2000000) g" \
	-c "analyze ml_pj" -c "grant select on ml_pj to ml_pj" >/dev/null
pj_set="set max_parallel_workers_per_gather = 2; set parallel_setup_cost = 0;
set parallel_tuple_cost = 0; set min_parallel_table_scan_size = 0;
set work_mem = '1GB'; set hash_mem_multiplier = 4; set enable_mergejoin = off;
set enable_nestloop = off;"
pj_join="select count(*), max(length(a.s || b.s)) from ml_pj a join ml_pj b using (g)"
pj() { "$bindir/psql" -X -h "$tmp/sock" -p "$port" -U ml_pj -d postgres \
	-v VERBOSITY=verbose -qAt "$@" 2>&1; }
plan=$(pj -c "$pj_set" -c "explain $pj_join")
super=$(q -c "$pj_set" -c "explain $pj_join")
: >"$tmp/pj.out"
pj -c "$pj_set" -c "select pg_backend_pid()" -c "select pg_sleep(1)" -c "$pj_join" \
	-c "select 'next ' || 42" >"$tmp/pj.out" 2>&1 &
pj_client=$!
# The backend's pid is printed before its one-second sleep.
i=0
until grep -q '^[0-9][0-9]*$' "$tmp/pj.out" || [ $i -ge 100 ]; do
	sleep 0.1 # not ordering: the poll of a wait for the pid line
	i=$((i + 1))
done
pj_pid=$(grep -m 1 '^[0-9][0-9]*$' "$tmp/pj.out")
shm_peak=$(python3 -c '
import os, sys, time
pid, client = sys.argv[1], int(sys.argv[2])
peak = 0
def alive(p):
    # A zombie (the shell reaps its child only at wait) has ended.
    try:
        return open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
while alive(client):
    try:
        seg = {}
        for line in open("/proc/%s/maps" % pid):
            f = line.split()
            if len(f) >= 6 and f[5].startswith("/dev/shm/PostgreSQL"):
                a, b = f[0].split("-")
                seg[f[5]] = seg.get(f[5], 0) + int(b, 16) - int(a, 16)
        peak = max(peak, sum(seg.values()))
    except OSError:
        pass
    time.sleep(0.02)  # not ordering: the sampling interval of the maps
print(peak >> 20)' "$pj_pid" "$pj_client")
wait "$pj_client"
out=$(cat "$tmp/pj.out")
if ! printf '%s\n' "$plan" | grep -q 'Parallel Hash' &&
	printf '%s\n' "$plan" | grep -q 'Gather' && printf '%s\n' "$plan" | grep -q 'Hash Join' &&
	printf '%s\n' "$out" | grep -q '^ERROR:  53200: memlimits: statement memory limit reached' &&
	printf '%s\n' "$out" | grep -q '^next 42$' &&
	[ -n "$shm_peak" ] && [ "$shm_peak" -lt 64 ]; then
	ok "ml_pj (statement_limit 64MB, work_mem 1GB): a hash join under Gather without parallel hash, 53200 from a worker, /dev/shm mapped by the leader at most $shm_peak MB"
else
	notok "ml_pj's parallel hash join: plan, 53200, or /dev/shm peak ${shm_peak:-?} MB not under 64"
	printf '%s\n' "$plan" "$out" | grep -v '^LOCATION' | head -n 30 | sed 's/^/# /'
fi
if printf '%s\n' "$super" | grep -q 'Parallel Hash'; then
	ok "a superuser's plan of the same join keeps parallel hash"
else
	notok "a superuser's plan lost parallel hash"
	printf '%s\n' "$super" | sed 's/^/# /'
fi

# ---- the systemd drop-in ---------------------------------------------------------
# Debian's postgresql@.service with contrib/postgresql/memlimits.conf as
# its drop-in: systemd-analyze verify finds nothing to say.
unit=/lib/systemd/system/postgresql@.service
if ! command -v systemd-analyze >/dev/null 2>&1; then
	skip "the systemd drop-in: no systemd-analyze"
elif [ ! -f "$unit" ]; then
	skip "the systemd drop-in: no $unit (Debian's postgresql-common)"
else
	mkdir -p "$tmp/units/postgresql@.service.d"
	cp "$unit" "$tmp/units/"
	cp "$top_srcdir/contrib/postgresql/memlimits.conf" "$tmp/units/postgresql@.service.d/"
	if SYSTEMD_UNIT_PATH="$tmp/units:" systemd-analyze verify \
		postgresql@15-main.service >"$tmp/verify.out" 2>&1 &&
		! grep -qi 'memlimits.conf' "$tmp/verify.out"; then
		ok "systemd-analyze verify: postgresql@.service with the drop-in memlimits.conf"
	else
		notok "systemd-analyze verify of the drop-in"
		diag "$tmp/verify.out"
	fi
fi

# ---- the log ---------------------------------------------------------------------
if grep -E 'terminated by signal|terminating any other active server processes|PANIC' "$log" >"$tmp/bad"; then
	notok "the server log shows a crash or a restart"
	diag "$tmp/bad"
else
	ok "the server log shows no backend killed by a signal and no restart"
fi
# The parallel case's other worker is ended by its leader when the first
# fails (SIGTERM, handled: "terminating background worker ... due to
# administrator command"), PostgreSQL's way with any worker's error.
# The waiting cases end their own clients (A's psql killed after the
# row-lock case, the cursor's psql closed): a backend that then writes to
# its gone client ends with "connection to client lost", PostgreSQL's own
# FATAL, not a stop (seen once in CI).  The sessions that the cluster
# limit ends (idle in a transaction, blocked writing) end with its FATAL,
# checked above.
if grep 'FATAL' "$log" | grep -v -e 'terminating background worker "parallel worker" due to administrator command' \
	-e 'FATAL:  connection to client lost$' -e 'FATAL:  memlimits: cluster memory limit reached$' >"$tmp/fatal"; then
	notok "the server log shows a FATAL error"
	head "$tmp/fatal" | sed 's/^/# /'
else
	ok "no backend exited with FATAL (but a parallel worker ended by its leader, a backend whose client the test ended, or a session the cluster limit ended: $(grep -c 'FATAL:  memlimits: cluster memory limit reached$' "$log"), idle in its transaction or blocked writing)"
fi
stop_server

# ---- a cluster the budget's table cannot count ----------------------------------
# max_connections = 70000: MaxBackends plus the auxiliary processes, the
# postmaster and the margin are over a table's 65536 slots; the server
# refuses to start, with one FATAL line saying so.
if ${NM:-nm} -D --defined-only "$LIB" | grep -q ' ml_shared_create'; then
	as sh -c "echo 'max_connections = 70000' >>'$data/postgresql.conf'"
	log=$tmp/size.log
	as sh -c ": >'$log'"
	if start "$tmp/lib/libmemlimits.so"; then
		started=1
		notok "max_connections = 70000 under memlimits.cluster_limit: the server starts"
		stop_server
	elif [ "$(grep -c 'FATAL:.*memlimits:' "$log")" = 1 ] &&
		grep -q 'FATAL:.*memlimits: memlimits.cluster_limit cannot count this cluster: its 70[0-9]* processes' "$log"; then
		ok "max_connections = 70000: refused with one FATAL line: $(grep 'FATAL:' "$log" | sed 's/.*FATAL: *//' | cut -c1-120)..."
	else
		notok "max_connections = 70000: no single FATAL line from memlimits"
		diag "$log"
	fi
else
	skip "the table's size: this libmemlimits has no ml_shared_create"
fi
echo "1..$n"
