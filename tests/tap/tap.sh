# TAP for the shell tests: source it, then call ok/notok/skip/diag; the
# driver counts the results (tap-driver.sh), the test prints the plan
# (echo "1..$n", or tap_done where it has named cases).
#
# Named cases, as tests/tap/tap.h's (tests/run-tests):
#   if tap_case NAME; then ...; fi
# runs the block unless TAP_CASE names another case; with TAP_LIST set,
# tap_case prints NAME and is false, and ok/notok/skip/diag print nothing.
# Taken out of the environment here, so that the programs a test runs do
# not see them.
n=0
tap_only=${TAP_CASE-} tap_listing=${TAP_LIST-} tap_matched=
[ "$tap_listing" = 0 ] && tap_listing=
unset TAP_CASE TAP_LIST
ok() {
	[ -z "$tap_listing" ] || return 0
	n=$((n + 1))
	echo "ok $n - $*"
}
notok() {
	[ -z "$tap_listing" ] || return 0
	n=$((n + 1))
	echo "not ok $n - $*"
}
# "ok N # SKIP": tap-driver.sh counts "not ok N # SKIP" as a failure.
skip() {
	[ -z "$tap_listing" ] || return 0
	n=$((n + 1))
	echo "ok $n # SKIP $*"
}
# check STATUS DESCRIPTION: ok when STATUS (a command's $?) is 0.
check() {
	if test "$1" = 0; then ok "$2"; else notok "$2"; fi
}
# is GOT WANT DESCRIPTION: ok when the two strings are equal; else not ok,
# with both as TAP comments.
is() {
	if test "$1" = "$2"; then
		ok "$3"
	else
		notok "$3"
		[ -n "$tap_listing" ] || printf '# got:  %s\n# want: %s\n' "$1" "$2"
	fi
}
# diag FILE...: the files' lines as TAP comments.
diag() {
	[ -z "$tap_listing" ] || return 0
	sed 's/^/# /' "$@"
}
tap_case() {
	if [ -n "$tap_listing" ]; then
		echo "$1"
		return 1
	fi
	[ -z "$tap_only" ] || [ "$tap_only" = "$1" ] || return 1
	tap_matched=1
}
# tap_done: the plan; fails when TAP_CASE named no case; nothing under
# TAP_LIST.
tap_done() {
	[ -z "$tap_listing" ] || exit 0
	if [ -n "$tap_only" ] && [ -z "$tap_matched" ]; then
		notok "no case named '$tap_only' (TAP_LIST=1 lists them)"
	fi
	echo "1..$n"
}
