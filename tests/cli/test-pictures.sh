#!/bin/sh
# Pictures of a run (issue 29): memlimits run --timeline writes the heap
# over time, memlimits plot draws it, memlimits flamegraph draws a
# collapsed-stack profile (ours or one written by hand).  The SVG must be
# valid XML (xmllint, judged by its messages: it exits 0 after "Memory
# allocation failed" with --noout), show the limit (a dashed line labelled
# with its value) and the trip (a marker), name the frames (escaped), stay
# small (frames under 0.1 % merged), and bad input gets one line and
# status 2.  See memlimits(1).
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-pictures.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT MEMLIMITS_FAULT \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED MEMLIMITS_DELIVERY \
	MEMLIMITS_TIMELINE MEMLIMITS_TIMELINE_START
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" || {
	echo "Bail out! $M not built"
	exit 1
}
T="timeout 60"

# valid_svg FILE: well-formed XML by xmllint's messages (not its status),
# or at least an <svg> root and its end when xmllint is missing.
valid_svg() {
	if command -v xmllint >/dev/null 2>&1; then
		xmllint --noout "$1" >"$tmp/xl.out" 2>&1
		! test -s "$tmp/xl.out"
	else
		grep -q '^<svg ' "$1" && tail -n 1 "$1" | grep -q '^</svg>$'
	fi
}

# one_line_2 NAME CMD...: exit status 2 and exactly one line on stderr.
one_line_2() {
	name=$1
	shift
	"$@" >"$tmp/bad.out" 2>"$tmp/bad.err"
	st=$?
	if test "$st" = 2 && test "$(wc -l <"$tmp/bad.err")" = 1 &&
		! test -s "$tmp/bad.out"; then
		ok "$name: status 2, one line: $(cat "$tmp/bad.err")"
	else
		notok "$name: status $st"
		diag "$tmp/bad.err"
	fi
}

py=
if test -n "${PYTHON3:-}" && test -x "$PYTHON3"; then
	py=$("$PYTHON3" -c 'import sys; print(sys.executable)' 2>/dev/null)
fi

