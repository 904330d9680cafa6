#!/bin/sh
# memlimits plot and memlimits flamegraph on hostile input (issue 33):
# each is refused with status 2, one line on stderr naming what is wrong,
# nothing on standard output and no output file, neither the one -o names
# nor the default INPUT.svg.  A stack of 50 000 frames is drawn (it
# overflowed the C stack: SIGSEGV and a partial 7 MB file).  The commands
# run with their output files capped at 64 MiB (ulimit -f): the infinite
# axis of a timeline at 1.78e308 s wrote until the disk filled.  Endless
# input (/dev/zero, a line that never ends) runs with the data size capped
# at 1 GiB too, unless the command is built with AddressSanitizer (whose
# shadow memory needs more): the readers kept every byte until the end of
# a line.  For the ASan run, point top_builddir at an ASan build.
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-hostile.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" || {
	echo "Bail out! $M not built"
	exit 1
}
# A backstop for a hang (the old readers on /dev/zero), not a timing.
T=
if command -v timeout >/dev/null 2>&1; then T="timeout 120"; fi
data_limit="ulimit -d 1048576"
if grep -q __asan_init "$M"; then data_limit=:; fi

# refused NAME WHY CMD INPUT [ARGS...]: memlimits CMD INPUT ARGS, once
# with -o FILE, once writing to stdout (-o -), and, INPUT a file, once
# with the default name (INPUT.svg); INPUT '-' reads what $gen writes.
# Each must exit 2 with one line on stderr that contains WHY, and write
# nothing.
gen=
refused() {
	name=$1 why=$2 cmd=$3 in=$4
	shift 4
	for how in file stdout default; do
		case $how in
		file) out="-o $tmp/out.svg" ;;
		stdout) out="-o -" ;;
		default)
			test "$in" != - || continue
			out=
			;;
		esac
		rm -f -- "$tmp/out.svg" "$in.svg"
		# shellcheck disable=SC2086 # $out: none, or two words
		if test "$in" = -; then
			$gen 2>/dev/null | run "$cmd" "$in" $out "$@"
		else
			run "$cmd" "$in" $out "$@" </dev/null
		fi >"$tmp/stdout" 2>"$tmp/stderr"
		st=$?
		lines=$(wc -l <"$tmp/stderr")
		if test "$st" = 2 && test "$lines" = 1 &&
			grep -q "^memlimits $cmd: .*$why" "$tmp/stderr" &&
			! test -s "$tmp/stdout" && ! test -e "$tmp/out.svg" &&
			! test -e "$in.svg"; then
			ok "$name ($how): status 2, one line: $(cat "$tmp/stderr")"
		else
			notok "$name ($how): status $st, $lines lines on stderr, $(wc -c <"$tmp/stdout") bytes on stdout$(test -e "$tmp/out.svg" && echo ', an output file')$(test -e "$in.svg" && echo ", $in.svg")"
			head -c 2000 "$tmp/stderr" | diag
		fi
	done
	rm -f -- "$tmp/out.svg" "$in.svg"
}

endless() {
	tr '\0' a </dev/zero
}

# run ARGS...: memlimits ARGS with the caps above.
run() {
	(
		ulimit -f 131072
		$data_limit
		exec $T "$M" "$@"
	)
}

head='pid	seconds	heap_bytes	held_bytes	event'

# ---- plot: numbers that overran the subtitle or made the axis infinite --
if tap_case plot-seconds; then
	# 300 digits and an allocation limit off the scale: the subtitle's
	# k += snprintf went past its 256 bytes and the next snprintf wrote
	# beyond it (under ASan: the frame pointer overwritten, SEGV).
	d=$(printf '%0300d' 9 | tr 0 9)
	printf '# alloc_limit 18446744073709551614\n%s\n1\t%s.5\t10\t\theap_limit\n' \
		"$head" "$d" >"$tmp/digits"
	refused "plot: a 300-digit seconds field" "line 3: the seconds are beyond" \
		plot "$tmp/digits"
	# 1.78e308 s: tmax * 1.02 is infinite, and so was the x axis' loop.
	printf '%s\n1\t178%0306d\t10\t\t\n' "$head" 0 >"$tmp/huge"
	refused "plot: seconds of 1.78e308" "line 2: the seconds are beyond" \
		plot "$tmp/huge"
