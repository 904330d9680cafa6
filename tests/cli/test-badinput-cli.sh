#!/bin/sh
# memlimits with bad command lines: malformed options, overflowing sizes,
# negative numbers, empty strings, missing values, in every subcommand.
# Each must be refused with exactly one line on stderr, nothing on stdout,
# exit status 2, and nothing run.  (test-cli-bounds.sh and test-run.sh cover
# the common cases; these are the rest.)
: "${top_builddir:?}"
M=$top_builddir/tools/memlimits
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-badcli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" || {
	echo "Bail out! $M not built"
	exit 1
}
ran="touch $tmp/ran"
TO=
if command -v timeout >/dev/null 2>&1; then TO="timeout 30"; fi

# bad DESCRIPTION ARGS...: memlimits ARGS must refuse.
bad() {
	what=$1
	shift
	rm -f "$tmp/ran"
	# A timeout: a hang (a FIFO opened for reading) is a failure.
	$TO "$M" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	st=$?
	lines=$(wc -l <"$tmp/err")
	if test "$st" = 2 && test "$lines" = 1 && ! test -s "$tmp/out" &&
		! test -e "$tmp/ran" && grep -q '^memlimits' "$tmp/err"; then
		ok "$what: exit 2, one line: $(cat "$tmp/err")"
	else
		notok "$what: status $st, $lines lines on stderr"
		sed 's/^/# /' "$tmp/err" "$tmp/out"
	fi
}

# ---- top level ---------------------------------------------------------
bad "empty command" ''
bad "a lone --" --
bad "a lone -" -
bad "command in capitals" RUN
bad "--version with a value" --version=1

# ---- memlimits run -------------------------------------------------------
for opt in --alloc-limit --heap-limit --interval; do
	bad "run $opt 99999999999999999999G" run "$opt" 99999999999999999999G -- sh -c "$ran"
	bad "run $opt 17179869184G (2^64 exactly)" run "$opt" 17179869184G -- sh -c "$ran"
	bad "run $opt 16777216T (2^64)" run "$opt" 16777216T -- sh -c "$ran"
	bad "run $opt -1" run "$opt" -1 -- sh -c "$ran"
	bad "run $opt -0" run "$opt" -0 -- sh -c "$ran"
	bad "run $opt +5" run "$opt" +5 -- sh -c "$ran"
	bad "run $opt=''" run "$opt=" -- sh -c "$ran"
	bad "run $opt 1.M" run "$opt" 1.M -- sh -c "$ran"
	bad "run $opt .5M" run "$opt" .5M -- sh -c "$ran"
	bad "run $opt 5MM" run "$opt" 5MM -- sh -c "$ran"
	bad "run $opt '5M ' (trailing blank)" run "$opt" '5M ' -- sh -c "$ran"
	bad "run $opt 0x10" run "$opt" 0x10 -- sh -c "$ran"
	bad "run $opt 1e6" run "$opt" 1e6 -- sh -c "$ran"
	bad "run $opt without a value" run "$opt"
done
bad "run --interval 0KiB" run --interval 0KiB -- sh -c "$ran"
# 0 is no limit nowhere (issue 41): every limit option refuses it, as its
# variable does; non-ASCII digits are not digits.
for o in --alloc-limit --heap-limit --held-limit --tree-heap-limit; do
	bad "run $o 0" run $o 0 -- sh -c "$ran"
	bad "run $o 0.1 (0 bytes)" run $o 0.1 -- sh -c "$ran"
	bad "run $o with Arabic-Indic digits" run $o "$(printf '\331\243\331\244')" -- sh -c "$ran"
	bad "run $o with fullwidth digits" run $o "$(printf '\357\274\223\357\274\224')" -- sh -c "$ran"
