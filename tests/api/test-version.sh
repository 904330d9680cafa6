#!/bin/sh
# The version is written once, in configure.ac's AC_INIT; everything that
# states it must agree: the header's ML_VERSION_* macros (literal, so that
# include/memlimits.h compiles with -Iinclude from a clean checkout: this
# test is what keeps them equal to configure's), ml_version(), pkg-config,
# memlimits --version and the footer of every installed man page.  And it is
# never older than the newest symbol version node, in lib/memlimits.map and
# in the built library: the change that first exports a MEMLIMITS_0.3 symbol
# makes the version 0.3.0 (memlimits(3), "ABI").
: "${top_srcdir:?}" "${top_builddir:?}" "${PACKAGE_VERSION:?}" "${MEMLIMITS_LIB:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-version.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
h=$top_srcdir/include/memlimits.h
v=$PACKAGE_VERSION

# configure's version is AC_INIT's second argument, as configure.ac says it.
if tap_case configure; then
	ac=$(sed -n 's/^AC_INIT(\[memlimits\], *\[\([^]]*\)\].*/\1/p' "$top_srcdir/configure.ac")
	if test "$ac" = "$v"; then
		ok "configure.ac's AC_INIT says $v, as the build"
	else
		notok "configure.ac's AC_INIT says '$ac', the build was configured as $v"
	fi
fi

macro() {
	sed -n "s/^#define ML_VERSION_$1 *//p" "$h" | tr -d '"'
}
if tap_case header; then
	got="$(macro MAJOR).$(macro MINOR).$(macro PATCH)"
	if test "$got" = "$v"; then
		ok "ML_VERSION_MAJOR.MINOR.PATCH is configure's $v"
	else
		notok "ML_VERSION_MAJOR.MINOR.PATCH is $got, configure's is $v"
	fi
fi

# What a program compiled with the header and linked with the library sees.
if tap_case program; then
	"$top_builddir/tests/api/version-prog" >"$tmp/prog" 2>&1
	if test "$(sed -n 1p "$tmp/prog")" = "$v"; then
		ok "ML_VERSION_STRING is configure's $v"
	else
		notok "ML_VERSION_STRING is '$(sed -n 1p "$tmp/prog")', configure's is $v"
	fi
	if test "$(sed -n 2p "$tmp/prog")" = "$v"; then
		ok "ml_version() returns configure's $v"
	else
		notok "ml_version() returns '$(sed -n 2p "$tmp/prog")', configure's is $v"
		diag "$tmp/prog"
	fi
fi

if tap_case version-option; then
	out=$("$top_builddir/tools/memlimits" --version 2>&1)
	if test "$out" = "memlimits $v"; then
		ok "memlimits --version prints memlimits $v"
	else
		notok "memlimits --version prints '$out', expected 'memlimits $v'"
	fi
fi

if tap_case pkg-config; then
	if ! command -v "${PKG_CONFIG:-pkg-config}" >/dev/null 2>&1; then
		skip "no pkg-config"
	else
		out=$(PKG_CONFIG_PATH=$top_builddir "${PKG_CONFIG:-pkg-config}" \
			--modversion memlimits 2>&1)
		if test "$out" = "$v"; then
			ok "pkg-config --modversion memlimits (the build's memlimits.pc) says $v"
		else
			notok "pkg-config --modversion memlimits says '$out', expected $v"
		fi
	fi
fi

# The Python package (python/): the version its build gives
# (python/memlimits_build.py --version, found from configure.ac in a source
# tree), and memlimits.__version__ of the module the build made (the build
# compiles it in: python/README.md, "Version").
if tap_case python; then
	py=${ML_PYTHON:-}
	if test -z "$py" || ! test -e "$top_builddir/python/build/pkg/.built"; then
		skip "the Python module is not built"
		skip "the Python module is not built"
	else
		out=$(env -u MEMLIMITS_VERSION "$py" \
			"$top_srcdir/python/memlimits_build.py" --version 2>&1 | tail -n 1)
		if test "$out" = "$v"; then
			ok "python/memlimits_build.py --version says configure.ac's $v"
		else
			notok "python/memlimits_build.py --version says '$out', expected $v"
		fi
		out=$(PYTHONPATH="$top_builddir/python/build/pkg" \
			LD_LIBRARY_PATH="$top_builddir/lib/.libs" \
			"$py" -c 'import memlimits; print(memlimits.__version__)' 2>&1)
		if test "$out" = "$v"; then
			ok "memlimits.__version__ (Python) is $v"
		else
			notok "memlimits.__version__ (Python) is '$out', expected $v"
		fi
	fi
fi

# The pages `make install` installs (into a scratch DESTDIR): each one in
# docs/ is installed, and every page that is not a .so link says the version
# in its .TH footer.
if tap_case man-pages; then
	unset MAKEFLAGS MFLAGS MAKELEVEL
	if ! ${MAKE:-make} -s -C "$top_builddir" install-man DESTDIR="$tmp/dest" \
		>"$tmp/make.out" 2>&1; then
		notok "make install-man into a scratch DESTDIR"
		diag "$tmp/make.out"
	else
		find "$tmp/dest" -type f -name '*.[0-9]' >"$tmp/pages"
		bad= missing= count=0
		for f in "$top_srcdir"/docs/*.[0-9]; do
			grep -q "/man${f##*.}/${f##*/}\$" "$tmp/pages" ||
				missing="$missing ${f##*/}"
		done
		while read -r f; do
			grep -q '^\.so ' "$f" && continue
			count=$((count + 1))
			grep -q "^\.TH .*\"memlimits $v\"" "$f" || bad="$bad ${f##*/}"
		done <"$tmp/pages"
		if test -z "$missing"; then
			ok "every man page in docs/ is installed ($(wc -l <"$tmp/pages") pages)"
		else
			notok "man pages in docs/ that make install leaves out:$missing"
		fi
		if test -z "$bad" && test "$count" -gt 0; then
			ok "every installed man page's .TH footer says memlimits $v ($count pages)"
		else
			notok "installed man pages whose .TH footer does not say memlimits $v:$bad"
		fi
	fi
fi

# Symbol version nodes MEMLIMITS_X.Y, newest last.
newest() {
	grep -oE 'MEMLIMITS_[0-9]+\.[0-9]+' | sed 's/^MEMLIMITS_//' | sort -u -t. -k1,1n -k2,2n | tail -n 1
}
# X.Y of the version is at least the node's: 0 when so.
not_older() {
	test "${1%%.*}" -gt "${2%%.*}" && return 0
	test "${1%%.*}" -eq "${2%%.*}" || return 1
	mv=${1#*.} mn=${2#*.}
	test "${mv%%.*}" -ge "${mn%%.*}"
}
if tap_case symbol-versions; then
	map=$(newest <"$top_srcdir/lib/memlimits.map")
	${OBJDUMP:-objdump} -T "$MEMLIMITS_LIB" >"$tmp/dynsym" 2>&1
	lib=$(newest <"$tmp/dynsym")
	if test -n "$map" && test "$map" = "$lib"; then
		ok "the library exports lib/memlimits.map's newest node, MEMLIMITS_$map"
	else
		notok "lib/memlimits.map's newest node is MEMLIMITS_$map, the library's MEMLIMITS_$lib"
	fi
	if test -n "$lib" && not_older "$v" "$lib"; then
		ok "version $v is not older than the newest exported node MEMLIMITS_$lib"
	else
		notok "version $v is older than the newest exported node MEMLIMITS_$lib (set it in configure.ac)"
	fi
fi
tap_done
