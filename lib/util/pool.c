/* The library's own memory: fixed-size slots carved from mmap'd slabs, so
 * that nothing we keep ever goes through the interposed allocator.  Freed
 * slots are reused, so a million tasks in a row leave the footprint flat. */
#define _GNU_SOURCE
#include "util/util.h"

#include <sys/mman.h>

#define SLAB_BYTES ((size_t)64 * 1024)

bool ml__fault_pool;

void *ml__raw_alloc(size_t bytes)
{
	if (ml__unlikely(ml__fault_pool))
		return NULL;
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void ml__raw_free(void *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
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
	ml__spin_unlock(&p->lock);
}