# ---- A python workload under a heap limit: timeline and profile ----------
if tap_case python; then
	if test -n "$py" && test -x "$py"; then
		$T "$M" run --heap-limit 200MiB --timeline "$tmp/T" \
			--profile "$tmp/P" --report "$tmp/R" -- "$py" -c \
			'x=[bytearray(1<<20) for _ in range(1000)]' \
			>/dev/null 2>"$tmp/py.err"
		if grep -q '^# heap_limit 209715200$' "$tmp/T" &&
			grep -q '^# start [0-9]*\.[0-9]\{9\}$' "$tmp/T" &&
			grep -q "$(printf '^pid\tseconds\theap_bytes\theld_bytes\tmapped_bytes\tevent$')" "$tmp/T" &&
			grep -q "$(printf '\theap_limit$')" "$tmp/T" &&
			grep -q "$(printf '\texit$')" "$tmp/T"; then
			ok "--timeline: the limit, the start, the header, a heap_limit row, an exit row"
		else
			notok "--timeline: the file lacks what the format says"
			diag "$tmp/T" "$tmp/py.err"
		fi
		# Rows: 6 fields, one pid, seconds rising, at most one per
		# 10 ms but for events and new peaks (a heap above every
		# earlier row's).
		if awk -F'\t' '
			/^#/ || /^pid\t/ { next }
			NF != 6 { bad = "fields " NF; exit }
			$1 !~ /^[0-9]+$/ || $2 !~ /^[0-9]+\.[0-9][0-9][0-9]$/ ||
			$3 !~ /^[0-9]+$/ || $5 !~ /^[0-9]+$/ || $5 + 0 > $3 + 0 { bad = "row " NR; exit }
			$6 == "" && last != "" && $2 - last < 0.0095 && $3 + 0 <= top { bad = "too close at " NR; exit }
			$6 == "" { last = $2 }
			$3 + 0 > top { top = $3 + 0 }
			{ rows++; pids[$1] = 1 }
			END { n = 0; for (p in pids) n++
			      if (bad != "" || rows < 5 || n != 1) { print bad, rows, n; exit 1 } }
		' "$tmp/T" >"$tmp/awk.out"; then
			ok "--timeline: rows of 6 fields (mapped_bytes within heap_bytes), one process, rows 10 ms apart but for peaks"
		else
			notok "--timeline rows: $(cat "$tmp/awk.out")"
			diag "$tmp/T"
		fi
		if grep -q "^pictures: memlimits flamegraph $tmp/P; memlimits plot $tmp/T\$" "$tmp/R"; then
			ok "--report names the commands that draw the pictures"
		else
			notok "--report: no pictures line"
			grep -v '^    ' "$tmp/R" | diag
		fi
		"$M" plot "$tmp/T" 2>"$tmp/plot.err"
		st=$?
		if test "$st" = 0 && test -s "$tmp/T.svg" && valid_svg "$tmp/T.svg"; then
			ok "plot: valid SVG, written to TIMELINE.svg by default"
		else
			notok "plot: status $st"
			diag "$tmp/plot.err" "$tmp/xl.out"
		fi
		# The limit: a dashed line in a group titled with its value.
		if grep -q '<g><title>heap limit 200 MiB (209715200 bytes)</title><line [^>]*stroke-dasharray=' "$tmp/T.svg" &&
			grep -q '>heap limit 200 MiB</text>' "$tmp/T.svg"; then
			ok "plot: the heap limit is a dashed line labelled 200 MiB"
		else
			notok "plot: no dashed heap limit line"
			diag "$tmp/T.svg"
		fi
		if grep -q '<title>pid [0-9]*: the heap limit reached at [0-9.]* s (heap [0-9.]* MiB)</title><circle ' "$tmp/T.svg"; then
			ok "plot: a marker where the heap limit was reached"
		else
			notok "plot: no marker at the trip"
			diag "$tmp/T.svg"
		fi
		"$M" flamegraph "$tmp/P" -o "$tmp/P.svg" 2>"$tmp/fg.err"
		st=$?
		if test "$st" = 0 && valid_svg "$tmp/P.svg" &&
			grep -q '<title>PyByteArray_Resize&#10;[0-9.]* MiB ([0-9]* bytes), [0-9.]* %</title>' "$tmp/P.svg"; then
			ok "flamegraph: valid SVG naming PyByteArray_Resize with its bytes and share"
		else
			notok "flamegraph of the python profile: status $st"
			diag "$tmp/fg.err" "$tmp/xl.out"
			grep -c PyByteArray "$tmp/P" | diag
		fi
		if command -v rsvg-convert >/dev/null 2>&1; then
			if rsvg-convert "$tmp/T.svg" -o "$tmp/T.png" 2>"$tmp/rsvg.err" &&
				rsvg-convert "$tmp/P.svg" -o "$tmp/P.png" 2>>"$tmp/rsvg.err" &&
				test -s "$tmp/T.png" && test -s "$tmp/P.png"; then
				ok "rsvg-convert renders both pictures"
			else
				notok "rsvg-convert failed"
				diag "$tmp/rsvg.err"
			fi
		else
			skip "rsvg-convert not found (package librsvg2-bin)"
		fi
	else
		for i in 1 2 3 4 5 6 7 8; do
			skip "python3 not found"
		done
	fi
fi

# ---- --timeline alone: the meter is on, no limit line --------------------
if tap_case timeline-alone; then
	if test -n "$py" && test -x "$py"; then
		$T "$M" run --timeline "$tmp/A" -- "$py" -c \
			'x=[bytearray(1<<20) for _ in range(100)]' 2>"$tmp/a.err"
		# 100 MiB held at once: a new peak is always written (within
		# 1/256 of it and of the last sample's megabyte).
		max=$(awk -F'\t' '!/^#/ && !/^pid/ && $3 > m { m = $3 } END { print m + 0 }' "$tmp/A")
		if test "$max" -ge 100000000 && ! grep -q '_limit' "$tmp/A"; then
			ok "--timeline alone: the heap is metered (peak $max bytes), no limit"
		else
			notok "--timeline alone: peak '$max'"
			diag "$tmp/A" "$tmp/a.err"
		fi
	else
		skip "python3 not found"
	fi
fi

# ---- Our descriptor: above 9, close-on-exec, opened again when closed ----
if tap_case descriptors; then
	$T "$M" run --timeline "$tmp/F" -- sh -c 'ls -l /proc/self/fd' \
		>"$tmp/fds" 2>"$tmp/fds.err"
	low=$(awk -v f="$tmp/F" '$NF == f && $(NF - 2) + 0 < 10' "$tmp/fds")
	if test -z "$low" && grep -q "^pid" "$tmp/F"; then
		ok "--timeline: no descriptor of ours below 10 in the program"
	else
		notok "--timeline: a low descriptor on the timeline: $low"
		diag "$tmp/fds" "$tmp/fds.err"
	fi
	if test -n "$py" && test -x "$py"; then
		# A daemon closes every descriptor, then allocates.
		$T "$M" run --timeline "$tmp/D" -- "$py" -c '
