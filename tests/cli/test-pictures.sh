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
		if grep -q "^  memlimits plot $tmp/T\$" "$tmp/R" &&
			grep -q "^  memlimits flamegraph $tmp/P.stop\$" "$tmp/R" &&
			grep -q "^  memlimits flamegraph $tmp/P.peak\$" "$tmp/R" &&
			grep -q "^  memlimits flamegraph $tmp/P\$" "$tmp/R"; then
			ok "--report names the commands that draw each picture (timeline, held at the stop and at the peak, allocated)"
		else
			notok "--report: the pictures' commands are not all named"
			grep -v '^    ' "$tmp/R" | diag
		fi
		# Held at the stop (issue 36): within 10 % of the 200 MiB
		# limit, most of it under PyByteArray_Resize, titled with the
		# program and what it is.
		if awk '
			/^# memlimits held at the stop$/ { head++ }
			/^# heap_limit 209715200$/ { lim++ }
			/^#/ { next }
			{ n = $NF + 0; t += n; if ($0 ~ /;PyByteArray_Resize;/) b += n; if (n > big) { big = n; bigline = $0 } }
			END { if (head != 1 || lim != 1 || t < 0.9 * 209715200 || t > 1.1 * 209715200 ||
			          b < 0.9 * t || bigline !~ /;PyByteArray_Resize;/) { print head, lim, t, b; exit 1 }
			      print t }' "$tmp/P.stop" >"$tmp/stop.out"; then
			ok "--profile: P.stop holds $(cat "$tmp/stop.out") bytes (200 MiB +- 10 %), its widest stack through PyByteArray_Resize"
		else
			notok "--profile: P.stop: $(cat "$tmp/stop.out" 2>/dev/null)"
			head -n 8 "$tmp/P.stop" 2>&1 | diag
		fi
		"$M" flamegraph --held "$tmp/P" 2>"$tmp/held.err"
		st=$?
		if test "$st" = 0 && valid_svg "$tmp/P.stop.svg" &&
			grep -q '<title>python3[.0-9]* (pid [0-9]*): held at the stop, [0-9.]* MiB of the 200 MiB heap limit</title>' "$tmp/P.stop.svg"; then
			ok "flamegraph --held: P.stop drawn, titled with the program and 'held at the stop, ... of the 200 MiB heap limit'"
		else
			notok "flamegraph --held: status $st"
			grep -o '<title>[^<]*</title>' "$tmp/P.stop.svg" 2>&1 | head -n 1 | diag
			diag "$tmp/held.err"
		fi
		# At the peak: within 1/32 (the snapshots' margin) and a
		# megabyte (the allocation being sampled) of the timeline's
		# largest heap, which includes the allocator's own overhead.
		peak=$(awk -F'\t' '!/^#/ && !/^pid/ && $3 > m { m = $3 } END { print m + 0 }' "$tmp/T")
		if awk -v peak="$peak" '
			/^# memlimits held at the peak$/ { head++ }
			/^#/ { next }
			{ t += $NF }
			END { if (head != 1 || t < peak * 0.85 || t > peak * 1.15) { print head, t; exit 1 } print t }' \
			"$tmp/P.peak" >"$tmp/peak.out"; then
			ok "--profile: P.peak holds $(cat "$tmp/peak.out") bytes, within 15 % of the timeline's peak $peak"
		else
			notok "--profile: P.peak: $(cat "$tmp/peak.out" 2>/dev/null), timeline peak $peak"
			head -n 6 "$tmp/P.peak" 2>&1 | diag
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
		# The allocation picture says what it shows (issue 36), not
		# "Flame graph: P": P has no comments (other tools read it as
		# it is), the held profile beside it makes it the run's; a
		# shim (pyenv's bash) is another program of the run.  A copy
		# with no held profile beside it is any tool's profile.
		cp "$tmp/P" "$tmp/Pcopy"
		"$M" flamegraph "$tmp/Pcopy" -o "$tmp/Pcopy.svg" 2>>"$tmp/fg.err"
		if grep -q '<title>python3[.0-9]*\( and [0-9]* other programs\{0,1\}\)\{0,1\}: allocated over the whole run, [0-9.]* MiB in all</title>' "$tmp/P.svg" &&
			! grep -q '^#' "$tmp/P" &&
			grep -q "<title>Flame graph: $tmp/Pcopy</title>" "$tmp/Pcopy.svg"; then
			ok "flamegraph of P titled 'python3...: allocated over the whole run, ... MiB in all'; a copy alone 'Flame graph: FILE'"
		else
			notok "flamegraph of P: its title does not say what it shows"
			grep -h -o '<title>[^<]*</title>' "$tmp/P.svg" "$tmp/Pcopy.svg" 2>&1 | sed -n '1p;/Flame/p' | diag
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
		for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
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

