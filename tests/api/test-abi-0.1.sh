#!/bin/sh
# Binaries built against 0.1 keep working (include/memlimits.h, "How
# ml_limits and ml_outcome grow"; lib/memlimits.map).  abi-0.1-prog was
# compiled with the saved 0.1 header and linked against a stand-in with the
# 0.1 names and no symbol versions (abi-0.1-stub.c), as a 0.1 program is;
# here it runs against the real library, and its unversioned references
# must bind to the MEMLIMITS_0.1 versions, which keep the 0.1 layouts.
: "${top_builddir:?}" "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
prog=$top_builddir/tests/api/abi-0.1-prog
lib=$top_builddir/lib/.libs
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-abi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM

# Like a 0.1 binary: it needs libmemlimits.so.0 and names no version of it.
if readelf -W --dyn-syms "$prog" >"$tmp/syms" 2>&1 &&
	grep -q ' ml_run$' "$tmp/syms" && ! grep -q 'MEMLIMITS' "$tmp/syms" &&
	readelf -d "$prog" | grep -q 'NEEDED.*libmemlimits.so.0'; then
	ok "the program holds unversioned references to libmemlimits.so.0, as a 0.1 binary"
else
	notok "the program holds unversioned references to libmemlimits.so.0, as a 0.1 binary"
	diag "$tmp/syms"
fi

# Its own TAP lines, run against the real library.
LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$prog" >"$tmp/out" 2>&1
status=$?
while IFS= read -r line; do
	case $line in
	"ok "*) ok "0.1 program: ${line#ok * - }" ;;
	"not ok "*) notok "0.1 program: ${line#not ok * - }" ;;
	esac
done <"$tmp/out"
if [ "$status" -eq 0 ] && grep -q '^1\.\.' "$tmp/out"; then
	ok "the 0.1 program ran to its end (status 0)"
else
	notok "the 0.1 program ran to its end (status $status)"
	diag "$tmp/out"
fi

# The loader binds an unversioned reference to a symbol's oldest version
# (the canary above shows it got the 0.1 layout); that version exists.
readelf -W --dyn-syms "$lib/libmemlimits.so.0" >"$tmp/libsyms"
for f in ml_run ml_limit_allocations ml_limit_with_token ml_limit_global_memory; do
	if grep -q " $f@MEMLIMITS_0.1\$" "$tmp/libsyms"; then
		ok "the library keeps $f@MEMLIMITS_0.1"
	else
		notok "the library keeps $f@MEMLIMITS_0.1"
	fi
done
echo "1..$n"
