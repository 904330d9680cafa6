#!/bin/sh
# make check-pg-regress (issue 35, docs/postgresql.md "PostgreSQL's own
# regression suite"): PostgreSQL's regression suite (what `make
# installcheck` of a PostgreSQL source tree runs: pg_regress, the
# parallel_schedule one test at a time) against a plain server and against
# one with libmemlimits preloaded, the extension loaded and
# memlimits.statement_limit = '1GB', memlimits.cluster_limit = '4GB'.  The
# same tests must pass and fail, and regression.diffs must be the same
# (paths and timestamps aside).  Not in make check: it takes minutes.
#
# The source: Debian's source package of the server's major version
# (postgresql-15), fetched with apt-get source through a private apt
# configuration: a deb-src copy of /etc/apt's deb entries, its lists and
# downloads under the cache directory (nothing of the system's apt state
# is touched, and running it again reuses them).  The installed version
# first; where the archive no longer has it, the newest of that major
# version it has (the summary says which).  PG_REGRESS_SRC=DIR names an
# unpacked source tree instead.  The cache is PG_REGRESS_CACHE, by default
# pg-regress/ in the build directory; the build (configure, then only
# src/test/regress: pg_regress and the regress module) is done once.
#
# Output: TAP.  Skipped (1..0 # SKIP reason) where the server, the
# extension or the source cannot be had; not ok, exit 1, on a difference.
: "${top_builddir:?}" "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
export LC_ALL=C
unset LD_PRELOAD PGHOST PGPORT PGUSER PGDATABASE PGOPTIONS MEMLIMITS_HEAP_LIMIT \
	MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HELD_LIMIT MEMLIMITS_REPORT MEMLIMITS_PROFILE
EXT=$top_builddir/contrib/postgresql/build/memlimits.so
LIB=${MEMLIMITS_LIB:-$top_builddir/lib/.libs/libmemlimits.so}
bindir=${PG_BINDIR:-}
cache=${PG_REGRESS_CACHE:-$top_builddir/pg-regress}
# PG_REGRESS_STATEMENT_LIMIT='2MB' shows that a difference is caught.
slimit=${PG_REGRESS_STATEMENT_LIMIT:-1GB}
t0=$(date +%s)
skip_all() {
	echo "1..0 # SKIP $*"
	exit 0
}
[ -f "$EXT" ] || skip_all "the extension is not built (configure found no pg_config: Debian's postgresql-server-dev-15)"
[ -n "$bindir" ] && [ -x "$bindir/postgres" ] && [ -x "$bindir/initdb" ] &&
	[ -x "$bindir/psql" ] || skip_all "no postgres/initdb/psql in '$bindir'"
if [ "$(id -u)" = 0 ]; then
	id postgres >/dev/null 2>&1 || skip_all "running as root and there is no postgres user to run the server"
	command -v runuser >/dev/null 2>&1 || skip_all "running as root without runuser"
fi
# "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)": 15.20, 15.
server=$("$bindir/postgres" --version | sed -n 's/^postgres (PostgreSQL) \([0-9][0-9.]*\).*/\1/p')
major=${server%%.*}
[ -n "$major" ] || skip_all "cannot tell the server's version from '$("$bindir/postgres" --version)'"
mkdir -p "$cache" || skip_all "cannot create $cache"
cache=$(cd "$cache" && pwd)