# ---- No limit reached: the pictures' commands on stderr all the same ----
if tap_case no-limit-note; then
	if test -n "$py" && test -x "$py"; then
		# 100 MiB held, freed, then 1.25 MiB: the peak's picture is
		# of the 100 MiB (within its 1/32 margin and a megabyte).
		$T "$M" run --timeline "$tmp/N" --profile "$tmp/NP" -- "$py" -c \
			'x=[bytearray(1<<20) for _ in range(100)]
del x
y=[bytearray(1<<16) for _ in range(20)]' 2>"$tmp/n.err"
		if grep -q '^memlimits: no limit reached; pictures' "$tmp/n.err" &&
			grep -q "^  memlimits plot $tmp/N\$" "$tmp/n.err" &&
			grep -q "^  memlimits flamegraph $tmp/NP.peak\$" "$tmp/n.err" &&
			grep -q "^  memlimits flamegraph $tmp/NP\$" "$tmp/n.err" &&
			! grep -q 'NP.stop' "$tmp/n.err" && ! test -e "$tmp/NP.stop"; then
			ok "no limit reached: the commands of the three pictures on stderr, no .stop"
		else
			notok "no limit reached: no note of the pictures"
			diag "$tmp/n.err"
		fi
		if awk '/^#/ { next } { t += $NF } END { print t; if (t < 0.9 * 104857600 || t > 1.1 * 104857600) exit 1 }' \
			"$tmp/NP.peak" >"$tmp/np.out" 2>&1; then
			ok "P.peak: $(cat "$tmp/np.out") bytes, the 100 MiB the program held before it freed them"
		else
			notok "P.peak: $(cat "$tmp/np.out"), not the 100 MiB peak"
		fi
	else
		skip "python3 not found"
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

# ---- Steps, not diagonals ------------------------------------------------
if tap_case steps; then
	# 0 B at 0 s, 10 MiB at 1 s: the line goes across at 0 B to 1 s, then
	# up (a diagonal said the heap grew all along).
	printf 'pid\tseconds\theap_bytes\theld_bytes\tevent\n7\t0.000\t0\t\t\n7\t1.000\t10485760\t\t\n' >"$tmp/steps"
	"$M" plot "$tmp/steps" 2>"$tmp/steps.err"
	pts=$(grep -o '<polyline points="[^"]*"' "$tmp/steps.svg" 2>/dev/null | head -n 1 | sed 's/.*points="//; s/"$//')
	if echo "$pts" | awk '{ if (NF != 3) exit 1; split($1, a, ","); split($2, b, ","); split($3, c, ",")
			if (b[1] != c[1] || b[2] != a[2] || c[2] == b[2]) exit 1 }'; then
		ok "plot: from one row to the next, across then up ($pts)"
	else
		notok "plot: not a step: points '$pts'"
		diag "$tmp/steps.err"
	fi
fi

# ---- 40 processes, named: a legend inside the picture --------------------
if tap_case forty-processes; then
	# A build's processes: make, then gcc, cc1 and as by turns, cc1
	# the largest; make's pid first, the program it ran last named.
	awk 'BEGIN {
		print "# memlimits timeline"; print "# program /usr/bin/make"
		print "# start 1732531200.000000000"
		print "pid\tseconds\theap_bytes\theld_bytes\tevent"
		print "# process 1000 /usr/bin/make"
		printf "1000\t0.000\t100000\t\t\n"
		for (i = 1; i < 40; i++) {
			p = 1000 + i; t = i * 0.1
			name = i % 3 == 1 ? "/usr/bin/gcc" : i % 3 == 2 ? "/usr/lib/gcc/x86_64-linux-gnu/12/cc1" : "/usr/bin/as"
			heap = i % 3 == 2 ? 20000000 + i * 1000000 : 200000 + i * 1000
			print "# process " p " " name
			printf "%d\t%.3f\t%d\t\t\n%d\t%.3f\t%d\t\t\n%d\t%.3f\t%d\t\texit\n", p, t, 1000, p, t + 0.05, heap, p, t + 0.09, heap
		}
		printf "1000\t4.100\t100000\t\texit\n"
	}' >"$tmp/forty"
	"$M" plot "$tmp/forty" -o "$tmp/forty.svg" 2>"$tmp/forty.err"
	st=$?
	if test "$st" = 0 && valid_svg "$tmp/forty.svg" &&
		grep -q '<title>Heap over time: make</title>' "$tmp/forty.svg" &&
		grep -q '>cc1 1038</text>' "$tmp/forty.svg" &&
		grep -q '<g><title>as 1003</title>' "$tmp/forty.svg" &&
		grep -q '>32 more processes (grey), peaks up to [0-9.]* MiB</text>' "$tmp/forty.svg" &&
		test "$(grep -c '<polyline ' "$tmp/forty.svg")" = 40; then
		ok "plot of 40 processes: 40 lines, named 'cc1 1038', the 8 largest in the legend and 32 summed up, titled by make"
	else
		notok "plot of 40 processes: status $st"
		diag "$tmp/forty.err"
		grep -o '<text[^>]*>[^<]*</text>' "$tmp/forty.svg" | tail -n 12 | diag
	fi
	# The title: what the first pid ran last (a pyenv shim is bash, and
	# execs python3.11 in its pid) ...
	printf '# program /usr/bin/bash
