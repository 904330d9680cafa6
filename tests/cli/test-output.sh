#!/bin/sh
# Run mode's output files and settings (issue 11): a privileged program
# ignores MEMLIMITS_* (setuid, file capabilities: run as root only); a
# report reaches a stderr the program closed; the settings survive a
# program that overwrites its environment; FIFOs, unwritable files and
# over-long names are refused with one line naming the file, never a hang;
# the program's descriptors 0-2 are as without memlimits and no child
# inherits ours.  See docs/reliability.md and memlimits(1).
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
P=$top_builddir/tests/cli/test-output-prog
FDS=$top_builddir/tests/cli/test-output-fds
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-output.XXXXXX") || exit 1
sdir=
user=
cleanup() {
	rm -rf "$tmp"
	test -z "$sdir" || rm -rf "$sdir"
	test -z "$user" || userdel "$user" 2>/dev/null
}
trap cleanup EXIT
trap 'exit 1' INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT MEMLIMITS_FAULT \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED MEMLIMITS_DELIVERY
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" && test -x "$P" && test -x "$FDS" || {
	echo "Bail out! $M, $P or $FDS not built"
	exit 1
}
# A hang is a failure, not a stuck test suite.
T="timeout 20"

# one_line FILE PATTERN: FILE is exactly one line, matching PATTERN.
one_line() {
	test "$(wc -l <"$1")" = 1 && grep -q -- "$2" "$1"
}

# ---- stderr closed by the program (sort, coreutils' close_stdout) --------
$T "$M" run --alloc-limit 4M -- "$P" closeerr 64 >"$tmp/o" 2>"$tmp/e"
st=$?
if test "$st" = 0 && grep -q '^==== memlimits report' "$tmp/e" &&
	grep -q '^limit reached: the allocation limit' "$tmp/e"; then
	ok "stderr closed by the program: the report at the limit still reaches it"
else
	notok "stderr closed: status $st, no report"
	diag "$tmp/e"
fi
$T "$M" run --report /dev/stderr -- "$P" closeerr 1 >"$tmp/o" 2>"$tmp/e"
st=$?
if test "$st" = 0 && grep -q '^==== end of memlimits report' "$tmp/e"; then
	ok "--report /dev/stderr after the program closed stderr: written"
else
	notok "--report /dev/stderr, stderr closed: status $st"
	diag "$tmp/e"
fi
if command -v sort >/dev/null && command -v seq >/dev/null; then
	seq 1 200000 >"$tmp/nums"
	$T "$M" run --heap-limit 1GiB --report /dev/stderr -- \
		sort -n "$tmp/nums" >"$tmp/o" 2>"$tmp/e"
	st=$?
	if test "$st" = 0 && grep -q '^==== end of memlimits report' "$tmp/e" &&
		cmp -s "$tmp/nums" "$tmp/o"; then
		ok "sort (closes stderr at exit) under --report /dev/stderr: the report arrives"
	else
		notok "sort: status $st, no report on stderr"
		diag "$tmp/e"
	fi
else
	skip "sort or seq not installed"
fi

# ---- descriptors: 0-2 as without memlimits, nothing inherited ----------
# (--stats: counting only; a limit also captures stacks, whose descriptors
# are another test's business.)
mkdir "$tmp/st"
# fds_same DESCRIPTION REDIRECTION: the program's list under memlimits run
# is the plain list plus descriptors >= 10 that are close-on-exec; a child
# run without the library sees exactly the plain list.
norm() { # pipes differ from run to run in their inode only
	sed 's/pipe:\[[0-9]*\]/pipe/' | sort
}
fds_same() {
	what=$1
	shift
	sh -c "exec \"$FDS\" $*" | norm >"$tmp/plain"
	$T "$M" run --stats "$tmp/st" -- sh -c "exec \"$FDS\" $*" | norm >"$tmp/run"
	extra=$(comm -13 "$tmp/plain" "$tmp/run")
	missing=$(comm -23 "$tmp/plain" "$tmp/run")
	bad=$(echo "$extra" | awk 'NF && ($1 < 10 || $2 != "cloexec")')
	if test -s "$tmp/plain" && test -z "$missing" && test -z "$bad"; then
		ok "$what: descriptors as without memlimits, ours close-on-exec above 9 ($(echo $extra | cut -c1-60))"
	else
		notok "$what: missing '$missing', low or inherited '$bad'"
		diag "$tmp/plain" "$tmp/run"
	fi
	sh -c "env -u LD_PRELOAD \"$FDS\" $*" | norm >"$tmp/plain"
	$T "$M" run --stats "$tmp/st" -- sh -c "env -u LD_PRELOAD \"$FDS\" $*" |
		norm >"$tmp/run"
	if test -s "$tmp/plain" && cmp -s "$tmp/plain" "$tmp/run"; then
		ok "$what: a child inherits exactly what it inherits without memlimits"
	else
		notok "$what: a child inherits other descriptors"
		diag "$tmp/plain" "$tmp/run"
	fi
}
fds_same "stdio open" ""
fds_same "stdin and stderr closed" "<&- 2>&-"
# A program that lists every descriptor it has (CPython's
# test_pass_fds_redirected scans them all with fstat) sees only its own
# under limits that are not reached: the library holds none until a report
# on stderr is due.
for lim in "--heap-limit 1GiB" "--alloc-limit 1TiB"; do
	ls /proc/self/fd >"$tmp/plain"
	# shellcheck disable=SC2086 # $lim is two words on purpose
	$T "$M" run $lim -- ls /proc/self/fd >"$tmp/run"
	if test -s "$tmp/plain" && cmp -s "$tmp/plain" "$tmp/run"; then
		ok "$lim, not reached: the program lists the descriptors it lists without memlimits"
	else
		notok "$lim, not reached: the program lists other descriptors"
		diag "$tmp/plain" "$tmp/run"
	fi