import os
os.closerange(3, 4096)
x = [bytearray(1 << 20) for _ in range(80)]' 2>"$tmp/d.err"
		max=$(awk -F'\t' '!/^#/ && !/^pid/ && $3 > m { m = $3 } END { print m + 0 }' "$tmp/D")
		if test "$max" -ge 80000000; then
			ok "--timeline: rows go on after the program closed every descriptor (peak $max)"
		else
			notok "--timeline after closerange: peak '$max'"
			diag "$tmp/D" "$tmp/d.err"
		fi
	else
		skip "python3 not found"
	fi
fi

# ---- Two processes: two lines --------------------------------------------
if tap_case two-processes; then
	if test -n "$py" && test -x "$py"; then
		prog='x=[bytearray(1<<20) for _ in range(60)]'
		$T "$M" run --heap-limit 1GiB --timeline "$tmp/T2" -- sh -c \
			"\"$py\" -c '$prog' & \"$py\" -c '$prog'; wait" 2>"$tmp/t2.err"
		"$M" plot "$tmp/T2" -o "$tmp/T2.svg" 2>>"$tmp/t2.err"
		st=$?
		pypids=$(awk -F'\t' '!/^#/ && !/^pid/ && $3 > 50000000 { print $1 }' "$tmp/T2" | sort -u | wc -l)
		lines=$(grep -o '<polyline ' "$tmp/T2.svg" | wc -l)
		if test "$st" = 0 && valid_svg "$tmp/T2.svg" && test "$pypids" = 2 &&
			test "$lines" -ge 2; then
			ok "two python processes: two pids of 50 MB+ in one file, $lines lines drawn"
		else
			notok "two processes: status $st, $pypids big pids, $lines lines"
			diag "$tmp/T2" "$tmp/t2.err"
		fi
	else
		skip "python3 not found"
	fi
fi

# ---- A collapsed file written by hand: names that need escaping ----------
if tap_case escaping; then
	cat >"$tmp/hand" <<'EOF'
main;run;<lambda>;malloc 5000
main;run;operator&;operator new 3000
main;"quoted" 'name';x 2000

main;run;<lambda>;calloc 1000
EOF
	"$M" flamegraph "$tmp/hand" -o - >"$tmp/hand.svg" 2>"$tmp/hand.err"
	st=$?
	if test "$st" = 0 && valid_svg "$tmp/hand.svg" &&
		grep -q '<title>&lt;lambda&gt;&#10;5.86 KiB (6000 bytes), 54.5 %</title>' "$tmp/hand.svg" &&
		grep -q '>operator&amp;</text>' "$tmp/hand.svg" &&
		grep -q '&quot;quoted&quot; &#39;name&#39;' "$tmp/hand.svg" &&
		grep -q '>main</text>' "$tmp/hand.svg"; then
		ok "flamegraph of a hand-written file: <lambda>, operator&, quotes escaped; figures in the titles"
	else
		notok "flamegraph of a hand-written file: status $st"
		diag "$tmp/hand.err" "$tmp/hand.svg"
	fi
fi

# ---- 10 000 stacks: under 500 KB -----------------------------------------
if tap_case size; then
	awk 'BEGIN {
		srand(7)
		for (i = 0; i < 10000; i++) {
			d = 5 + int(rand() * 30); s = "main"
			for (j = 0; j < d; j++) s = s ";fn" int(rand() * 200)
			print s, 1 + int(rand() * 100000)
		}
	}' >"$tmp/big"
	"$M" flamegraph "$tmp/big" 2>"$tmp/big.err"
	st=$?
	size=$(wc -c <"$tmp/big.svg" 2>/dev/null || echo 0)
	if test "$st" = 0 && test "$size" -lt 500000 && valid_svg "$tmp/big.svg" &&
		grep -q 'frames under 0.1 %\]' "$tmp/big.svg"; then
		ok "flamegraph of 10 000 stacks: $size bytes, narrow frames merged"
	else
		notok "flamegraph of 10 000 stacks: status $st, $size bytes"
		diag "$tmp/big.err"
	fi
fi

