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

/* The system call itself: on x86-64 the instruction (a call of
 * syscall(2) costs as much again as the rest of an idle mmap+munmap pair,
 * issue 34), else syscall(2).  Either sets errno and returns -1 for the
 * kernel's -4095 .. -1, which no mapping's address can be. */
#if defined(__x86_64__) && !defined(ML_NO_ASM)
static inline long sys6(long nr, long a, long b, long c, long d, long e, long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
	                 : "=a"(r)
	                 : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8),
	                   "r"(r9)
	                 : "rcx", "r11", "memory");
	if (ml__unlikely((unsigned long)r > -4096ul)) {
		errno = (int)-r;
		return -1;
	}
	return r;
}
#else
#define sys6(nr, a, b, c, d, e, f) syscall(nr, a, b, c, d, e, f)
#endif

void *ml__sys_mmap(void *addr, size_t len, int prot, int flags, int fd,
                   long off)
{
	return (void *)sys6(SYS_mmap, (long)addr, (long)len, prot, flags, fd,
	                    off);
}

int ml__sys_munmap(void *addr, size_t len)
{
	return (int)sys6(SYS_munmap, (long)addr, (long)len, 0, 0, 0, 0);
}

int ml__sys_mprotect(void *addr, size_t len, int prot)
{
	return (int)sys6(SYS_mprotect, (long)addr, (long)len, prot, 0, 0, 0);
}

void *ml__sys_mremap(void *old, size_t oldlen, size_t newlen, int flags,
                     void *to)
{
	return (void *)sys6(SYS_mremap, (long)old, (long)oldlen, (long)newlen,
	                    flags, (long)to, 0);
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