# ---- the source ----------------------------------------------------------
# fetch_source: $cache/src, Debian's postgresql-$major unpacked (its
# patches applied), or a reason in $why.
why=
fetch_source() {
	pkg=postgresql-$major
	apt="$cache/apt"
	mkdir -p "$apt/parts" "$apt/lists/partial" "$apt/cache/archives/partial" "$cache/dl"
	# deb-src copies of the deb entries, deb822 and one-line forms.
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] && sed 's/^Types:.*\bdeb\b.*/Types: deb-src/' "$f" >"$apt/parts/${f##*/}"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] && sed -n 's/^deb \(.*\)/deb-src \1/p' "$f" >"$apt/parts/$(echo "$f" | tr / _)"
	done
	A="-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts=$apt/parts
	   -o Dir::State::Lists=$apt/lists -o Dir::Cache=$apt/cache -o APT::Sandbox::User=root"
	[ "$(id -u)" = 0 ] || A="$A -o Debug::NoLocking=1"
	command -v apt-get >/dev/null || { why="no apt-get to fetch Debian's $pkg source"; return 1; }
	command -v dpkg-source >/dev/null || { why="no dpkg-source (dpkg-dev) to unpack Debian's $pkg source"; return 1; }
	apt-get $A -q update >"$cache/apt-update.out" 2>&1 ||
		{ why="apt-get update with deb-src entries failed: $(grep -m1 -E '^(E|Err):' "$cache/apt-update.out")"; return 1; }
	installed=$(dpkg-query -W -f '${Version}' "$pkg" 2>/dev/null)
	versions=$(apt-cache $A showsrc "$pkg" 2>/dev/null | sed -n 's/^Version: //p' | sort -V -r)
	[ -n "$versions" ] || { why="apt knows no source package $pkg (deb-src entries: $apt/parts)"; return 1; }
	# The installed version first, then the others, newest first.
	rm -f "$cache/apt-source.first"
	for v in $installed $(echo "$versions" | grep -vxF "${installed:-none}"); do
		rm -f "$cache/dl/"*
		if (cd "$cache/dl" && apt-get $A -q source --download-only "$pkg=$v") \
			>"$cache/apt-source.out" 2>&1; then
			[ "$v" = "$installed" ] ||
				echo "# the installed ${installed:-version} could not be fetched ($(grep -m1 -oE "[0-9]{3} +[A-Za-z]+( [A-Za-z]+)*" "$cache/apt-source.first" 2>/dev/null)): $v instead"
			rm -rf "$cache/src.new"
			(cd "$cache/dl" && dpkg-source -q -x ./*.dsc "$cache/src.new") \
				>"$cache/dpkg-source.out" 2>&1 &&
				mv "$cache/src.new" "$cache/src" && echo "$v" >"$cache/src.version" &&
				rm -f "$cache/dl/"* && return 0
			why="dpkg-source -x of $pkg $v failed: $(tail -n 1 "$cache/dpkg-source.out")"
			return 1
		fi
		[ -f "$cache/apt-source.first" ] || cp "$cache/apt-source.out" "$cache/apt-source.first"
	done
	why="apt-get source $pkg failed for $(echo $installed $versions | tr ' ' ','): $(grep -m1 -E '^E:' "$cache/apt-source.out")"
	return 1
}
if [ -n "${PG_REGRESS_SRC:-}" ]; then
	[ -f "$PG_REGRESS_SRC/src/test/regress/parallel_schedule" ] ||
		skip_all "PG_REGRESS_SRC=$PG_REGRESS_SRC is not a PostgreSQL source tree"
	src=$(cd "$PG_REGRESS_SRC" && pwd)
	srcver=$(sed -n "s/^PACKAGE_VERSION='\(.*\)'/\1/p" "$src/configure")
else
	src=$cache/src
	if [ ! -f "$src/src/test/regress/parallel_schedule" ]; then
		echo "# fetching Debian's postgresql-$major source (cache: $cache)"
		fetch_source || skip_all "$why"
	fi
	srcver=$(cat "$cache/src.version")
fi
case $srcver in
"$major" | "$major".* | "$major"-* | "$major"[a-z]*) ;;
*) skip_all "the source in $src is version $srcver, the server $server" ;;
esac

# ---- the build: pg_regress and the regress module --------------------------
# Configured as Debian's server where it matters to the module the server
# loads (the defaults: 64-bit pass-by-value, block sizes) and to
# pg_regress (bindir: where it finds psql; the default port and time
# zones); no readline, zlib or ICU, which neither uses.
reg=$src/src/test/regress
if [ ! -f "$reg/.ml-built" ]; then
	echo "# building $reg (configure, make -C src/test/regress)"
	(cd "$src" && ./configure --prefix=/usr --bindir="$bindir" \
		--with-pgport=5432 --with-system-tzdata=/usr/share/zoneinfo \
		--without-readline --without-zlib --without-icu CFLAGS=-O2) \
		>"$cache/configure.out" 2>&1 ||
		skip_all "configuring the source failed: $(tail -n 1 "$cache/configure.out")"
	# Outside our make: PostgreSQL makes its generated headers only in a
	# top-level make (MAKELEVEL 0).
	env -u MAKELEVEL -u MAKEFLAGS -u MFLAGS make -C "$reg" \
		-j"${PG_REGRESS_JOBS:-2}" >"$cache/make.out" 2>&1 ||
		skip_all "building src/test/regress failed: $(grep -m1 -E 'error:|Error [0-9]' "$cache/make.out")"
	touch "$reg/.ml-built"
fi

# ---- two clusters ---------------------------------------------------------
. "$top_srcdir/tests/postgresql/pg-cluster.sh"
tmp= data= running=
stop_server() {
	[ -n "$running" ] && as "$bindir/pg_ctl" -D "$running" -m fast -w stop >/dev/null 2>&1
	running=
}
# The cluster limit's budget object outlives the server (docs/postgresql.md).
remove_budget() {
	[ -n "$data" ] && [ -f "$data/global/pg_control" ] || return 0
	sysid=$("$bindir/pg_controldata" -D "$data" 2>/dev/null |
		sed -n 's/^Database system identifier: *//p')
	[ -n "$sysid" ] && rm -f /dev/shm/memlimits.*.pg."$sysid".*
}
trap 'stop_server; remove_budget; [ -n "${KEEP_TMP:-}" ] || [ -z "$tmp" ] || rm -rf "$tmp"' EXIT INT TERM
pg_cluster ml-pgreg || { echo "Bail out! initdb failed"; sed 's/^/# /' "$tmp/initdb.out"; exit 1; }
# The suite's files where the server's user reads and writes them: the
# regress module and the data files it loads, the results it COPYs to.
as mkdir "$tmp/regress"
for f in sql expected data parallel_schedule resultmap pg_regress regress.so autoinc.so refint.so; do
	[ -e "$reg/$f" ] && as cp -R "$reg/$f" "$tmp/regress/"
