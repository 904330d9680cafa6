#!/bin/sh
# The Python module's pytest suite (python/tests), as TAP: one line per
# pytest test (pytest -v's outcome lines), so that CI's TAP summary counts
# each.  Skipped, with the reason, when configure built no module.
: "${top_srcdir:?}" "${top_builddir:?}"
. "$top_srcdir/tests/tap/tap.sh"
pkg=$top_builddir/python/build/pkg
if [ -z "${ML_PYTHON:-}" ] || [ ! -f "$pkg/.built" ]; then
	echo "1..0 # SKIP configured without the Python module (--without-python, or no python3-dev)"
	exit 0
fi
if ! "$ML_PYTHON" -c 'import pytest' 2>/dev/null; then
	echo "1..0 # SKIP $ML_PYTHON has no pytest (Debian: python3-pytest)"
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-python.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# -p no:cacheprovider: nothing written into the source tree.
(cd "$tmp" && env PYTHONPATH="$pkg" \
	LD_LIBRARY_PATH="$top_builddir/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	PYTHONDONTWRITEBYTECODE=1 MEMLIMITS_SEED=37 LIBC_FATAL_STDERR_=1 \
	ML_PY_MEASURED="$tmp/measured" \
	ML_PY_MEMLIMITS="$(cd "$top_builddir" && pwd)/tools/memlimits" \
	"$ML_PYTHON" -X faulthandler -m pytest -v -s -p no:cacheprovider --rootdir="$tmp" \
	"$top_srcdir/python/tests") >"$tmp/out" 2>&1
rc=$?
awk '
	/::[^ ]+ (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)/ {
		name = $1; sub(/.*\/python\/tests\//, "", name)
		for (i = 2; i <= NF; i++) if ($i ~ /^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)$/) r = $i
		n++
		if (r == "PASSED") print "ok " n " - " name
		else if (r == "XFAIL" || r == "XPASS") print "ok " n " - " name " (" r ", not strict: docs/python.md)"
		else if (r == "SKIPPED") print "ok " n " # SKIP " name
		else print "not ok " n " - " name " (" r ")"
	}' "$tmp/out" >"$tmp/tap"
n=$(grep -c '^\(not \)\{0,1\}ok' "$tmp/tap")
cat "$tmp/tap"
# Numbers for the report (times, estimates), never checked: TAP comments.
[ -f "$tmp/measured" ] && sed 's/^/# measured: /' "$tmp/measured"
if [ $rc -ne 0 ]; then
	# awk, not sed: a line pytest left unended (killed mid-test) gets
	# its newline, so that the "not ok" below is a line of its own.
	tail -n 80 "$tmp/out" | awk '{ print "# " $0 }'
	if ! grep -q '^not ok' "$tmp/tap"; then
		n=$((n + 1))
		echo "not ok $n - pytest exited with status $rc"
	fi
fi
echo "1..$n"
exit 0
