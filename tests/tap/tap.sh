# TAP for the shell tests: source it, then call ok/notok/skip/diag; the
# driver counts the results (tap-driver.sh), the test prints the plan.
n=0
ok() {
	n=$((n + 1))
	echo "ok $n - $*"
}
notok() {
	n=$((n + 1))
	echo "not ok $n - $*"
}
# "ok N # SKIP": tap-driver.sh counts "not ok N # SKIP" as a failure.
skip() {
	n=$((n + 1))
	echo "ok $n # SKIP $*"
}
# diag FILE...: the files' lines as TAP comments.
diag() {
	sed 's/^/# /' "$@"
}