done

# ---- settings read once: a program that overwrites its environment -----
rm -rf "$tmp/st" && mkdir "$tmp/st"
MEMLIMITS_REPORT=$tmp/w.rep MEMLIMITS_PROFILE=$tmp/w.prof \
	MEMLIMITS_STATS_DIR=$tmp/st $T "$P" wipeenv 8 >"$tmp/o" 2>"$tmp/e"
st=$?
if test "$st" = 0 && ! test -s "$tmp/e" &&
	grep -q '^==== end of memlimits report' "$tmp/w.rep" &&
	test -s "$tmp/w.prof" && ls "$tmp/st"/memlimits.*.json >/dev/null 2>&1; then
	ok "environment overwritten before exit (setproctitle): report, profile and statistics written"
else
	notok "environment overwritten: status $st, files: $(ls "$tmp" "$tmp/st" | tr '\n' ' ')"
	diag "$tmp/e"
fi

# ---- FIFOs: refused with one line, never a hang ------------------------
mkfifo "$tmp/fifo" || exit 1
for var in MEMLIMITS_REPORT MEMLIMITS_PROFILE; do
	env "$var=$tmp/fifo" $T "$P" alloc 1 >"$tmp/o" 2>"$tmp/e"
	st=$?
	if test "$st" = 0 && one_line "$tmp/e" "$tmp/fifo: not a regular file"; then
		ok "$var names a FIFO: exit 0 at once, one line: $(cat "$tmp/e")"
	else
		notok "$var names a FIFO: status $st (124: hung)"
		diag "$tmp/e"
	fi
done
$T "$M" run --report "$tmp/fifo" -- true >"$tmp/o" 2>"$tmp/e"
st=$?
if test "$st" = 2 && one_line "$tmp/e" "fifo' is not a regular file"; then
	ok "--report FIFO: refused, exit 2, one line"
else
	notok "--report FIFO: status $st (124: hung)"
	diag "$tmp/e"
fi
# The statistics file is written to a temporary name, then renamed: a FIFO
# under either name.
rm -rf "$tmp/st" && mkdir "$tmp/st"
MEMLIMITS_STATS_DIR=$tmp/st $T sh -c \
	'mkfifo "$0/.memlimits.$$.json.tmp" "$0/memlimits.$$.json" && echo $$ >"$0/../pid" && exec "$1" alloc 1' \
	"$tmp/st" "$P" >"$tmp/o" 2>"$tmp/e"
st=$?
pid=$(cat "$tmp/pid")
if test "$st" = 0 && ! test -s "$tmp/e" && test -f "$tmp/st/memlimits.$pid.json" &&
	grep -q '"allocations"' "$tmp/st/memlimits.$pid.json" &&
	! test -e "$tmp/st/.memlimits.$pid.json.tmp"; then
	ok "FIFOs named like the statistics files: replaced, no hang"
else
	notok "statistics and FIFOs: status $st (124: hung), $(ls -la "$tmp/st")"
	diag "$tmp/e"
fi