# ---- Both timeline formats: 0.3's without mapped_bytes, 0.4's with ------
if tap_case formats; then
	printf '# heap_limit 1000\npid\tseconds\theap_bytes\theld_bytes\tevent\n1\t0.1\t10\t\t\n1\t0.2\t900\t\theap_limit\n' >"$tmp/v3"
	printf '# heap_limit 1000\npid\tseconds\theap_bytes\theld_bytes\tmapped_bytes\tevent\n1\t0.1\t10\t\t0\t\n1\t0.2\t900\t\t700\theap_limit\n1\t0.3\t20\t\t0\n' >"$tmp/v4"
	"$M" plot "$tmp/v3" -o "$tmp/v3.svg" 2>"$tmp/v3.err"
	st3=$?
	"$M" plot "$tmp/v4" -o "$tmp/v4.svg" 2>"$tmp/v4.err"
	st4=$?
	if test "$st3" = 0 && valid_svg "$tmp/v3.svg" &&
		! grep -q 'stroke-dasharray="6 3"' "$tmp/v3.svg" &&
		test "$st4" = 0 && valid_svg "$tmp/v4.svg" &&
		grep -q 'stroke-dasharray="6 3"' "$tmp/v4.svg" &&
		grep -q 'dashed: of it mapped' "$tmp/v4.svg"; then
		ok "plot: a 0.3 timeline as before; a 0.4 one with its mapped bytes dashed"
	else
		notok "plot: formats: status $st3 and $st4"
		diag "$tmp/v3.err" "$tmp/v4.err"
	fi
	printf 'pid\tseconds\theap_bytes\theld_bytes\tmapped_bytes\tevent\n1\t0.1\t10\t\tmany\t\n' >"$tmp/badm"
	"$M" plot "$tmp/badm" -o "$tmp/e.svg" 2>"$tmp/badm.err"
	st=$?
	if test "$st" = 2 && grep -q 'mapped_bytes is not a byte count' "$tmp/badm.err"; then
		ok "plot: a mapped_bytes that is not a count is named, status 2"
	else
		notok "plot: bad mapped_bytes: status $st"
		diag "$tmp/badm.err"
	fi
fi

# ---- Bad input: one line, status 2 ---------------------------------------
if tap_case bad-input; then
	one_line_2 "flamegraph: a missing file" "$M" flamegraph "$tmp/nonexistent"
	one_line_2 "plot: a missing file" "$M" plot "$tmp/nonexistent"
	: >"$tmp/empty"
	one_line_2 "flamegraph: an empty profile" "$M" flamegraph "$tmp/empty" -o "$tmp/e.svg"
	one_line_2 "plot: an empty timeline" "$M" plot "$tmp/empty" -o "$tmp/e.svg"
	printf 'a;b 10\na;c ten\n' >"$tmp/badp"
	one_line_2 "flamegraph: a malformed line" "$M" flamegraph "$tmp/badp" -o "$tmp/e.svg"
	if grep -q 'line 2' "$tmp/bad.err" && ! test -e "$tmp/e.svg"; then
		ok "flamegraph: the malformed line is named, nothing written"
	else
		notok "flamegraph: the line is not named, or a file was written"
		diag "$tmp/bad.err"
	fi
	printf '# heap_limit 100\npid\tseconds\theap_bytes\theld_bytes\tevent\n1\t0.1\t10\t\t\n1\tsoon\t10\t\t\n' >"$tmp/badt"
	one_line_2 "plot: a malformed row" "$M" plot "$tmp/badt" -o "$tmp/e.svg"
	if grep -q 'line 4' "$tmp/bad.err"; then
		ok "plot: the malformed row is named (line 4)"
	else
		notok "plot: the row is not named"
		diag "$tmp/bad.err"
	fi
	# A blank and a count: no frame (it was drawn as a stack of none).
	printf 'a;b 10\n 5\n' >"$tmp/noframe"
	one_line_2 "flamegraph: a count with no frame" "$M" flamegraph "$tmp/noframe" -o "$tmp/e.svg"
	if grep -q 'line 2: no frames before the count' "$tmp/bad.err" && ! test -e "$tmp/e.svg"; then
		ok "flamegraph: the line with no frame is named, nothing written"
	else
		notok "flamegraph: the line with no frame is not named, or a file was written"
		diag "$tmp/bad.err"
	fi
	one_line_2 "flamegraph: a directory" "$M" flamegraph "$tmp"
	one_line_2 "plot: no TIMELINE" "$M" plot
	one_line_2 "flamegraph: an unknown option" "$M" flamegraph --zoom "$tmp/hand"
fi
tap_done
