#!/bin/sh
# memlimits run and the memory a program maps itself (issue 34):
#  - under --heap-limit 64MiB a program mapping 1 MiB at a time is refused
#    (ENOMEM) at the limit less the headroom (L/6: 53.3 MiB), within one
#    interval of samples, and the report
#    splits the peak heap into blocks and mapped, names the program as the
#    object that mapped the most and the mapping refused;
#  - with --no-mapped it maps all 256 MiB and the report says mapped
#    memory is not counted;
#  - the timeline's mapped_bytes column and the statistics' mapped_bytes
#    carry the mapped part;
#  - under --tree-heap-limit 64MiB (a shared budget) two processes that
#    map 40 MiB each are refused once together they reach it (less the
#    same headroom);
#  - under --heap-limit 128MiB mappings are refused 21.3 MiB (L/6) before
#    the limit and blocks only at it: a program that maps 64 KiB at a
#    time until refused, then mallocs 2 MiB in 4 KiB blocks (a runtime's
#    bookkeeping on its way out), gets every block; and one that then
#    mallocs 14 MiB in blocks of 4112 bytes (V8's collector's worklists
#    after its mapping was refused, 6 to 14 MiB measured, which V8 never
#    checks: a segfault at L/32) gets every block too;
#  - once a mapping was refused, every retry past the same point is
#    refused too (not only those that carry a sample);
#  - a realloc is checked for the heap after it (the old block replaced):
#    60 MiB grown to 90 passes under 100 MiB, is refused under 80;
#  - a program whose first block is refused, then mallocs a smaller one
#    with no allocation after it (sort's buffer) has a timeline row with
#    that block;
#  - with jemalloc underneath (--allocator), 64 MiB of blocks read 64 MiB
#    with nothing mapped: jemalloc's own mappings are not counted again.
# Probabilities: a 1 MiB mapping carries Poisson(13.1) samples at the
# default interval; one with none over the limit is let through with
# probability 2e-6, and the next is refused: the check allows 4 MiB over.
# mapmalloc and mapv8: the mapping refused is the first sampled past
# 106.7 MiB; the 2 MiB (or 14 MiB) of blocks are refused only if that came
# more than 19 MiB (7 MiB) late: 7 MiB of 64 KiB mappings with no sample
# at mean gap 80000, probability e^-91.  Before the headroom, the blocks
# came at the limit itself; with L/32 (4 MiB) the 14 MiB could not fit.
: "${top_builddir:?}"
P=$top_builddir/tests/cli/test-run-mapped
. "$top_srcdir/tests/cli/run-env.sh"
# under LIMIT ARGS...: the program run with --heap-limit LIMIT, its output
# in $tmp/out, its stderr in $tmp/err, its status in st.
under() {
	lim=$1
	shift
	"$M" run --heap-limit "$lim" -- "$P" "$@" >"$tmp/out" 2>"$tmp/err"
	st=$?
}
# failed WHAT [MORE]: not ok, with the status, the output and the stderr.
failed() {
	notok "$1: status $st, $(cat "$tmp/out")${2:+ $2}"
	diag "$tmp/err"
}

if tap_case limit; then
	mkdir "$tmp/st"
	"$M" run --heap-limit 64MiB --report "$tmp/r.txt" --timeline "$tmp/t.tsv" \
		--stats "$tmp/st" -- "$P" map 256 >"$tmp/out" 2>"$tmp/err"
	st=$?
	read -r what got _ err <"$tmp/out"
	if test "$st" = 0 && test "$what" = map && test "$got" -ge 49 &&
		test "$got" -le 59 && test "$err" = "Cannot allocate memory"; then
		ok "--heap-limit 64MiB: mapping refused with ENOMEM after $got MiB"
	else
		failed "--heap-limit 64MiB and mappings"
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
	# Both hold what they mapped until both are done (a byte each on
	# "ready", then "go" closed): one that exited first would give its
	# memory back, and the other would never be refused.
	mkfifo "$tmp/go" "$tmp/ready"
	"$M" run --tree-heap-limit 64MiB -- sh -c '
		"$1" map 40 hold <"$2/go" 3>"$2/ready" >"$2/a" &
		"$1" map 40 hold <"$2/go" 3>"$2/ready" >"$2/b" &
		exec 4>"$2/go"
		head -c 2 <"$2/ready" >/dev/null
		exec 4>&-
		wait' sh "$P" "$tmp" >/dev/null 2>"$tmp/err"
	st=$?
	read -r _ a _ ea <"$tmp/a"
	read -r _ b _ eb <"$tmp/b"
	if test "$st" = 0 && test -n "$a" && test -n "$b" &&
		test $((a + b)) -ge 47 && test $((a + b)) -le 59 &&
		{ test "$ea" != 0 || test "$eb" != 0; }; then
		ok "--tree-heap-limit 64MiB: two processes mapped $a and $b MiB, then refused"
	else
		notok "--tree-heap-limit and mappings: status $st, '$a $ea' and '$b $eb'"
		diag "$tmp/err"
	fi
fi

if tap_case headroom; then
	under 128MiB mapmalloc 256
	read -r what got _ e1 e2 e3 _ k <"$tmp/out"
	if test "$st" = 0 && test "$what" = mapmalloc && test "$got" -ge 100 &&
		test "$got" -le 107 && test "$e1 $e2 $e3" = "Cannot allocate memory" &&
		test "$k" = 512; then
		ok "--heap-limit 128MiB: mappings refused after $got MiB, then 512 mallocs of 4 KiB got"
	else
		failed "mappings before blocks"
	fi