# ---- files that cannot be written: one line naming the file ------------
# fails DESCRIPTION PATTERN VAR=VALUE...: the program exits 0 and says
# PATTERN in one line.
fails() {
	what=$1
	pat=$2
	shift 2
	env "$@" $T "$P" alloc 2 >"$tmp/o" 2>"$tmp/e"
	st=$?
	if test "$st" = 0 && one_line "$tmp/e" "$pat"; then
		ok "$what: exit 0, one line: $(cat "$tmp/e")"
	else
		notok "$what: status $st, $(wc -l <"$tmp/e") lines"
		diag "$tmp/e"
	fi
}
if test -w /dev/full; then
	fails "report to /dev/full" "cannot write the report to /dev/full: No space" \
		MEMLIMITS_REPORT=/dev/full
	fails "profile to /dev/full" "cannot write the profile to /dev/full: No space" \
		MEMLIMITS_PROFILE=/dev/full
	$T "$M" run --report /dev/full -- "$P" alloc 1 >"$tmp/o" 2>"$tmp/e"
	st=$?
	if test "$st" = 0 && one_line "$tmp/e" "report to /dev/full: No space"; then
		ok "--report /dev/full: exit 0, one line"
	else
		notok "--report /dev/full: status $st"
		diag "$tmp/e"
	fi
else
	skip "no /dev/full"
	skip "no /dev/full"
	skip "no /dev/full"
fi
fails "report in a missing directory" "report to $tmp/no/r: No such file" \
	MEMLIMITS_REPORT=$tmp/no/r
fails "profile into a directory" "profile to $tmp: Is a directory" \
	MEMLIMITS_PROFILE=$tmp
fails "statistics in a missing directory" "statistics to $tmp/no/.memlimits" \
	MEMLIMITS_STATS_DIR=$tmp/no
# Read-only even for root.
if test -e /proc/version; then
	fails "report to a read-only file" "report to /proc/version: " \
		MEMLIMITS_REPORT=/proc/version
else
	skip "no /proc/version"
fi

