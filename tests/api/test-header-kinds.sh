#!/bin/sh
# memlimits(3) cannot fall behind the header (issue 25): include/memlimits.h
# groups its functions by kind ("/* ---- Kind ..." sections, each opening
# with its convention), and the overview page presents the same functions
# by the same kinds.  Checked here:
#  - every function the header declares (ML_EXPORT) is in memlimits(3)'s
#    SYNOPSIS, and the SYNOPSIS names no function the header lacks;
#  - each is under the same kind in both (the header's section title and
#    the SYNOPSIS group's comment, up to a colon or a parenthesis);
#  - each is named in memlimits(3)'s RETURN VALUE, which gives each kind's
#    convention and its exceptions.
: "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-kinds.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
header=$top_srcdir/include/memlimits.h page=$top_srcdir/docs/memlimits.3

# A kind's name as both spell it: lower case, up to ":" or " (".
# Lines "function kind", sorted.
awk '
	function kind(s) {
		sub(/^ +/, "", s); sub(/ *[:(].*/, "", s); sub(/ *-+ *(\*\/)?$/, "", s)
		return tolower(s)
	}
	/^\/\* ---- / { k = $0; sub(/^\/\* ---- /, "", k); k = kind(k); next }
	/^ML_EXPORT/ {
		s = $0; sub(/\(.*/, "", s); sub(/.*[ *]/, "", s)
		if (s ~ /^ml_/) print s, (k == "" ? "(none)" : k)
	}' "$header" | sort >"$tmp/header"

awk '
	function kind(s) {
		sub(/^ +/, "", s); sub(/ *[:(].*/, "", s); sub(/ *\*\/.*/, "", s)
		return tolower(s)
	}
	/^\.SH/ { syn = ($0 ~ /^\.SH "?SYNOPSIS"?$/); next }
	!syn { next }
	{ s = $0; gsub(/\\f[BIRP]|"/, "", s); gsub(/\\-/, "-", s) }
	s ~ /^\.B \/\* .*\*\/$/ { k = s; sub(/^\.B \/\* /, "", k); k = kind(k); next }
	{
		gsub(/\/\*.*\*\//, "", s)
		while (match(s, /ml_[a-z0-9_]+ *\(/)) {
			f = substr(s, RSTART, RLENGTH); sub(/ *\($/, "", f)
			print f, (k == "" ? "(none)" : k)
			s = substr(s, RSTART + RLENGTH)
		}
	}' "$page" | sort >"$tmp/page"

if test "$(wc -l <"$tmp/header")" -lt 40; then
	notok "found only $(wc -l <"$tmp/header") ML_EXPORT functions in $header"
	diag "$tmp/header"
else
	ok "the header declares $(wc -l <"$tmp/header") functions"
fi

cut -d' ' -f1 "$tmp/header" | sort -u >"$tmp/hnames"
cut -d' ' -f1 "$tmp/page" | sort -u >"$tmp/pnames"
if diff -u "$tmp/hnames" "$tmp/pnames" >"$tmp/diff"; then
	ok "memlimits(3)'s SYNOPSIS names exactly the header's functions"
else
	notok "memlimits(3)'s SYNOPSIS vs the header's functions (- declared only, + on the page only)"
	diag "$tmp/diff"
fi

# Each function once in the SYNOPSIS, under its header kind.
if diff -u "$tmp/header" "$tmp/page" >"$tmp/diff"; then
	ok "each function is under the same kind in the header and the SYNOPSIS"
else
	notok "kinds differ (- the header's section, + the SYNOPSIS group)"
	diag "$tmp/diff"
fi

# Every function in RETURN VALUE, where its kind's convention is given.
awk '/^\.SH/ { rv = ($0 ~ /^\.SH "?RETURN VALUE"?$/); next }
	rv { s = $0
		while (match(s, /ml_[a-z0-9_]+/)) {
			print substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
		} }' "$page" | sort -u >"$tmp/rv"
comm -23 "$tmp/hnames" "$tmp/rv" >"$tmp/missing"
if test -s "$tmp/rv" && ! test -s "$tmp/missing"; then
	ok "memlimits(3)'s RETURN VALUE names every function with its kind's convention"
else
	notok "functions missing from memlimits(3)'s RETURN VALUE"
	diag "$tmp/missing"
fi

# Each section of the header's functions opens with its convention
# (the aliases excepted: they are other names, with no convention of
# their own).
awk '/^\/\* ---- / { if (t != "" && !c) print t; t = $0; c = 0; next }
	t != "" && /Convention:/ { c = 1 }
	/^ML_EXPORT/ && t != "" { if (!c && t !~ /Aliases/) print t; t = "" }' \
	"$header" >"$tmp/noconv"
if test -s "$tmp/noconv"; then
	notok "header sections without a \"Convention:\" before their first function"
	diag "$tmp/noconv"
else
	ok "each header section states its convention before its functions"
fi
echo "1..$n"
