#!/bin/sh
# Every manual page of a function (docs/*.3, except the .so links, whose
# target covers them) has a THREAD SAFETY section, and in it an entry for
# each function its NAME and SYNOPSIS name, saying from which threads it
# may be called ("Threads:") and whether it may allocate ("Allocates:"),
# as sqlite3.h does per function (issue 24).
: "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-mansafety.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C

pages=0
for page in "$top_srcdir"/docs/*.3; do
	name=${page##*/}
	# A link page: ".so man3/other.3" (after comments) and nothing else.
	if sed -e '/^\.\\"/d' -e '/^$/d' "$page" | head -n 1 | grep -q '^\.so '; then
		continue
	fi
	pages=$((pages + 1))
	# The functions the page documents: ml_ names in NAME, and names
	# followed by "(" in SYNOPSIS, outside comments (a function, not a
	# type or macro).
	awk '/^\.SH/ { sec = $0; next }
	     sec ~ /NAME/ {
		s = $0
		while (match(s, /ml_[a-z0-9_]+/)) {
			print substr(s, RSTART, RLENGTH); s = substr(s, RSTART + RLENGTH)
		} }
	     sec ~ /SYNOPSIS/ {
		s = $0; gsub(/\\f[BIRP]|"/, "", s); gsub(/\/\*.*\*\//, "", s)
		while (match(s, /ml_[a-z0-9_]+ *\(/)) {
			f = substr(s, RSTART, RLENGTH); sub(/ *\($/, "", f); print f
			s = substr(s, RSTART + RLENGTH)
		} }' "$page" | sort -u >"$tmp/funcs"
	# The section's entries: tags (.TP/.TQ then ".BR name ()"), and
	# for each .TP entry whether its text has both statements.
	awk '/^\.SH/ { in_s = ($0 ~ /^\.SH "?THREAD SAFETY"?$/); if (in_s) found = 1; next }
	     !in_s { next }
	     /^\.TP$/ { if (e) check(); e = 1; text = ""; tag = 1; next }
	     /^\.TQ$/ { tag = 1; next }
	     tag { tag = 0; t = $0; sub(/^\.B[IR]? /, "", t); sub(/ .*/, "", t)
		   print "tag " t; tags = tags " " t; next }
	     e { text = text " " $0 }
	     function check() {
		if (text !~ /\.I Threads:/ || text !~ /\.I Allocates:/)
			print "incomplete" tags
		tags = ""
	     }
	     END { if (e) check(); if (!found) print "nosection" }' \
		"$page" >"$tmp/entries"
	if grep -q '^nosection' "$tmp/entries"; then
		echo "$name: no THREAD SAFETY section" >>"$tmp/bad"
		continue
	fi
	sed -n 's/^incomplete */&/p' "$tmp/entries" | while read -r _ fns; do
		echo "$name: the entry for $fns lacks \"Threads:\" or \"Allocates:\""
	done >>"$tmp/bad"
	sed -n 's/^tag //p' "$tmp/entries" | sort -u >"$tmp/tags"
	comm -23 "$tmp/funcs" "$tmp/tags" | while read -r f; do
		echo "$name: $f has no entry under THREAD SAFETY"
	done >>"$tmp/bad"
	test -s "$tmp/funcs" || test "$name" = memlimits.3 ||
		echo "$name: no function found in NAME or SYNOPSIS" >>"$tmp/bad"
done

if test "$pages" -lt 10; then
	notok "found only $pages manual pages under $top_srcdir/docs"
elif test -s "$tmp/bad"; then
	notok "each function's page states its thread safety and allocation"
	diag "$tmp/bad"
else
	ok "each function's page states its thread safety and allocation ($pages pages)"
fi

# The sections render without warnings.
if command -v groff >/dev/null 2>&1; then
	: >"$tmp/warn"
	for page in "$top_srcdir"/docs/*.3; do
		sed -n '/^\.SH "THREAD SAFETY"/,/^\.SH [^T]/p' "$page" |
			sed '$d' >"$tmp/sec"
		test -s "$tmp/sec" || continue
		{ printf '.TH X 3\n'; cat "$tmp/sec"; } |
			groff -man -Tutf8 -ww -z 2>&1 |
			sed "s|^|${page##*/}: |" >>"$tmp/warn"
	done
	if test -s "$tmp/warn"; then
		notok "THREAD SAFETY sections render without groff warnings"
		diag "$tmp/warn"
	else
		ok "THREAD SAFETY sections render without groff warnings"
	fi
else
	skip "no groff"
fi
echo "1..$n"