done
bad "bounds --limit 0" bounds --limit 0
bad "bounds --limit with Arabic-Indic digits" bounds --limit "$(printf '\331\243\331\244')"
bad "run --interval 0.0001 (0 bytes)" run --interval 0.0001 -- sh -c "$ran"
bad "run --seed 18446744073709551616 (2^64)" run --seed 18446744073709551616 -- sh -c "$ran"
bad "run --seed 0x10000000000000000" run --seed 0x10000000000000000 -- sh -c "$ran"
bad "run --seed ''" run --seed '' -- sh -c "$ran"
bad "run --seed 0x" run --seed 0x -- sh -c "$ran"
bad "run --seed 12abc" run --seed 12abc -- sh -c "$ran"
bad "run --seed without a value" run --seed
bad "run --on-limit ''" run --on-limit '' -- sh -c "$ran"
bad "run --on-limit FAIL (case)" run --on-limit FAIL -- sh -c "$ran"
bad "run --on-limit without a value" run --on-limit
bad "run --profile ''" run --profile '' -- sh -c "$ran"
bad "run --stats ''" run --stats '' -- sh -c "$ran"
bad "run --report without a value" run --report
bad "run unknown short option" run -x -- sh -c "$ran"
bad "run ambiguous abbreviation --s (--seed, --stats)" run --s 1 -- sh -c "$ran"
bad "run empty program name" run -- ''
bad "run a lone empty argument" run ''

# ---- memlimits bounds ----------------------------------------------------
for t in 0 1 1.0 -0.5 2 '' nan inf 1e 1e- 0.5x . 1e400 1e-99999999999; do
	bad "bounds --target '$t'" bounds --limit 1M --target "$t"
done
bad "bounds --target=" bounds --limit 1M --target=
bad "bounds 33 targets" bounds --limit 1M $(i=0; while test $i -lt 33; do printf -- '--target 0.5 '; i=$((i + 1)); done)
for c in 0 -1 100001 '' 18446744073709551616 1.5 0x; do
	bad "bounds --curve '$c'" bounds --limit 1M --curve "$c"
done
bad "bounds --curve with --safe" bounds --safe 1M --target 1e-9 --curve 10
bad "bounds --format ''" bounds --limit 1M --format ''
bad "bounds --format TSV (case)" bounds --limit 1M --format TSV
bad "bounds --format without a value" bounds --limit 1M --format
bad "bounds --interval 99999999999999999999G" bounds --interval 99999999999999999999G --limit 1M
bad "bounds --interval -1" bounds --interval -1 --limit 1M
bad "bounds --interval ''" bounds --interval '' --limit 1M
bad "bounds --safe -1" bounds --safe -1 --target 1e-9
bad "bounds --safe ''" bounds --safe '' --target 1e-9
bad "bounds --safe 99999999999999999999G" bounds --safe 99999999999999999999G --target 1e-9
bad "bounds --limit twice" bounds --limit 1M --limit 2M
bad "bounds --safe twice" bounds --safe 1M --safe 2M --target 1e-9
bad "bounds stray argument" bounds --limit 1M extra

# ---- memlimits stats -----------------------------------------------------
mkdir "$tmp/empty"
bad "stats without a directory" stats
bad "stats with an unknown option" stats --bogus
bad "stats with two directories" stats "$tmp/empty" "$tmp/empty"
bad "stats on a missing directory" stats "$tmp/no/such"
bad "stats on an empty directory" stats "$tmp/empty"
bad "stats on ''" stats ''
bad "stats on a file" stats "$M"
bad "stats -- without a directory" stats --
mkdir "$tmp/big" && head -c 1100000 /dev/zero | tr '\0' ' ' >"$tmp/big/memlimits.1.json"
bad "stats on a file over 1 MiB" stats "$tmp/big"
mkdir "$tmp/deep" && {
	i=0
	while test $i -lt 40; do printf '['; i=$((i + 1)); done
} | sed 's/^/{"x": /' >"$tmp/deep/memlimits.1.json"
bad "stats on nesting 40 deep" stats "$tmp/deep"
mkdir "$tmp/nul" && printf '{"format"\0: 1}' >"$tmp/nul/memlimits.1.json"
bad "stats on a file with a NUL byte" stats "$tmp/nul"
mkdir "$tmp/esc" && printf '{"format": "\\uZZZZ"}' >"$tmp/esc/memlimits.1.json"
bad "stats on a bad \\u escape" stats "$tmp/esc"
mkdir "$tmp/dir" && mkdir "$tmp/dir/memlimits.7.json"
bad "stats on a directory named like a stats file" stats "$tmp/dir"

