#!/bin/sh
# memlimits run and signals (issue 33): started with SIGCHLD ignored, the
# command (with --tree-heap-limit it waits for the program) and the
# program still see their children's status; every catchable signal whose
# default ends a process, sent to the command with --tree-heap-limit,
# reaches the program and leaves no object of the run in /dev/shm; so does
# a SIGPIPE between making the object and forking (--verbose into a pipe
# nobody reads); a signal ignored when the command starts (nohup) reaches
# the program ignored, as a plain exec gives it.  The signals are sent
# once the program has written its pid file (the command has forked by
# then); the program waits to be killed, 120 s at most, and the pid file
# is polled for 60 s at most: backstops that fail with a message.
: "${top_builddir:?}" "${top_srcdir:?}"
S=$top_builddir/tests/cli/test-sig-exec
. "$top_srcdir/tests/tap/tree.sh"
tree_setup tsig "$S"
# Signals that dump core end the program here: no core files.
ulimit -c 0
uid=$(id -u)
# Objects of the run whose command had pid $1.
left() {
	ls /dev/shm 2>/dev/null | grep -E "^memlimits\.$uid\.run\.$1\." || true
}
CHLD=$("$S" -l | while read -r s; do
	[ "$(kill -l "$s")" = CHLD ] && echo "$s"
done)
HUP=1

# ---- SIGCHLD inherited as ignored ----------------------------------------
"$S" -i "$CHLD" -- "$M" run --tree-heap-limit 64MiB -- sh -c 'exit 3'
st=$?
[ "$st" = 3 ]
check $? "SIGCHLD ignored: --tree-heap-limit's command exits with sh -c 'exit 3''s status (got $st)"
"$S" -i "$CHLD" -- "$M" run --tree-heap-limit 64MiB -- "$S" -w 2>"$tmp/err"
st=$?
[ "$st" = 3 ]
check $? "SIGCHLD ignored: with --tree-heap-limit the program gets its child's status (got $st)" ||
	diag "$tmp/err"
"$S" -i "$CHLD" -- "$M" run -- "$S" -w 2>"$tmp/err"
st=$?
[ "$st" = 3 ]
check $? "SIGCHLD ignored: without it too (got $st)" || diag "$tmp/err"
for mode in "" --tree-heap-limit=64MiB; do
	got=$("$S" -i "$CHLD" -- "$M" run $mode -- "$S" -q "$CHLD")
	[ "$got" = default ]
	check $? "SIGCHLD ignored: the program starts with its default ${mode:-(plain)} (got $got)"
	got=$("$S" -i $HUP -- "$M" run $mode -- "$S" -q $HUP)
	[ "$got" = ignored ]
	check $? "SIGHUP ignored (nohup): the program starts with it ignored ${mode:-(plain)} (got $got)"
done

# ---- every signal that ends a process, sent to the command ---------------
# wait_pid_file: the program's pid, once it runs (60 s at most).
wait_pid_file() {
	i=0
	while [ ! -s "$tmp/pid" ] && [ $i -lt 3000 ]; do
		sleep 0.02 # not ordering: the poll of a bounded wait
		i=$((i + 1))
	done
	[ -s "$tmp/pid" ] || echo "# the program wrote no pid file in 60 s"
}
# A sanitizer build (UBSan, ASan) links its runtime into the program,
# which catches SIGSEGV, SIGBUS and SIGFPE itself.
sanitized=no
grep -qa '__ubsan_handle\|__asan_init' "$S" && sanitized=yes
sigs=$("$S" -l | while read -r s; do
	case $(kill -l "$s") in
	KILL | STOP | TSTP | TTIN | TTOU | CHLD | CONT | URG | WINCH) ;;
	*) echo "$s" ;;
	esac
done)
for sn in $sigs; do
	name=$(kill -l "$sn")
	rm -f "$tmp/pid"
	# -d: at their defaults, as a foreground command gets them (`&`
	# leaves SIGINT and SIGQUIT ignored).
	"$S" -d -- "$M" run --tree-heap-limit 64MiB -- "$S" -P "$tmp/pid" \
		>/dev/null 2>"$tmp/err" &
	runpid=$!
	wait_pid_file
	had=$(left $runpid)
	kill -"$sn" $runpid
	wait $runpid
	st=$?
	case "$sanitized:$name" in
	yes:SEGV | yes:BUS | yes:FPE)
		# A sanitizer's runtime in the program handles these itself
		# (it reports and exits 1): passed on is all that can be seen.
		[ -n "$had" ] && [ -z "$(left $runpid)" ] && [ "$st" != 0 ]
		check $? "SIG$name ($sn) to the command: passed on, the program's sanitizer runtime ends it (status $st), no object left" ||
			diag "$tmp/err"
		;;
	*)
		[ -n "$had" ] && [ -z "$(left $runpid)" ] && [ "$st" = $((128 + sn)) ]
		check $? "SIG$name ($sn) to the command: passed on, ends it as the program (status $st), no object left" ||
			diag "$tmp/err"
		;;
	esac
	# Leave no program behind when the command ended before it.
	[ -s "$tmp/pid" ] && kill -KILL "$(cat "$tmp/pid")" 2>/dev/null
	for o in $(left $runpid); do rm -f "/dev/shm/$o"; done
done

# ---- SIGPIPE before the fork ---------------------------------------------
rm -f "$tmp/ran"
"$S" -d -p -- "$M" run --verbose --tree-heap-limit 64MiB -- touch "$tmp/ran" &
runpid=$!
wait $runpid
st=$?
[ "$st" = 141 ] && [ -z "$(left $runpid)" ] && [ ! -e "$tmp/ran" ]
check $? "--verbose into a pipe nobody reads: SIGPIPE ends the command before the program runs, no object left (status $st)"
for o in $(left $runpid); do rm -f "/dev/shm/$o"; done

echo "1..$n"
