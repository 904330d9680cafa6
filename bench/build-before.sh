#!/bin/sh
# Builds the library at the "before" commit of `make bench` (issue 26:
# every row is measured on that library and on this tree's in one run) and
# prints the path of its libmemlimits.so.0 on stdout; prints nothing (and
# one line on stderr saying why) when it cannot: a source tree without git
# history (a dist tarball), a commit git does not have, a failed build.
#
# The source comes from `git archive COMMIT` (the work tree is not
# touched), is configured with the same compiler and flags as this build,
# and only lib/libmemlimits.la is made.  The result is kept in
# BUILDDIR/bench/before-COMMIT and reused by later runs: the key is the
# commit, so moving BENCH_BEFORE to another commit builds afresh.
#
# Environment: SRCDIR (top of the source tree), BUILDDIR (top of the build
# tree), COMMIT, CC, CFLAGS, CPPFLAGS, LDFLAGS (as configure got them).
set -eu
: "${SRCDIR:?}" "${BUILDDIR:?}" "${COMMIT:?}"
skip() {
	echo "bench: before column skipped: $*" >&2
	exit 0
}
if ! git -C "$SRCDIR" rev-parse --git-dir >/dev/null 2>&1; then
	skip "$SRCDIR has no git history (a dist tarball?) to build $COMMIT from"
fi
full=$(git -C "$SRCDIR" rev-parse --verify -q "$COMMIT^{commit}") ||
	skip "git does not know commit $COMMIT"
dir=$BUILDDIR/bench/before-$(echo "$full" | cut -c1-12)
so=$dir/build/lib/.libs/libmemlimits.so.0
if [ -r "$so" ] && [ -r "$dir/stamp" ]; then
	echo "$so"
	exit 0
fi
echo "bench: building the library at $COMMIT in $dir (once; kept)" >&2
rm -rf "$dir"
mkdir -p "$dir/src" "$dir/build"
log=$dir/build.log
if ! {
	git -C "$SRCDIR" archive "$full" | tar -x -C "$dir/src" &&
		(cd "$dir/src" && ./autogen.sh) &&
		(cd "$dir/build" && "$dir/src/configure" CC="${CC-cc}" \
		    CFLAGS="${CFLAGS-}" CPPFLAGS="${CPPFLAGS-}" \
		    LDFLAGS="${LDFLAGS-}") &&
		make -C "$dir/build" -j2 lib/libmemlimits.la
} >"$log" 2>&1; then
	tail -20 "$log" >&2
	skip "the build at $COMMIT failed (log: $log)"
fi
date >"$dir/stamp"
echo "$so"