done
# Same cluster twice, copied before either runs: no state from one run in
# the other.
as cp -a "$data" "$tmp/data-memlimits"
as sh -c "cat >>'$tmp/data-memlimits/postgresql.conf'" <<CONF
shared_preload_libraries = '$tmp/lib/memlimits.so'
memlimits.statement_limit = '$slimit'
memlimits.cluster_limit = '4GB'
CONF

# run MODE DATA [PRELOAD]: the server on DATA, the suite as installcheck
# runs it, its output in $tmp/MODE/.
run() {
	as mkdir "$tmp/$1"
	as env ${3:+LD_PRELOAD=$3} "$bindir/pg_ctl" -D "$2" -l "$tmp/$1/server.log" \
		-w -t 120 start >"$tmp/$1/start.out" 2>&1 || {
		echo "Bail out! the $1 server does not start"
		sed 's/^/# /' "$tmp/$1/start.out" "$tmp/$1/server.log" | tail -n 20
		exit 1
	}
	running=$2
	s=$(date +%s)
	(cd "$tmp/regress" && as ./pg_regress --inputdir=. --outputdir="$tmp/$1" \
		--bindir="$bindir" --dlpath=. --max-concurrent-tests=20 \
		--host="$tmp/sock" --port="$port" --schedule=parallel_schedule \
		--max-connections=1) >"$tmp/$1/pg_regress.out" 2>&1
	echo $? >"$tmp/$1/status"
	echo $(($(date +%s) - s)) >"$tmp/$1/seconds"
	stop_server
	# Each test and its result: "NAME ok", "NAME FAILED", "NAME failed (ignored)".
	sed -n 's/^\(test \)\{0,1\} *\([A-Za-z0-9_.-]*\) *\.\.\. \([a-zA-Z][a-zA-Z ()]*[a-zA-Z)]\) .*/\2 \3/p' \
		"$tmp/$1/pg_regress.out" >"$tmp/$1/tests"
	# regression.diffs without the output directory's path or the files' times.
	if [ -f "$tmp/$1/regression.diffs" ]; then
		sed -e "s|$tmp/$1|OUT|g" -e "s|$tmp/regress|IN|g" \
			-e 's/^\(---\|+++\) \([^	]*\)	.*/\1 \2/' "$tmp/$1/regression.diffs"
	fi >"$tmp/$1/diffs"
}
run plain "$data"
run memlimits "$tmp/data-memlimits" "$tmp/lib/libmemlimits.so"