fi

if tap_case v8; then
	under 128MiB mapv8 256
	read -r what got _ e1 e2 e3 _ k <"$tmp/out"
	want=$(((14 << 20) / 4112))
	if test "$st" = 0 && test "$what" = mapv8 &&
		test "$e1 $e2 $e3" = "Cannot allocate memory" && test "$k" = "$want"; then
		ok "--heap-limit 128MiB: mappings refused after $got MiB, then $k mallocs of 4112 bytes (14 MiB) got"
	else
		failed "V8's worklists after a refused mapping" "(want $want mallocs)"
	fi
fi

if tap_case retry; then
	# Once a mapping was refused, every mapping past the same point is:
	# 200 retries of 64 KiB each got about 90 (those with no sample,
	# e^-0.82 of them) before, and Ruby collected garbage for ever on
	# such luck (docs/mapped.md).  Probability that all 200 had a sample
	# before: 0.56^200, below 1e-50.
	under 64MiB mapretry 256
	read -r what got _ _ k <"$tmp/out"
	if test "$st" = 0 && test "$what" = mapretry && test "$k" = 0 &&
		test "$got" -ge 49 && test "$got" -le 59; then
		ok "--heap-limit 64MiB: refused after $got MiB, then 0 of 200 retries got"
	else
		failed "mappings retried after a refusal"
	fi
fi

if tap_case ahead; then
	# The JVM commits ahead of use (docs/mapped.md): 96 MiB mapped, 1 MiB
	# of it written, under 64 MiB is not over, as the count alone said
	# (it refused the second 48 MiB); once written whole it is, and a
	# mapping is refused.  Each 1 MiB carries a sample but with
	# probability e^-13.1; none of 16 with none: 1e-91.
	under 64MiB ahead 48
	if test "$st" = 0 && test "$(cat "$tmp/out")" = "ahead got then Cannot allocate memory"; then
		ok "--heap-limit 64MiB: 96 MiB committed, 1 MiB written: got; written whole: refused"
	else
		failed "a mapping committed ahead of use"
	fi
	# PHP grows a huge block with mremap: 40 MiB written, grown to 56
	# under 64 MiB: the count with the headroom (66.7 MiB) refused it,
	# what it holds (40 MiB and the headroom) does not; to 72 it is.
	under 64MiB grow 40
	if test "$st" = 0 && test "$(cat "$tmp/out")" = "grow got then Cannot allocate memory"; then
		ok "--heap-limit 64MiB: mremap 40 to 56 MiB got, 56 to 72 refused"
	else
		failed "mremap growth into the headroom"
	fi
fi

if tap_case unseen; then
	# 24 MiB no count sees (mapped by a raw system call) and written,
	# then 1 MiB blocks under 64 MiB: within L/4 of the limit by the
	# count (48 MiB of blocks) the process's resident private memory
	# (72 MiB) is over, and blocks are refused there (47 or 48 got; with
	# a window of L/8, 55); the count alone let 63 MiB of them through.
	# Each block carries a sample but with probability e^-13.1: 2 MiB
	# late with probability 4e-12.
	under 64MiB unseen 24
	read -r what got <"$tmp/out"
	if test "$st" = 0 && test "$what" = unseen && test "$got" -ge 44 &&
		test "$got" -le 50; then
		ok "--heap-limit 64MiB: 24 MiB no count sees, then $got MiB of blocks"
	else
		failed "memory no count sees, near the limit"
	fi
fi

if tap_case realloc; then
	# A block of 60 MiB grown to 90 under a heap limit of 100 MiB: the
	# heap after it is 90 MiB.  The check counted the old block too
	# (150 MiB) and refused it, as it refused git's buffer at 1.5 x its
	# peak (docs/mapped.md).
	under 100MiB regrow 60
	if test "$st" = 0 && grep -q '^regrow got$' "$tmp/out"; then
		ok "--heap-limit 100MiB: realloc of 60 MiB to 90 MiB got (the old block not counted twice)"
	else
		failed "realloc 60 to 90 MiB under 100 MiB"
	fi
	under 80MiB regrow 60
	if test "$st" = 0 && grep -q '^regrow Cannot allocate memory$' "$tmp/out"; then
		ok "--heap-limit 80MiB: realloc of 60 MiB to 90 MiB refused"
	else
		failed "realloc 60 to 90 MiB under 80 MiB"
	fi
fi

if tap_case timeline-refused; then
	# sort's case: its first buffer refused, then one smaller block and
	# no sampled allocation after it.  The block's row is written once
	# the meter counts it (the granted hook); at its sample, before the
	# allocation, the heap had not moved and no row came.
	"$M" run --heap-limit 200MiB --timeline "$tmp/b.tsv" -- "$P" bigmalloc 100 \
		>"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && grep -q '^bigmalloc$' "$tmp/out" &&
		awk -F'\t' '$6 == "heap_limit" { refused = NR }
			refused && NR > refused && $6 == "" && $3 >= 104857600 { ok = 1 }
			END { exit !ok }' "$tmp/b.tsv"; then
		ok "timeline: after a refusal, a row with the 100 MiB block that followed"
	else
		notok "timeline: no row with the block made after the refusal (status $st)"
		diag "$tmp/b.tsv" "$tmp/err"
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
