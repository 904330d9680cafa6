#!/bin/sh
# memlimits run and private memory got by ways other than the malloc
# family and mmap (issue 41, item 6), each filling up to 1536 MiB 1 MiB at
# a time under --heap-limit 256MiB: stopped near the limit (ENOMEM), where
# each got all 1536 MiB before.
#  - glibc's public __libc_malloc, __libc_calloc, __libc_memalign,
#    __libc_valloc, __libc_pvalloc and __libc_realloc, called by name: the
#    blocks are refused at the limit (one 1 MiB block with no sample
#    past it: the check allows 16 MiB over; Poisson(13.1) samples a MiB,
#    P(none in 16 MiB) = e^-210); over tcmalloc (which defines them too)
#    as well;
#  - the program's own sbrk and brk: refused as mappings are, at the limit
#    less the headroom (L/6: 213.3 MiB), within one interval; 200 MiB got
#    by sbrk, given back and got again (the shrink uncounts);
#  - glibc's malloc moves the break itself (its internal __sbrk, not ours):
#    64 MiB of 1000-byte blocks read as a peak heap of 64-70 MiB, nothing
#    mapped (counted twice, it would read 128); under tcmalloc, which calls
#    sbrk itself (its pc in its object: not counted again), the same;
#  - shmat of an IPC_PRIVATE segment: refused as a mapping, at 213 MiB;
#    200 MiB attached, detached and attached again passes; segments with a
#    key (shared between processes) are not counted (1536 MiB got), and the
#    report says so.
: "${top_builddir:?}"
P=$top_builddir/tests/cli/test-run-private
. "$top_srcdir/tests/cli/run-env.sh"
# under LIMIT ARGS...: the program run with --heap-limit LIMIT, its output
# in $tmp/out, its stderr in $tmp/err, its status in st.
under() {
	lim=$1
	shift
	"$M" run --heap-limit "$lim" "$@" >"$tmp/out" 2>"$tmp/err"
	st=$?
}
failed() {
	notok "$1: status $st, $(cat "$tmp/out")${2:+ $2}"
	diag "$tmp/err"
}
# stopped ROUTE LO HI: run ROUTE 1536 under 256 MiB; ok when it got
# between LO and HI MiB and then ENOMEM.
stopped() {
	under 256MiB -- "$P" "$1" 1536
	read -r what got e1 e2 e3 <"$tmp/out"
	if test "$st" = 0 && test "$what" = "$1" && test "$got" -ge "$2" &&
		test "$got" -le "$3" && test "$e1 $e2 $e3" = "Cannot allocate memory"; then
		ok "$1: stopped after $got MiB under --heap-limit 256MiB"
	else
		failed "$1 under --heap-limit 256MiB (want $2 to $3 MiB, then ENOMEM)"
	fi
}

if tap_case libc; then
	for r in libc-malloc libc-calloc libc-memalign libc-valloc \
		libc-pvalloc libc-realloc; do
		stopped "$r" 230 256
	done
	# tcmalloc defines __libc_malloc too: ours comes first.
	under 256MiB --allocator tcmalloc -- "$P" libc-malloc 1536
	read -r what got e1 e2 e3 <"$tmp/out"
	if test "$st" = 0 && test "$got" -ge 230 && test "$got" -le 256 &&
		test "$e1 $e2 $e3" = "Cannot allocate memory"; then
		ok "libc-malloc over tcmalloc: stopped after $got MiB"
	else
		failed "libc-malloc over tcmalloc"
	fi
fi
if tap_case sbrk; then
	stopped sbrk 200 217
	stopped brk 200 217
	under 256MiB -- "$P" sbrk-cycle 200
	read -r what got e1 <"$tmp/out"
	if test "$st" = 0 && test "$what $got $e1" = "sbrk-cycle 200 0"; then
		ok "sbrk: 200 MiB given back and got again under --heap-limit 256MiB"
	else
		failed "sbrk grown, shrunk and grown again"
	fi
fi

if tap_case shmat; then
	stopped shmat 200 217
	under 256MiB -- "$P" shm-cycle 200
	read -r what got e1 <"$tmp/out"
	if test "$st" = 0 && test "$what $got $e1" = "shm-cycle 200 0"; then
		ok "shmat: 200 MiB detached and attached again under --heap-limit 256MiB"
	else
		failed "shmat, shmdt and shmat again"
	fi
	under 256MiB --report "$tmp/r.txt" -- "$P" shm-keyed 1536
	read -r what got e1 <"$tmp/out"
	if test "$st" = 0 && test "$what $got $e1" = "shm-keyed 1536 0" &&
		grep -q '^  not counted: 1.5 GiB of SysV shared memory attached with a key' "$tmp/r.txt"; then
		ok "shmat with a key: not counted, and the report says so"
	else
		failed "shmat with a key" "$(cat "$tmp/r.txt")"
	fi
fi

# once ALLOCATOR: 64 MiB of small blocks over ALLOCATOR, the report's peak
# heap between 64 and 70 MiB, of which under 1 MiB mapped.
once() {
	"$M" run --heap-limit 1GiB --allocator "$1" --report "$tmp/r.txt" -- "$P" small 64 \
		>"$tmp/out" 2>"$tmp/err"
	st=$?
	line=$(grep '^  peak heap: ' "$tmp/r.txt")
	peak=$(echo "$line" | sed -n 's/^  peak heap: \([0-9]*\) bytes.*/\1/p')
	mapped=$(echo "$line" | sed -n 's/.*, mapped \([0-9.]*\) \(bytes\|KiB\)$/\1/p')
	if test "$st" = 0 && test -n "$peak" && test -n "$mapped" &&
		test "$peak" -ge $((64 << 20)) && test "$peak" -le $((70 << 20)); then
		ok "$1: 64 MiB of small blocks, peak heap $peak bytes, nothing mapped"
	else
		notok "$1: 64 MiB of small blocks: status $st, $line"
		diag "$tmp/err" "$tmp/r.txt"
	fi
}
if tap_case once; then
	once glibc
	once tcmalloc
fi
tap_done