# ---- names the library cannot hold whole, and names it can -------------
# A 4082-byte name (it used to be cut to 4072 bytes, sending the report
# into another file): written whole.  Names of 4096 bytes and more: refused.
long=$tmp/d
while test ${#long} -lt 3900; do long=$long/dddddddddddddddddddddddddddddddddddddddddddddddddd; done
mkdir -p "$long" || exit 1
name=$long/r
while test $((${#name} + 1)) -lt 4082; do name=${name}x; done
name=${name}y
MEMLIMITS_REPORT=$name $T "$P" alloc 1 >"$tmp/o" 2>"$tmp/e"
st=$?
if test "$st" = 0 && ! test -s "$tmp/e" && test "${#name}" = 4082 &&
	test "$(ls "$long")" = "$(basename "$name")" &&
	grep -q '^==== end of memlimits report' "$name"; then
	ok "a 4082-byte report path: written to exactly that file"
else
	notok "4082-byte report path: status $st, files: $(ls "$long")"
	diag "$tmp/e"
fi
rm -f "$long"/*
name=$long/r
while test ${#name} -lt 5000; do name=${name}z; done
for var in MEMLIMITS_REPORT MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR; do
	env "$var=$name" $T "$P" alloc 1 >"$tmp/o" 2>"$tmp/e"
	st=$?
	if test "$st" = 0 && one_line "$tmp/e" "ignoring $var: a path of 5000 bytes" &&
		test -z "$(ls "$long")"; then
		ok "$var of 5000 bytes: refused in one line, nothing created"
	else
		notok "$var of 5000 bytes: status $st, files: $(ls "$long")"
		diag "$tmp/e"
	fi
done

# ---- privileged programs ignore the environment ------------------------
# A setuid-root copy run by an unprivileged user, and a copy with a file
# capability: the variables point at a file, at symbolic links and at a
# directory; nothing may be created or touched, no limit applied.
nskip=4
privileged() {
	if test "$(id -u)" != 0; then
		why="not root"
	elif ! command -v setpriv >/dev/null; then
		why="no setpriv (util-linux)"
	else
		return 0
	fi
	while test $nskip -gt 0; do
		skip "privileged program: $why"
		nskip=$((nskip - 1))
	done
	return 1
}
if privileged; then
	user=mlt$$
	if ! useradd -M -r -s /bin/false "$user" 2>"$tmp/e"; then
		user=
		diag "$tmp/e"
	fi
	name=${user:-nobody}
	uid=$(id -u "$name" 2>/dev/null)
	gid=$(id -g "$name" 2>/dev/null)
	RUNAS="setpriv --reuid=$uid --regid=$gid --clear-groups --"
	# A directory the user can traverse, whatever the build directory is.
	sdir=$(mktemp -d /tmp/ml-priv.XXXXXX) && chmod 0755 "$sdir" || exit 1
	cp "$P" "$sdir/prog-plain" && cp "$P" "$sdir/prog-suid" &&
		cp "$P" "$sdir/prog-cap" || exit 1
	chmod 0755 "$sdir/prog-plain" "$sdir/prog-cap"
	chmod 4755 "$sdir/prog-suid"
	printf 'original\n' >"$sdir/victim"
	ln -s victim "$sdir/link"
	ln -s absent "$sdir/dangling"
	mkdir "$sdir/stats" "$sdir/u"
	chown "$uid:$gid" "$sdir/u"
	printf 'original\n' >"$sdir/u/victim"
	chown "$uid:$gid" "$sdir/u/victim"
	ln -s victim "$sdir/u/link"
	ln -s absent "$sdir/u/dangling"
	mkdir "$sdir/u/stats"
	chown "$uid:$gid" "$sdir/u/stats"
	limits="MEMLIMITS_HEAP_LIMIT=1MiB MEMLIMITS_ALLOC_LIMIT=1MiB MEMLIMITS_ON_LIMIT=abort MEMLIMITS_FAULT=libc:1"
	snapshot() { # the directory's files, their sizes, times and contents
		(cd "$1" && find . -printf '%p %s %T@ %y %l\n' | sort && cat victim)
	}
	# untouched DESCRIPTION DIR PROG EUID: PROG run by the user with the
	# variables at DIR's files prints "secure=1 euid=EUID failed=0", and
	# DIR is as it was.
	untouched() {
		snapshot "$2" >"$tmp/before"
		env MEMLIMITS_REPORT="$2/victim" MEMLIMITS_PROFILE="$2/link" \
			MEMLIMITS_STATS_DIR="$2/stats" $limits \
			$T $RUNAS "$3" alloc 16 >"$tmp/o" 2>"$tmp/e"
		st1=$?
		env MEMLIMITS_REPORT="$2/dangling" MEMLIMITS_PROFILE="$2/new" \
			$T $RUNAS "$3" alloc 1 >>"$tmp/o" 2>>"$tmp/e"
		st2=$?
		snapshot "$2" >"$tmp/after"
		if test "$st1$st2" = 00 &&
			test "$(sort -u "$tmp/o")" = "secure=1 euid=$4 failed=0" &&
			cmp -s "$tmp/before" "$tmp/after" &&
			grep -q 'ignoring the MEMLIMITS_\* variables' "$tmp/e"; then
			ok "$1: no file created or touched, no limit applied"
		else
			notok "$1: status $st1 $st2, $(cat "$tmp/o" | tr '\n' ' ')"
			diag "$tmp/e"
			diff "$tmp/before" "$tmp/after" | sed 's/^/# /'
		fi
	}
	# The control: the same program, not privileged, does apply the
	# variables (else the cases below would prove nothing).
	env MEMLIMITS_REPORT="$sdir/ctl.rep" MEMLIMITS_HEAP_LIMIT=1MiB \
		$T "$sdir/prog-plain" alloc 16 >"$tmp/o" 2>"$tmp/e"
	if grep -q 'secure=0 euid=0 failed=[1-9]' "$tmp/o" &&
		grep -q '^==== end of memlimits report' "$sdir/ctl.rep"; then
		ok "control: not privileged, the same variables apply"
	else
		notok "control: the variables do not apply: $(cat "$tmp/o")"
		diag "$tmp/e"
	fi
	rm -f "$sdir/ctl.rep"
	$T $RUNAS "$sdir/prog-suid" alloc 1 >"$tmp/o" 2>"$tmp/e"
	if ! grep -q 'secure=1 euid=0' "$tmp/o"; then
		skip "setuid not honoured here (nosuid mount?): $(cat "$tmp/o" "$tmp/e" | head -1)"
	else
		untouched "setuid-root program run by $name" "$sdir" \
			"$sdir/prog-suid" 0
	fi
	env MEMLIMITS_REPORT="$sdir/u/ctl.rep" MEMLIMITS_HEAP_LIMIT=1MiB \
		$T $RUNAS "$sdir/prog-plain" alloc 16 >"$tmp/o" 2>"$tmp/e"
	if ! grep -q "secure=0 euid=$uid failed=[1-9]" "$tmp/o" ||
		! test -s "$sdir/u/ctl.rep"; then
		skip "file capabilities: $name cannot run the program (is the build directory readable by $name?): $(head -1 "$tmp/e")"
		skip "file capabilities: as above"
	else
		ok "control: run by $name, not privileged, the variables apply"
		rm -f "$sdir/u/ctl.rep"
		if ! command -v setcap >/dev/null; then
			skip "file capabilities: no setcap (libcap2-bin)"
		elif ! setcap cap_net_bind_service+ep "$sdir/prog-cap" 2>"$tmp/e"; then
			skip "file capabilities: setcap failed (no xattrs here?): $(head -1 "$tmp/e")"
		else
			untouched "file-capability program run by $name" \
				"$sdir/u" "$sdir/prog-cap" "$uid"
		fi
	fi
fi
echo "1..$n"
