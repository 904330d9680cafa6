#!/bin/sh
# memlimits run and private memory made through protection changes
# (issue 41, item 6), each 24 chunks of 64 MiB filled (1.5 GiB) under
# --heap-limit 256MiB (mappings refused from 213.3 MiB, L less L/6):
#  - filled, then made read-only: it stays counted (before, mprotect
#    uncounted it, and all 1536 MiB were filled);
#  - committed with pkey_mprotect (not interposed before: 1536 MiB);
#  - committed by an mprotect that the kernel applies up to a hole and
#    then fails (ENOMEM): the part it changed counts (before, a failed
#    call changed nothing in the count: 1536 MiB);
#  - filled, made PROT_NONE and given back with MADV_DONTNEED (V8's
#    uncommit): given back, it no longer counts, and all 24 chunks go
#    through (counted memory stays counted only until given back).
# Each refused run stops between 128 and 256 MiB: a 64 MiB commit
# carries Poisson(839) samples at the default interval, so the refusal
# comes at the first chunk past the limit less the headroom.
: "${top_builddir:?}"
P=$top_builddir/tests/cli/test-run-protect
. "$top_srcdir/tests/cli/run-env.sh"
held_to() {
	"$M" run --heap-limit 256MiB -- "$P" "$1" 24 >"$tmp/out" 2>"$tmp/err"
	st=$?
	read -r what got err <"$tmp/out"
	if test "$st" = 0 && test "$what" = "$1" && test "$got" -ge 128 &&
		test "$got" -le 256 && test "$err" = "Cannot allocate memory"; then
		ok "$1: $2 refused with ENOMEM after $got MiB"
	else
		notok "$1: $2: status $st, $(cat "$tmp/out") (want 128 to 256 MiB, then ENOMEM)"
		diag "$tmp/err"
	fi
}
if tap_case readonly; then
	held_to readonly "filled, then made read-only: still counted,"
fi
if tap_case pkey; then
	held_to pkey "committed by pkey_mprotect:"
fi
if tap_case partial; then
	held_to partial "committed by an mprotect that fails at a hole:"
fi
if tap_case advise; then
	"$M" run --heap-limit 256MiB -- "$P" advise 24 >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && test "$(cat "$tmp/out")" = "advise 1536 ok"; then
		ok "advise: PROT_NONE and MADV_DONTNEED give back: 24 chunks of 64 MiB"
	else
		notok "advise: status $st, $(cat "$tmp/out") (want advise 1536 ok)"
		diag "$tmp/err"
	fi
fi
echo "1..$n"
