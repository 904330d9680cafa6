#!/bin/sh
# The seed corpora of the fuzz targets (fuzz/corpus/TARGET), each input
# passed once to its target built without libFuzzer (fuzz/replay.c): a
# target's own checks abort on a wrong result.  The clang build with the
# sanitizers is `make fuzz-replay` (CI); this one runs in every build.
: "${top_builddir:?}" "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-replay.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
for t in parse env cli stats elf plot flamegraph ranges; do
	bin=$top_builddir/fuzz/replay-$t
	corpus=$top_srcdir/fuzz/corpus/$t
	if "$bin" "$corpus" >"$tmp/out" 2>"$tmp/err" </dev/null; then
		ok "fuzz target $t: $(tail -n 1 "$tmp/out") ($corpus)"
	else
		notok "fuzz target $t: status $? on $corpus"
		tail -n 5 "$tmp/err" | diag
	fi
done
echo "1..$n"
