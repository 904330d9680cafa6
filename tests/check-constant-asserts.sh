#!/bin/sh
# Reject a test that asserts a constant, i.e. that cannot fail:
#   C/C++: tap_ok(1, ...), tap_ok(true, ...), tap_ok(!0, ...), tap_ok("x", ...),
#          tap_is(3, 3, ...) (two literals), a literal "ok N" line printed
#          by hand (printf/puts/tap_write("ok ...")).
#   shell: a literal TAP line (echo "ok 1 ..."), or an `ok` call that no
#          condition guards (not inside if/case, not after && or ||).
# A constant failure (tap_ok(false, "timed out")) is a report, not a check.
#
#   tests/check-constant-asserts.sh [FILE...]   default: tests/ examples/ bench/
#   tests/check-constant-asserts.sh --self-test checks that it catches each
#                                               kind of bad line
# Prints one line per offending line (FILE:LINE: text); exit 1 if any.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)

check_c() {
	# Whole file at once, so that a call split over lines is seen; the
	# line number is that of the call's start.
	perl -0777 -ne '
		my $f = $ARGV;
		my $lit = qr/(?:true|!\s*0|0*[1-9][0-9]*[uUlL]*|0x0*[1-9a-fA-F][0-9a-fA-F]*|"[^"]*")/;
		my $num = qr/(?:true|false|-?[0-9]+[uUlL]*|"[^"]*"|\x27[^\x27]*\x27)/;
		while (/\b(tap_ok\s*\(\s*$lit\s*,
		          |tap_is(?:_int)?\s*\(\s*$num\s*,\s*$num\s*,
		          |(?:printf|puts|tap_write|fputs)\s*\(\s*"ok\s[0-9])/gx) {
			my $line = 1 + (substr($_, 0, $-[0]) =~ tr/\n//);
			(my $text = $1) =~ s/\s+/ /g;
			print "$f:$line: $text\n";
		}' "$1"
}

check_sh() {
	awk -v f="$1" '
	function bad(why) { printf "%s:%d: %s: %s\n", f, NR, why, $0 }
	{
		line = $0
		sub(/^[ \t]+/, "", line)
		if (line ~ /^#/)
			next
		# Quoted text says nothing about control flow.
		gsub(/"([^"\\]|\\.)*"/, "\"\"", line)
		gsub(/\x27[^\x27]*\x27/, "\"\"", line)
		sub(/[ \t]#.*$/, "", line)
		guarded = depth > 0 || cont || line ~ /(&&|\|\|)/
		if (!guarded && line ~ /^ok([ \t]|$)/)
			bad("an ok that no condition guards")
		if (!guarded && $0 ~ /^[ \t]*(echo|printf)[ \t]+["\x27]?ok [0-9]/)
			bad("an ok line that no condition guards")
		n = split(line, w, /[ \t;()]+/)
		for (i = 1; i <= n; i++) {
			if (w[i] == "if" || w[i] == "case")
				depth++
			else if ((w[i] == "fi" || w[i] == "esac") && depth > 0)
				depth--
		}
		cont = line ~ /(&&|\|\||\||\\)[ \t]*$/
	}' "$1"
}

check() {
	case $1 in
	*/tap/tap.sh) ;; # the helper that prints the lines
	*.c | *.cc | *.h) check_c "$1" ;;
	*.sh) check_sh "$1" ;;
	esac
}

if [ "${1:-}" = --self-test ]; then
	tmp=$(mktemp -d) || exit 2
	trap 'rm -rf "$tmp"' EXIT
	printf '%s\n' 'tap_ok(1, "x");' 'tap_ok(true, "x");' 'tap_ok( !0 ,"x");' \
		'tap_ok(' '    1, "split over lines");' 'tap_is(3, 3, "x");' \
		'printf("ok 1 - x\n");' >"$tmp/bad.c"
	printf '%s\n' 'ok "unguarded"' 'echo "ok 1 - by hand"' >"$tmp/bad.sh"
	printf '%s\n' 'tap_ok(n == 1, "x");' 'tap_ok(false, "timed out");' \
		'tap_is(got, 3, "x");' 'tap_ok(ok1, "x");' >"$tmp/good.c"
	printf '%s\n' 'if [ "$x" = 1 ]; then' '	ok "x is 1 if"' 'else' \
		'	notok "x"' 'fi' '[ -f y ] && ok "y" || notok "y"' \
		'case $z in' 'a) ok "a" ;;' '*) notok "z" ;;' 'esac' >"$tmp/good.sh"
	got=$("$0" "$tmp/bad.c" "$tmp/bad.sh" | wc -l)
	clean=$("$0" "$tmp/good.c" "$tmp/good.sh") && clean=
	if [ "$got" -eq 8 ] && [ -z "$clean" ]; then
		echo "self-test: 8 of 8 bad lines caught, no good line flagged"
		exit 0
	fi
	echo "self-test FAILED: $got of 8 bad lines caught; flagged good lines:"
	printf '%s\n' "$clean"
	exit 1
fi

if [ $# -eq 0 ]; then
	set -- $(find "$top/tests" "$top/examples" "$top/bench" \
		\( -name '*.c' -o -name '*.cc' -o -name '*.h' -o -name '*.sh' \) \
		! -name check-constant-asserts.sh | sort)
fi
out=$(for f in "$@"; do check "$f"; done)
if [ -n "$out" ]; then
	printf '%s\n' "$out"
	exit 1
fi
echo "no constant assertion in $# files"