# ---- hostile files (issue 11) ------------------------------------------
# FIFOs: opened without waiting for a writer, refused by their type.
mkfifo "$tmp/fifo" && chmod +x "$tmp/fifo"
bad "run a FIFO with the execute bit" run -- "$tmp/fifo"
printf '#!%s\n' "$tmp/fifo" >"$tmp/fifo-script" && chmod +x "$tmp/fifo-script"
bad "run a script whose interpreter is a FIFO" run -- "$tmp/fifo-script"
mkdir "$tmp/sfifo" && mkfifo "$tmp/sfifo/memlimits.1.json"
bad "stats with a FIFO named like a statistics file" stats "$tmp/sfifo"

# Crafted ELF files with every table at an odd offset: read with aligned
# copies (a UBSan build of the old tool printed "misaligned address" lines
# here), and still understood.
badelf() { # badelf KIND MESSAGE
	if "$top_builddir/tests/cli/make-elf" "$1" "$tmp/elf-$1" &&
		chmod +x "$tmp/elf-$1"; then
		bad "run a crafted ELF ($1 table at an odd offset)" run -- "$tmp/elf-$1"
		if grep -q "$2" "$tmp/err"; then
			ok "the crafted ELF's $1 table is read: '$2'"
		else
			notok "the crafted ELF's $1 table is not understood"
		fi
	else
		notok "make-elf $1"
	fi
}
badelf malloc "has its own malloc"
badelf sanitizer "libasan.so.8"
badelf go "is a Go program"

# Truncated ELF files: inside the identification, the ELF header, the
# program headers (make-elf's: 2 at offset 65, to byte 177).  0.2 called
# one cut inside the header "a 64-bit program" that a 64-bit library
# "cannot be preloaded into".
for len in 6 15 20 40 63 64 100 176; do
	head -c $len "$tmp/elf-malloc" >"$tmp/elf-cut" && chmod +x "$tmp/elf-cut"
	bad "run an ELF file cut at $len bytes" run -- "$tmp/elf-cut"
	if grep -q "is truncated" "$tmp/err" && ! grep -q -- '-bit' "$tmp/err"; then
		ok "an ELF file cut at $len bytes is called truncated"
	else
		notok "an ELF file cut at $len bytes: $(cat "$tmp/err")"
	fi
done
bad "run --report-all without --report" run --report-all -- sh -c "$ran"

# ---- sizes: rounded down, and 2^64-1 is not a limit ----------------------
max=18446744073709551615
bad "run --alloc-limit 2^64-1 (would mean no limit)" run --alloc-limit $max -- sh -c "$ran"
bad "run --heap-limit 2^64-1 (would mean no limit)" run --heap-limit $max -- sh -c "$ran"
bad "bounds --limit 2^64-1 (would mean no limit)" bounds --limit $max
grep -q 'no limit' "$tmp/err" && ok "bounds --limit 2^64-1 says why" ||
	notok "bounds --limit 2^64-1: $(cat "$tmp/err")"
# limit SIZE BYTES: memlimits bounds reads SIZE as BYTES.
limit() {
	got=$("$M" bounds --limit "$1" --format tsv 2>&1 | awk -F'\t' '$1 == "limit" { print $2 }')
	if test "$got" = "$2"; then
		ok "a limit of $1 is $2 bytes"
	else
		notok "a limit of $1 is '$got' bytes, not $2"
	fi
}
# 0 bytes, rounded down (not up to 1): refused as every 0-byte limit is.
bad "bounds --limit 0.99999999999999999 (0 bytes)" bounds --limit 0.99999999999999999
limit 1.99999999999999999k 2047
limit 0.5k 512
limit 1.0009765625k 1025
limit 1.00097656249999999999999999999k 1024
limit 18446744073709551614.99999999999999999999 18446744073709551614
limit 15.99999999999999999999999999999T 17592186044415
limit 9223372036854775807 9223372036854775807

