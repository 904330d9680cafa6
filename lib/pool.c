/* The library's own memory: fixed-size slots carved from mmap'd slabs, so
 * that nothing we keep ever goes through the interposed allocator.  Freed
 * slots are reused, so a million tasks in a row leave the footprint flat. */
#define _GNU_SOURCE
#include "internal.h"

#include <sched.h>
#include <sys/mman.h>

#define SLAB_BYTES ((size_t)64 * 1024)

static _Atomic uint64_t pages;
bool ml__fault_pool;

void ml__spin_lock(atomic_flag *l)
{
	while (atomic_flag_test_and_set_explicit(l, memory_order_acquire))
		sched_yield();
}

void ml__spin_unlock(atomic_flag *l)
{
	atomic_flag_clear_explicit(l, memory_order_release);
}

void *ml__raw_alloc(size_t bytes)
{
	if (ml__unlikely(ml__fault_pool))
		return NULL;
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	atomic_fetch_add(&pages, bytes / 4096);
	return p;
}

void ml__raw_free(void *p, size_t bytes)
{
	if (p && munmap(p, bytes) == 0)
		atomic_fetch_sub(&pages, bytes / 4096);
}

uint64_t ml__pool_pages(void)
{
	return atomic_load(&pages);
}

void *ml__pool_get(struct ml__pool *p)
{
	ml__spin_lock(&p->lock);
	if (!p->free) {
		char *slab = ml__raw_alloc(SLAB_BYTES);
		if (!slab) {
			ml__spin_unlock(&p->lock);
			return NULL;
		}
		/* Thread the new slots onto the free list. */
		for (size_t off = 0; off + p->slot <= SLAB_BYTES;
		     off += p->slot) {
			*(void **)(void *)(slab + off) = p->free;
			p->free = slab + off;
		}
	}
	void *s = p->free;
	p->free = *(void **)s;
	p->live++;
	ml__spin_unlock(&p->lock);
	return s;
}

void ml__pool_put(struct ml__pool *p, void *s)
{
	if (!s)
		return;
	ml__spin_lock(&p->lock);
	*(void **)s = p->free;
	p->free = s;
	p->live--;
	ml__spin_unlock(&p->lock);
}