# ---- the comparison ---------------------------------------------------------
echo "1..4"
nfail=0
summary() { # summary MODE: "N tests, N ok, N failed (N ignored), N s"
	awk -v s="$(cat "$tmp/$1/seconds")" '{ n++ } $2 == "ok" { p++ } $2 ~ /^(FAILED|failed)$/ { f++ }
		/ignored/ { i++ } END { printf "%d tests, %d ok, %d failed, %d failed (ignored), %d s", n, p, f, i, s }' \
		"$tmp/$1/tests"
}
echo "# source: Debian postgresql-$major $srcver ($src); server: $server ($bindir)"
case $srcver in
"$server" | "$server"-*) ;;
*) echo "# not the server's version: the suite's files and the client (psql) differ in" \
	"minor version; tests may fail, the same in both runs" ;;
esac
echo "# plain:     $(summary plain)"
echo "# memlimits: $(summary memlimits) (statement_limit $slimit, cluster_limit 4GB)"
ntests=$(wc -l <"$tmp/plain/tests")
if [ "$ntests" -gt 100 ]; then
	ok "the suite ran: $ntests tests against the plain server"
else
	notok "the suite ran only $ntests tests against the plain server"
	nfail=$((nfail + 1))
	tail -n 20 "$tmp/plain/pg_regress.out" | sed 's/^/# /'
fi
if cmp -s "$tmp/plain/tests" "$tmp/memlimits/tests"; then
	ok "the same tests pass and fail with memlimits"
else
	notok "the tests' results differ (plain <, memlimits >)"
	nfail=$((nfail + 1))
	diff "$tmp/plain/tests" "$tmp/memlimits/tests" | grep '^[<>]' | head -n 40 | sed 's/^/# /'
fi
if cmp -s "$tmp/plain/diffs" "$tmp/memlimits/diffs"; then
	ok "regression.diffs the same ($(grep -c '^diff ' "$tmp/plain/diffs") files differ from the expected output in both)"
else
	notok "regression.diffs differ (plain <, memlimits >)"
	nfail=$((nfail + 1))
	diff "$tmp/plain/diffs" "$tmp/memlimits/diffs" | head -n 60 | sed 's/^/# /'
fi
# The server logs: no backend ended by a signal, no memlimits stop.
bad=$(grep -hE 'terminated by signal|was terminated|memlimits: (statement|cluster)' \
	"$tmp/memlimits/server.log" | head -n 5)
if [ -z "$bad" ]; then
	ok "the memlimits server's log: no process killed by a signal, no statement stopped"
else
	notok "the memlimits server's log:"
	nfail=$((nfail + 1))
	printf '%s\n' "$bad" | sed 's/^/# /'
fi
echo "# total $(($(date +%s) - t0)) s${KEEP_TMP:+; kept $tmp}"
# The exit status: 1 if any case above failed.
[ "$nfail" = 0 ]