# ---- messages: one line, cut with "...", control characters escaped ------
long=$(printf '%0600d' 0)
bad "run --on-limit with a 600-byte value" run --on-limit "x$long" -- sh -c "$ran"
case $(cat "$tmp/err") in
*...) ok "a 600-byte value is cut with '...'" ;;
*) notok "a 600-byte value: $(cut -c 1-80 "$tmp/err")..." ;;
esac
esc=$(printf 'a\033]0;owned\007b\033[2J')
bad "run --on-limit with escape sequences" run --on-limit "$esc" -- sh -c "$ran"
# noctl FILE WHAT: FILE holds no control character but newlines, and
# shows the escape sequences as \x1b.
noctl() {
	if ! tr -d '\n' <"$1" | LC_ALL=C grep -q '[[:cntrl:]]' &&
		grep -qF '\x1b' "$1"; then
		ok "$2: control characters escaped"
	else
		notok "$2: control characters reach the terminal"
		od -c "$1" | head -5 | diag
	fi
}
noctl "$tmp/err" "run --on-limit with escape sequences"
# C1 controls: U+009B (CSI, which terminals take as ESC [) written in UTF-8,
# and a lone byte 0x9b (CSI to an 8-bit terminal).  A printable non-ASCII
# character (U+00E9) is left as it is.
c1=$(printf 'a\302\233[2Jb\233c\303\251')
# noc1 FILE WHAT: FILE holds no byte 0x9b, shows both as \xHH, keeps U+00E9.
noc1() {
	if ! grep -q "$(printf '\233')" "$1" && grep -qF 'a\xc2\x9b[2Jb\x9bc' "$1" &&
		grep -q "$(printf '\303\251')" "$1"; then
		ok "$2: C1 controls escaped, UTF-8 kept"
	else
		notok "$2: C1 controls reach the terminal"
		od -c "$1" | head -5 | diag
	fi
}
bad "run --on-limit with C1 controls" run --on-limit "$c1" -- sh -c "$ran"
noc1 "$tmp/err" "run --on-limit with C1 controls"

# The library's own diagnostics, about its environment.
lib=${MEMLIMITS_LIB:-$top_builddir/lib/.libs/libmemlimits.so}
if test -f "$lib"; then
	# envdiag NAME VALUE: sh with the library preloaded and NAME=VALUE
	# prints its own line after the library's.
	envdiag() {
		env "$1=$2" LD_PRELOAD="$lib" sh -c 'echo NEXT >&2' \
			>"$tmp/out" 2>"$tmp/err" </dev/null
	}
	envdiag MEMLIMITS_ON_LIMIT "x$long"
	if test "$(wc -l <"$tmp/err")" = 2 && test "$(sed -n 2p "$tmp/err")" = NEXT &&
		sed -n 1p "$tmp/err" | grep -q '^memlimits: ignoring MEMLIMITS_ON_LIMIT=x0*\.\.\.$'; then
		ok "library: a 600-byte value is cut with '...' and its line ends"
	else
		notok "library: a 600-byte value: $(wc -l <"$tmp/err") lines"
		cut -c 1-100 "$tmp/err" | diag
	fi
	envdiag MEMLIMITS_ON_LIMIT "$esc"
	noctl "$tmp/err" "library: MEMLIMITS_ON_LIMIT with escape sequences"
	envdiag MEMLIMITS_ON_LIMIT "$c1"
	noc1 "$tmp/err" "library: MEMLIMITS_ON_LIMIT with C1 controls"
	envdiag MEMLIMITS_ON_LIMIT "$(printf 'a\nb')"
	test "$(wc -l <"$tmp/err")" = 2 && ok "library: a newline in a value stays on its line" ||
		notok "library: a newline in a value: $(wc -l <"$tmp/err") lines"
	for v in MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT; do
		envdiag $v $max
		if test "$(wc -l <"$tmp/err")" = 2 && grep -q "^memlimits: ignoring $v=$max: .*no limit" "$tmp/err"; then
			ok "library: $v=2^64-1 is refused with a message"
		else
			notok "library: $v=2^64-1 is taken silently"
			diag "$tmp/err"
		fi
	done
	# 0 as the options take it (issue 41): refused, not a 0-byte limit.
	for v in MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_HELD_LIMIT; do
		envdiag $v 0
		if test "$(wc -l <"$tmp/err")" = 2 && grep -q "^memlimits: ignoring $v=0: a limit is at least 1 byte" "$tmp/err"; then
			ok "library: $v=0 is refused with a message"
		else
			notok "library: $v=0 is taken silently"
			diag "$tmp/err"
		fi
	done
