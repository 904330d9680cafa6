#!/bin/sh
# Every lock in lib/ is made with ML__LOCK, ML__LOCKS or ML__POOL
# (lib/util/util.h),
# which register it for fork (lib/util/forklock.c): a lock made any other way
# would not be held around fork, and a child could inherit it held.  This
# rejects the other ways: a raw atomic_flag, a pthread or semaphore lock,
# or an ml__lock / ml__pool defined without the macros.
: "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-locks.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
cd "$top_srcdir" || exit 1

# The registry's own flag (forklock.c), the one inside struct ml__lock and
# the inline ml__spin_* on it (util.h: l->flag, an ml__lock's).
grep -nE 'atomic_flag|pthread_(mutex|spin|rwlock)_|sem_t|sem_(wait|post|init)|mtx_t|mtx_lock' \
	lib/*/*.c lib/*/*.h |
	grep -vE '^lib/util/forklock\.c:' |
	grep -vE '^lib/util/util\.h:[0-9]+:	atomic_flag flag;$' |
	grep -vE '^lib/util/util\.h:[0-9]+:	(return !)?atomic_flag_(test_and_set|clear)_explicit\(&l->flag,' \
	>"$tmp/raw"
if test -s "$tmp/raw"; then
	notok "a lock in lib/ that is not made with ML__LOCK / ML__POOL"
	diag "$tmp/raw"
else
	ok "no lock in lib/ outside the fork registry's macros"
fi

# A file-scope definition (not a pointer, not extern) of an ml__lock or
# ml__pool: those are the macros' job.
grep -nE '^(static[[:space:]]+)?struct ml__(lock|lock_line|pool)[[:space:]]+[A-Za-z_][A-Za-z_0-9]*[[:space:]]*(=|;|\[)' \
	lib/*/*.c lib/*/*.h >"$tmp/defs"
if test -s "$tmp/defs"; then
	notok "an ml__lock or ml__pool defined without ML__LOCK(S) / ML__POOL"
	diag "$tmp/defs"
else
	ok "every ml__lock and ml__pool is defined with ML__LOCK / ML__POOL"
fi

# The macros are used at all (the check above would pass on an empty tree).
uses=$(grep -hcE '^(static )?ML__(LOCKS?|POOL)\(' lib/*/*.c | awk '{ s += $1 } END { print s + 0 }')
if test "$uses" -ge 1; then
	ok "$uses locks defined through the registry's macros"
else
	notok "only $uses locks defined through ML__LOCK / ML__POOL"
fi
echo "1..$n"