pid	seconds	heap_bytes	held_bytes	event
# process 5 /usr/bin/bash
5	0.000	100		
# process 6 /usr/bin/bash
6	0.010	100		
# process 5 /opt/py/bin/python3.11
5	0.500	9000000		
' >"$tmp/shim"
	# ... and a shell that forks its program: the largest peak's.
	printf '# program /usr/bin/dash
pid	seconds	heap_bytes	held_bytes	event
# process 5 /usr/bin/dash
5	0.000	100		
# process 6 /usr/bin/ruby
6	0.010	9000000		
# process 7 /usr/bin/ls
7	0.010	9000		
' >"$tmp/fork"
	# An old timeline (no process lines): "pid N", the program line.
	printf '# program /usr/bin/old
pid	seconds	heap_bytes	held_bytes	event
5	0.000	100		
5	0.500	9000000		
' >"$tmp/old"
	"$M" plot "$tmp/shim" 2>"$tmp/t.err" && "$M" plot "$tmp/fork" 2>>"$tmp/t.err" &&
		"$M" plot "$tmp/old" 2>>"$tmp/t.err"
	st=$?
	if test "$st" = 0 && grep -q '<title>Heap over time: python3.11</title>' "$tmp/shim.svg" &&
		grep -q '>python3.11 5</text>' "$tmp/shim.svg" &&
		grep -q '<title>Heap over time: ruby</title>' "$tmp/fork.svg" &&
		grep -q '<title>Heap over time: old</title>' "$tmp/old.svg" &&
		grep -q '>pid 5</text>' "$tmp/old.svg"; then
		ok "plot's title: the program a shim execs, the largest peak behind a shell; old timelines drawn with pid labels"
	else
		notok "plot's titles: status $st"
		diag "$tmp/t.err"
		grep -h -o '<title>Heap[^<]*</title>' "$tmp/shim.svg" "$tmp/fork.svg" "$tmp/old.svg" | diag
	fi
	printf '# process x /usr/bin/a
' >"$tmp/badproc"
	one_line_2 "plot: a process line without a pid" "$M" plot "$tmp/badproc" -o "$tmp/e.svg"
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
# ---- Every picture made above: well-formed, every text inside -----------
if tap_case all-inside; then
	ls "$tmp"/*.svg >"$tmp/svgs" 2>/dev/null
	nsvg=$(wc -l <"$tmp/svgs")
	bad=
	while read -r f; do
		valid_svg "$f" || { bad="$bad $f"; cat "$tmp/xl.out"; }
	done <"$tmp/svgs" >"$tmp/xl.all"
	if test "$nsvg" -gt 0 && test -z "$bad"; then
		ok "xmllint: no message on any of the $nsvg pictures"
	else
		notok "xmllint: $nsvg pictures, messages on:$bad"
		diag "$tmp/xl.all"
	fi
	if test -z "${PYTHON3:-}" || ! test -x "$PYTHON3"; then
		skip "python3 not found: no check of the texts' places"
	elif test "$nsvg" -gt 0 &&
		xargs "$PYTHON3" "$top_srcdir/tests/cli/svg-check.py" <"$tmp/svgs" >"$tmp/inside.out" 2>&1; then
		ok "every text of the $nsvg pictures lies inside its viewBox"
	else
		notok "texts outside the picture ($nsvg pictures)"
		diag "$tmp/inside.out"
	fi
fi
tap_done