else
	for i in 1 2 3 4 5 6 7 8 9; do skip "the library is not built ($lib)"; done
fi

# ---- env drops the library: said, not silent ---------------------------
# envwarn EXPECT ARGS...: memlimits run -- env ARGS runs (status 0) and
# warns (EXPECT=1) or says nothing (EXPECT=0).
envwarn() {
	want=$1
	shift
	$TO "$M" run -- env "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
	st=$?
	if test "$want" = 1; then
		test "$st" = 0 && test "$(wc -l <"$tmp/err")" = 1 &&
			grep -q '^memlimits run: warning: env .*without the library' "$tmp/err"
	else
		test "$st" = 0 && ! test -s "$tmp/err"
	fi && ok "run -- env $*: $(test "$want" = 1 && echo warns || echo "no warning")" ||
		{ notok "run -- env $*: status $st"; diag "$tmp/err"; }
}
envwarn 1 LD_PRELOAD= true
envwarn 1 -i true
envwarn 1 -u LD_PRELOAD true
envwarn 0 FOO=1 true
envwarn 0 -u FOO true

# ---- memlimits stats: hostile files --------------------------------------
# stfile DIR PID PROGRAM BYTES: a valid statistics file.
stfile() {
	printf '{"format": "memlimits-stats", "version": 1, "pid": %s, "program": "%s", "interval": 80000, "threads": 1, "allocations": 1, "bytes": %s, "sampled_allocations": 0, "samples": 0, "window": 100000, "unsampled_windows": 0, "histogram": [[64, 1, 0]]}\n' \
		"$2" "$3" "$4" >"$1/memlimits.$2.json"
}
mkdir "$tmp/ovf"
stfile "$tmp/ovf" 1 /bin/a 18446744073709551615
stfile "$tmp/ovf" 2 /bin/b 1
bad "stats whose total overflows (no row printed first)" stats "$tmp/ovf"
mkdir "$tmp/ctl"
stfile "$tmp/ctl" 1 '/bin/\u001b]0;owned\u0007x\u001b[2J' 100
$TO "$M" stats "$tmp/ctl" >"$tmp/out" 2>"$tmp/err"
test $? = 0 && grep -q '^1 ' "$tmp/out" && noctl "$tmp/out" "stats: a program name with escape sequences" ||
	notok "stats on a program name with escape sequences: $(cat "$tmp/err")"
mkdir "$tmp/c1"
stfile "$tmp/c1" 1 'a\u009b[2Jb\u00e9' 100
$TO "$M" stats "$tmp/c1" >"$tmp/out" 2>"$tmp/err"
if test $? = 0 && ! grep -q "$(printf '\233')" "$tmp/out" &&
	grep -qF 'a\xc2\x9b[2Jb' "$tmp/out" && grep -q "$(printf 'b\303\251')" "$tmp/out"; then
	ok "stats: a program name with a C1 control (U+009B) is escaped, U+00E9 kept"
else
	notok "stats: a program name with a C1 control: $(cat "$tmp/err")"
	od -c "$tmp/out" | head -5 | diag
fi
# 10 000 processes: the TOTAL label keeps its closing bracket.
mkdir "$tmp/many"
i=1
while test $i -le 10000; do
	stfile "$tmp/many" $i /bin/true 100
	i=$((i + 1))
done
$TO "$M" stats "$tmp/many" >"$tmp/out" 2>"$tmp/err"
st=$?
tl=$(grep '^TOTAL' "$tmp/out")
case $st/$tl in
0/"TOTAL    (10000 processes) "*) ok "stats on 10000 processes: '$(echo "$tl" | cut -c 1-40)...'" ;;
*) notok "stats on 10000 processes: status $st, total line '$tl'" ;;
esac

echo "1..$n"
