/* The library's own memory: fixed-size slots carved from mmap'd slabs, so
 * that nothing we keep ever goes through the interposed allocator.  Freed
 * slots are reused, so a million tasks in a row leave the footprint flat. */
#define _GNU_SOURCE
#include "util/util.h"

#include <errno.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLAB_BYTES ((size_t)64 * 1024)

bool ml__fault_pool;

void *ml__raw_alloc(size_t bytes)
{
	if (ml__unlikely(ml__fault_pool))
		return NULL;
	void *p = ml__sys_mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

void ml__raw_free(void *p, size_t bytes)
{
	if (p)
		ml__sys_munmap(p, bytes);
}

void *ml__raw_once(void *_Atomic *slot, size_t bytes)
{
	void *t = atomic_load_explicit(slot, memory_order_acquire);
	if (ml__likely(t != NULL))
		return t;
	void *fresh = ml__raw_alloc(bytes);
	if (!fresh)
		return NULL;
	/* Two threads making it at once: one mapping wins, the other goes. */
	if (!atomic_compare_exchange_strong(slot, &t, fresh)) {
		ml__raw_free(fresh, bytes);
		return t;
	}
	return fresh;
}

/* The mmap family by syscall(2) where util.h has no inline instruction. */
#if defined(__x86_64__) && !defined(ML_NO_ASM)
ML__COLD long ml__sys_fail(long r)
{
	errno = (int)-r;
	return -1;
}
#else
void *ml__sys_mmap(void *addr, size_t len, int prot, int flags, int fd,
                   long off)
{
	return (void *)syscall(SYS_mmap, (long)addr, (long)len, prot, flags, fd,
	                       off);
}

int ml__sys_munmap(void *addr, size_t len)
{
	return (int)syscall(SYS_munmap, (long)addr, (long)len);
}

int ml__sys_mprotect(void *addr, size_t len, int prot)
{
	return (int)syscall(SYS_mprotect, (long)addr, (long)len, prot);
}

void *ml__sys_mremap(void *old, size_t oldlen, size_t newlen, int flags,
                     void *to)
{
	return (void *)syscall(SYS_mremap, (long)old, (long)oldlen,
	                       (long)newlen, flags, (long)to);
}
#endif

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