fi

# ---- both: endless input, NUL bytes, lines without end -------------------
if tap_case endless; then
	for cmd in plot flamegraph; do
		refused "$cmd: /dev/zero" "line 1: a NUL byte" "$cmd" /dev/zero
		# 8 MiB without a line break: the reader stops at 1 MiB.
		head -c 8388608 /dev/zero | tr '\0' a >"$tmp/long"
		refused "$cmd: an 8 MiB line" "line 1: longer than 1048576 bytes" \
			"$cmd" "$tmp/long"
		rm -f "$tmp/long"
		# A line that never ends, from a pipe (whose writer then
		# gets SIGPIPE).
		gen=endless
		refused "$cmd: an endless line on stdin" \
			"stdin: line 1: longer than 1048576 bytes" "$cmd" -
	done
fi

# ---- flamegraph: a stack of 50 000 frames is drawn whole -----------------
if tap_case deep; then
	awk 'BEGIN { s = "f0"; for (i = 1; i < 50000; i++) s = s ";f" i; print s, 100 }' \
		>"$tmp/deep"
	run flamegraph "$tmp/deep" -o "$tmp/deep.svg" >"$tmp/stdout" 2>"$tmp/stderr"
	st=$?
	# The background, the root ("all") and 50 000 frames; the end.
	rects=$(grep -o '<rect ' "$tmp/deep.svg" 2>/dev/null | wc -l)
	if test "$st" = 0 && ! test -s "$tmp/stderr" && test "$rects" = 50002 &&
		test "$(tail -c 7 "$tmp/deep.svg")" = '</svg>' &&
		grep -q '<title>f49999&#10;100 B (100 bytes), 100.0 %</title>' "$tmp/deep.svg"; then
		ok "flamegraph: a stack of 50 000 frames, drawn to its last frame ($rects rectangles)"
	else
		notok "flamegraph of 50 000 frames: status $st, ${rects:-no} rectangles"
		head -c 2000 "$tmp/stderr" | diag
	fi
	if command -v xmllint >/dev/null 2>&1; then
		xmllint --noout --huge "$tmp/deep.svg" >"$tmp/xl.out" 2>&1
		if ! test -s "$tmp/xl.out"; then
			ok "flamegraph: the 50 000 frames are well-formed XML"
		else
			notok "flamegraph: xmllint on the 50 000 frames"
			head -n 5 "$tmp/xl.out" | diag
		fi
	else
		skip "xmllint not found"
	fi
	rm -f "$tmp/deep" "$tmp/deep.svg"
fi

# ---- a write that fails midway leaves no file ----------------------------
if tap_case partial-write; then
	awk 'BEGIN { for (i = 0; i < 40; i++) print "main;fn" i, 10 }' >"$tmp/small"
	# 2 KiB at most (512-byte blocks in POSIX sh, 1 KiB in bash: the
	# picture, about 9 KB, is larger either way); SIGXFSZ ignored, so
	# write fails with EFBIG.
	(
		ulimit -f 4
		trap '' XFSZ
		exec "$M" flamegraph "$tmp/small" -o "$tmp/small.svg"
	) >"$tmp/stdout" 2>"$tmp/stderr"
	st=$?
	if test "$st" = 2 && test "$(wc -l <"$tmp/stderr")" = 1 &&
		grep -q "cannot write '$tmp/small.svg': File too large" "$tmp/stderr" &&
		! test -e "$tmp/small.svg"; then
		ok "flamegraph: a write that fails midway: status 2, one line, no file left"
	else
		notok "flamegraph over the file size limit: status $st$(test -e "$tmp/small.svg" && echo ", $(wc -c <"$tmp/small.svg") bytes left in the file")"
		diag "$tmp/stderr"
	fi
fi
tap_done
