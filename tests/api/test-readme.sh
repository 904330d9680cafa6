#!/bin/sh
# The README's example compiles against the built library and does what the
# README says it does.
echo "1..3"
src=$(mktemp -d) || exit 1
trap 'rm -rf "$src"' EXIT
sed -n '/^```c$/,/^```$/p' "$top_srcdir/README.md" | sed '1d;$d' >"$src/readme.c"
if [ -s "$src/readme.c" ]; then echo "ok 1 - README has a C example"; else echo "not ok 1 - README has a C example"; fi
libdir=$(dirname "$MEMLIMITS_LIB")
if ${CC:-cc} -std=gnu11 -Wall -Wextra -Werror -I"$top_srcdir/include" "$src/readme.c" \
	-o "$src/readme" -L"$libdir" -lmemlimits -Wl,-rpath,"$libdir" 2>"$src/err"; then
	echo "ok 2 - the example compiles cleanly"
else
	echo "not ok 2 - the example compiles cleanly"
	sed 's/^/# /' "$src/err"
fi
out=$(timeout 60 "$src/readme" 2>&1)
case "$out" in
"parse: allocation limit reached after ~6"[4-9]" MiB") echo "ok 3 - the example stops its task: $out" ;;
*) echo "not ok 3 - the example stops its task: $out" ;;
esac
