#!/bin/sh
# The Python module against every CPython 3.9 to 3.13 this machine has
# (issue 42, item 7): each is found on PATH (python3.X) or under pyenv
# ($PYENV_ROOT/versions/3.X.*), or named in ML_PYTHONS; those absent are
# skipped.  For each: the module's C files compile with that version's
# headers with -Wall -Wextra -Werror (python/memlimits_build.py needs no
# setuptools: 3.12 and later come without it), and python/tests pass under it, with pytest
# taken from $ML_PYTHON's (pure Python).  pytest 7 on 3.9 and 3.10 wants
# the exceptiongroup backport; where none is installed a stub with its
# two names stands in (pytest uses them only to print exception groups,
# which these tests never raise).
: "${top_srcdir:?}" "${top_builddir:?}"
. "$top_srcdir/tests/tap/tap.sh"
top_srcdir=$(cd "$top_srcdir" && pwd) top_builddir=$(cd "$top_builddir" && pwd)
lib=$top_builddir/lib/.libs
if [ ! -f "$lib/libmemlimits.so" ]; then
	echo "1..0 # SKIP no shared library built"
	exit 0
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-pyver.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
# pytest and what it imports, from the configured python3's installation.
deps=
if [ -n "${ML_PYTHON:-}" ] &&
	site=$("$ML_PYTHON" -c 'import os, pytest; print(os.path.dirname(os.path.dirname(pytest.__file__)))' 2>/dev/null); then
	deps=$tmp/deps
	mkdir -p "$deps"
	for d in pytest _pytest pluggy iniconfig packaging attr attrs py py.py \
		exceptiongroup tomli; do
		[ -e "$site/$d" ] && ln -s "$site/$d" "$deps/$d"
	done
	mkdir -p "$tmp/stub"
	printf '%s\n' 'class BaseExceptionGroup(BaseException):' '    pass' \
		'class ExceptionGroup(BaseExceptionGroup, Exception):' '    pass' \
		>"$tmp/stub/exceptiongroup.py"
fi
find_python() { # 3.X -> the interpreter's path, or nothing
	if [ -n "${ML_PYTHONS:-}" ]; then
		for p in $ML_PYTHONS; do
			v=$("$p" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
			[ "$v" = "$1" ] && { echo "$p"; return; }
		done
		return
	fi
	for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1"; do
		[ -x "$p" ] && found=$p
	done
	if [ -n "${found:-}" ]; then echo "$found"; found=; return; fi
	command -v "python$1" 2>/dev/null
}
for minor in 9 10 11 12 13; do
	v=3.$minor
	py=$(find_python $v)
	if [ -z "$py" ]; then
		skip "CPython $v: not found (PATH, pyenv, ML_PYTHONS)"
		skip "CPython $v: python/tests"
		continue
	fi
	inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
	if [ ! -f "$inc/Python.h" ]; then
		skip "CPython $v ($py): no Python.h in $inc"
		skip "CPython $v: python/tests"
		continue
	fi
	pkg=$tmp/py$v
	mkdir -p "$pkg/memlimits"
	cp "$top_srcdir"/python/memlimits/*.py "$pkg/memlimits/"
	# The package's own build (python/memlimits_build.py, the one build
	# make and pip use), run by this version's interpreter with its
	# compiler and flags, and -Wall -Wextra -Werror.
	env MEMLIMITS_CFLAGS="-I$top_srcdir/include" \
		MEMLIMITS_LIBS="-L$lib -lmemlimits" MEMLIMITS_VERSION=test \
		MEMLIMITS_SRCDIR="$top_srcdir" \
		"$py" "$top_srcdir/python/memlimits_build.py" --werror \
		--inplace "$pkg" >"$tmp/cc$v" 2>&1
	rc=$?
	check $rc "CPython $v ($py): the module compiles with -Wall -Wextra -Werror"
	if [ $rc -ne 0 ]; then
		diag "$tmp/cc$v"
		skip "CPython $v: python/tests (no module)"
		continue
	fi
	# Counting off (a pymalloc laid out otherwise): every runaway below
	# would run its 10**7 strings unstopped; one line says why instead.
	c=$(cd "$tmp" && env PYTHONPATH="$pkg" \
		LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		"$py" -c 'import memlimits; print(memlimits.capabilities()["counting"])' 2>&1)
	if [ "$c" != hooks ]; then
		notok "CPython $v: counting is $c"
		continue
	fi
	if [ -z "$deps" ]; then
		skip "CPython $v: python/tests (no pytest in \$ML_PYTHON)"
		continue
	fi
	pp=$pkg:$deps
	"$py" -c 'import exceptiongroup' 2>/dev/null ||
		[ "$minor" -ge 11 ] || pp=$pp:$tmp/stub
	(cd "$tmp" && env PYTHONPATH="$pp" PYTHONNOUSERSITE=1 \
		LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
		PYTHONDONTWRITEBYTECODE=1 MEMLIMITS_SEED=37 \
		"$py" -X faulthandler -m pytest -q -p no:cacheprovider -p no:warnings -c /dev/null \
		--rootdir="$tmp" "$top_srcdir/python/tests") >"$tmp/out$v" 2>&1
	rc=$?
	check $rc "CPython $v: python/tests pass ($(grep -v '^$' "$tmp/out$v" | tail -n 1))"
	[ $rc -eq 0 ] || tail -n 60 "$tmp/out$v" | awk '{ print "# " $0 }'
done
echo "1..$n"
exit 0
