#!/bin/sh
# The Python module installs like a Python package (issue 43, item 5).
#
# make check (no arguments):
#   - the build tree's package imports with PYTHONPATH alone: no
#     LD_LIBRARY_PATH, no ldconfig (its RUNPATH names this tree's library);
#   - `import memlimits` from inside python/ of the source tree says that
#     this is the source folder and what to do, not "circular import";
#   - `pip install --no-index ./python` in a fresh virtualenv, offline and
#     with pip's build isolation (python/memlimits_build.py declares no
#     build dependency), straight from the source tree (read-only under
#     make distcheck: the build writes nothing there); the installed module
#     imports and stops a block, with no LD_LIBRARY_PATH.
# make installcheck (make distcheck runs it), with ML_PY_SITEDIR and
# ML_LIBDIR set: the module make install put in PYTHON_SITEDIR imports
# with no ldconfig and no LD_LIBRARY_PATH, and pip builds the package
# against the installed library found through pkg-config.
: "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
py=${ML_PYTHON:-}
if [ -z "$py" ]; then
	echo "1..0 # SKIP configured without the Python module"
	exit 0
fi
top_srcdir=$(cd "$top_srcdir" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-pyinst.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# What a block inside the installed module must do: stop a runaway.
probe='import memlimits
try:
    with memlimits.limit(held="8MiB"):
        keep = [bytes(4096) for _ in range(100000)]
    print("not stopped")
except memlimits.LimitExceeded:
    print("stopped", memlimits.__version__)'
want="stopped $PACKAGE_VERSION"
# A virtualenv with pip, or nothing (python3-venv missing).
venv() {
	"$py" -m venv "$1" >"$tmp/venv.log" 2>&1 && [ -x "$1/bin/pip" ]
}

if [ -n "${ML_PY_SITEDIR:-}" ]; then
	out=$(cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONPATH="$ML_PY_SITEDIR" \
		PYTHONDONTWRITEBYTECODE=1 "$py" -c "$probe" 2>&1)
	is "$out" "$want" "installed in $ML_PY_SITEDIR: imports and stops, no ldconfig, no LD_LIBRARY_PATH"
	rp=$(readelf -d "$ML_PY_SITEDIR"/memlimits/_memlimits*.so 2>/dev/null |
		sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
	is "$rp" "$ML_LIBDIR" "the installed extension's RUNPATH is libdir"
	if venv "$tmp/v"; then
		out=$(env -u MEMLIMITS_CFLAGS -u MEMLIMITS_LIBS -u MEMLIMITS_RUNPATH \
			PKG_CONFIG_PATH="$ML_LIBDIR/pkgconfig" PIP_NO_INDEX=1 \
			PIP_DISABLE_PIP_VERSION_CHECK=1 \
			"$tmp/v/bin/pip" install "$top_srcdir/python" 2>&1)
		rc=$?
		check $rc "pip install ./python against the installed library (pkg-config)"
		[ $rc -eq 0 ] || printf '%s\n' "$out" | tail -n 20 | sed 's/^/# /'
		out=$(cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONDONTWRITEBYTECODE=1 \
			"$tmp/v/bin/python" -c "$probe" 2>&1)
		is "$out" "$want" "the virtualenv's module imports and stops"
	else
		skip "no virtualenv ($py -m venv: python3-venv)"
		skip "no virtualenv"
	fi
	echo "1..$n"
	exit 0
fi

: "${top_builddir:?}"
top_builddir=$(cd "$top_builddir" && pwd)
pkg=$top_builddir/python/build/pkg
if [ ! -f "$pkg/.built" ]; then
	echo "1..0 # SKIP the Python module is not built"
	exit 0
fi
out=$(cd "$tmp" && env -u LD_LIBRARY_PATH PYTHONPATH="$pkg" \
	PYTHONDONTWRITEBYTECODE=1 "$py" -c "$probe" 2>&1)
is "$out" "$want" "the build tree's package imports with PYTHONPATH alone and stops"

out=$(cd "$top_srcdir/python" && env -u PYTHONPATH PYTHONDONTWRITEBYTECODE=1 \
	"$py" -c 'import memlimits' 2>&1 | tail -n 1)
case $out in
*circular*) notok "import from python/ blames a circular import: $out" ;;
*"source folder"*"PYTHONPATH="*) ok "import from python/ says it is the source folder and what to do" ;;
*) notok "import from python/ says: $out" ;;
esac

if venv "$tmp/v"; then
	# The flags of this build tree (the library is not installed here);
	# no network: PIP_NO_INDEX, and build isolation stays on.
	out=$(env MEMLIMITS_CFLAGS="-I$top_srcdir/include" \
		MEMLIMITS_LIBS="-L$top_builddir/lib/.libs -lmemlimits" \
		PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
		"$tmp/v/bin/pip" install "$top_srcdir/python" 2>&1)
	rc=$?
	check $rc "pip install ./python offline in a fresh virtualenv, build isolation on"
	[ $rc -eq 0 ] || printf '%s\n' "$out" | tail -n 20 | sed 's/^/# /'
	out=$(cd "$tmp" && env -u LD_LIBRARY_PATH -u PYTHONPATH \
		PYTHONDONTWRITEBYTECODE=1 "$tmp/v/bin/python" -c "$probe" 2>&1)
	is "$out" "$want" "the virtualenv's module imports and stops, no LD_LIBRARY_PATH"
	# pip wrote nothing into the source tree (make distcheck's is read-only).
	left=$(cd "$top_srcdir/python" && ls -d build ./*.egg-info memlimits/*.so 2>/dev/null)
	is "$left" "" "nothing written into python/ of the source tree"
else
	skip "no virtualenv ($py -m venv: Debian's python3-venv)"
	skip "no virtualenv"
	skip "no virtualenv"
fi
echo "1..$n"
exit 0
