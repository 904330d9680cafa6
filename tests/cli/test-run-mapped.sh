#!/bin/sh
# memlimits run and the memory a program maps itself (issue 34):
#  - under --heap-limit 64MiB a program mapping 1 MiB at a time is refused
#    (ENOMEM) at the limit, within one interval of samples, and the report
#    splits the peak heap into blocks and mapped, names the program as the
#    object that mapped the most and the mapping refused;
#  - with --no-mapped it maps all 256 MiB and the report says mapped
#    memory is not counted;
#  - the timeline's mapped_bytes column and the statistics' mapped_bytes
#    carry the mapped part;
#  - under --tree-heap-limit 64MiB (a shared budget) two processes that
#    map 40 MiB each are refused once together they reach it;
#  - with jemalloc underneath (--allocator), 64 MiB of blocks read 64 MiB
#    with nothing mapped: jemalloc's own mappings are not counted again.
# Probabilities: a 1 MiB mapping carries Poisson(13.1) samples at the
# default interval; one with none over the limit is let through with
# probability 2e-6, and the next is refused: the check allows 4 MiB over.
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
P=$top_builddir/tests/cli/test-run-mapped
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-mapped.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT MEMLIMITS_MAPPED \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED MEMLIMITS_HELD_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" && test -x "$P" || {
	echo "Bail out! $M or $P not built"
	exit 1
}

if tap_case limit; then
	mkdir "$tmp/st"
	"$M" run --heap-limit 64MiB --report "$tmp/r.txt" --timeline "$tmp/t.tsv" \
		--stats "$tmp/st" -- "$P" map 256 >"$tmp/out" 2>"$tmp/err"
	st=$?
	read -r what got _ err <"$tmp/out"
	if test "$st" = 0 && test "$what" = map && test "$got" -ge 58 &&
		test "$got" -le 68 && test "$err" = "Cannot allocate memory"; then
		ok "--heap-limit 64MiB: mapping refused with ENOMEM after $got MiB"
	else
		notok "--heap-limit 64MiB and mappings: status $st, $(cat "$tmp/out")"
		diag "$tmp/err"
	fi
	if grep -q '^  peak heap: [0-9]* bytes (.*): blocks .*, mapped [0-9.]* MiB$' "$tmp/r.txt" &&
		grep -q "^  mapped most by .*test-run-mapped (the program): [0-9.]* MiB in [0-9]* mappings, the largest 1.0 MiB$" "$tmp/r.txt" &&
		grep -q '^  refused: mmap of 1048576 bytes (1.0 MiB) from .*test-run-mapped (the program)' "$tmp/r.txt"; then
		ok "the report: the peak split, the program named, the mapping refused"
	else
		notok "the report lacks the mapped lines"
		diag "$tmp/r.txt"
	fi
	if grep -q "$(printf '^pid\tseconds\theap_bytes\theld_bytes\tmapped_bytes\tevent$')" "$tmp/t.tsv" &&
		awk -F'\t' '!/^#/ && !/^pid/ && $5 > 50000000 && $5 <= $3 { ok = 1 } END { exit !ok }' "$tmp/t.tsv"; then
		ok "the timeline: mapped_bytes, within heap_bytes, over 50 MB"
	else
		notok "the timeline has no mapped bytes"
		diag "$tmp/t.tsv"
	fi
	if grep -q '"version": 3' "$tmp"/st/memlimits.*.json &&
		grep -q '"mapped_bytes": [1-9][0-9]*' "$tmp"/st/memlimits.*.json &&
		"$M" stats "$tmp/st" --format prometheus | grep -q '^memlimits_mapped_bytes [1-9]'; then
		ok "the statistics: version 3, mapped_bytes; memlimits stats reads it"
	else
		notok "statistics without mapped_bytes"
		diag "$tmp"/st/memlimits.*.json
	fi
fi

if tap_case no-mapped; then
	"$M" run --no-mapped --heap-limit 64MiB --report "$tmp/n.txt" -- "$P" map 256 \
		>"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && grep -q '^map 256 errno 0$' "$tmp/out" &&
		grep -q '^mapped memory: not counted' "$tmp/n.txt"; then
		ok "--no-mapped: 256 MiB mapped under a 64 MiB heap limit, said in the report"
	else
		notok "--no-mapped: status $st, $(cat "$tmp/out")"
		diag "$tmp/err" "$tmp/n.txt"
	fi
	"$M" run --no-mapped --verbose -- /bin/true 2>"$tmp/v"
	if grep -q '^memlimits run: mapped memory = not counted (--no-mapped)$' "$tmp/v"; then
		ok "--verbose says --no-mapped"
	else
		notok "--verbose: no mapped memory line"
		diag "$tmp/v"
	fi
fi

if tap_case tree; then
	"$M" run --tree-heap-limit 64MiB -- sh -c \
		'"$1" map 40 >"$2/a" & "$1" map 40 >"$2/b"; wait' sh "$P" "$tmp" \
		>/dev/null 2>"$tmp/err"
	st=$?
	read -r _ a _ ea <"$tmp/a"
	read -r _ b _ eb <"$tmp/b"
	if test "$st" = 0 && test -n "$a" && test -n "$b" &&
		test $((a + b)) -ge 56 && test $((a + b)) -le 68 &&
		{ test "$ea" != 0 || test "$eb" != 0; }; then
		ok "--tree-heap-limit 64MiB: two processes mapped $a and $b MiB, then refused"
	else
		notok "--tree-heap-limit and mappings: status $st, '$a $ea' and '$b $eb'"
		diag "$tmp/err"
	fi
fi

if tap_case jemalloc; then
	lib=$(/sbin/ldconfig -p 2>/dev/null | sed -n 's/^[[:space:]]*libjemalloc.so.2 (.*) => //p' | head -1)
	if test -z "$lib"; then
		skip "libjemalloc.so.2 is not installed (scripts/install-deps)"
	else
		"$M" run --allocator jemalloc --heap-limit 1GiB --report "$tmp/j.txt" \
			-- "$P" malloc 64 >"$tmp/out" 2>"$tmp/err"
		st=$?
		if test "$st" = 0 && grep -q '^malloc 64 errno 0$' "$tmp/out" &&
			grep -q '^  peak heap: [0-9]* bytes (6[4-9]\.[0-9] MiB): blocks 6[4-9]\.[0-9] MiB, mapped 0 bytes$' "$tmp/j.txt"; then
			ok "jemalloc underneath: 64 MiB of blocks read as blocks, nothing mapped"
		else
			notok "jemalloc: status $st"
			diag "$tmp/err" "$tmp/j.txt"
		fi
	fi
fi
tap_done
