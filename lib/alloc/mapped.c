/* The process's mapped ranges (ranges.c's structure): its storage, its
 * lock, whether counting runs, and the guard that keeps the allocator
 * underneath's own mappings out.  The interposed mmap family
 * (api/mmap.c) takes the lock around its system call and the update, so
 * that an address the kernel hands out again is never still recorded.
 *
 * The storage, ML__MAPPED_CAP records (3 MiB of address space), is mapped
 * with the kernel directly at the first use and touched where records
 * come to lie (ranges.c moves them to its middle when one end runs out of
 * slots); it is never given back.  A fork child inherits it with the mappings
 * it describes (the lock is in the fork registry). */
#define _GNU_SOURCE
#include "alloc/alloc.h"

#include <sys/mman.h>

ML__LOCK(, ml__mapped_lock, ML__RANK_MAPPED)
_Atomic bool ml__mapped_on = true;

struct ml__ranges ml__mapped_table;
#define ranges ml__mapped_table
static bool failed;

static void drop(void *ctx, uintptr_t key, uint64_t weight)
{
	(void)ctx;
	ml__upcall_mapped_drop(key, weight);
}

struct ml__ranges *ml__mapped_ranges_make(void)
{
	if (failed)
		return NULL;
	size_t bytes = ML__MAPPED_CAP * sizeof(struct ml__range);
	void *p =
	    ml__sys_mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		failed = true;
		ml__diag("no memory for the table of mapped ranges: memory "
		         "the program maps itself is not counted");
		return NULL;
	}
	ranges.r = p;
	ranges.cap = ML__MAPPED_CAP;
	ranges.rng = 0x6d6170706564; /* fixed: the cuts repeat run to run */
	ranges.drop = drop;
	return &ranges;
}

void ml__mapped_disable(void)
{
	ml__spin_lock(&ml__mapped_lock);
	atomic_store_explicit(&ml__mapped_on, false, memory_order_relaxed);
	int64_t was = (int64_t)ranges.counted;
	if (ranges.r)
		ml__ranges_put(&ranges, 0, UINTPTR_MAX, 0, 0, 0, 0);
	ml__spin_unlock(&ml__mapped_lock);
	if (was)
		ml__meter_mapped(-was);
}
