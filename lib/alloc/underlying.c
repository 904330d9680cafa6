/* The allocator underneath: glibc's, reached through its exported
 * __libc_* entry points (no dlsym bootstrap), what its blocks take, and
 * the requests it refuses.  The malloc family above (api/interpose.c)
 * calls it through ml__real; the meter reads its block sizes. */
#define _GNU_SOURCE
#include "alloc/alloc.h"
#include "sampler/sampler.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#ifdef ML_FAULT_INJECTION
static void *fail(void)
{
	errno = ENOMEM;
	return NULL;
}
#endif

/* ---- Requests the allocator refuses anyway ----------------------------
 *
 * Programs ask for impossible sizes on purpose (malloc(SIZE_MAX / 2) in
 * CPython's tests).  glibc refuses them; charged, one such request would
 * carry 2^63 / S samples and trip every limit.  A failed allocation
 * allocated nothing, so it is charged to nothing, and a request glibc
 * refuses fails exactly as it does without us (its errno).  Only a large
 * request can be refused for its size, so only those are tried on glibc
 * first: at least glibc's largest mmap threshold, glibc serves them with
 * one mmap and gives them back with one munmap (no arena is touched, the
 * dynamic threshold does not move), a cost next to the page faults of
 * using that much memory.  Only the slow path asks (for requests of at
 * least ML__PROBE_MIN): a request that does not borrow carries no sample,
 * so there is nothing to charge. */
bool ml__refused_anyway(size_t n)
{
	int e = errno;
	void *p = __libc_malloc(n);
	if (p)
		__libc_free(p);
	errno = e;
	return p == NULL;
}

/* ---- The real allocator, and fault injection for the tests ------------
 *
 * Every allocating call into glibc goes through this table (alloc.h).  In a
 * build configured with --enable-fault-injection, MEMLIMITS_FAULT=libc:N (tests
 * only) swaps in wrappers that make each call fail with probability 1/N, as
 * glibc does when it is out of memory, so the tests can check that such a
 * failure passes through untouched and is never taken for an interruption. */
struct ml__real ml__real = {__libc_malloc,   __libc_calloc, __libc_realloc,
                            __libc_memalign, __libc_valloc, __libc_pvalloc};

#ifdef ML_FAULT_INJECTION
static uint64_t fault_every;
static _Atomic uint64_t fault_calls;

/* The k-th call fails when the k-th output of splitmix64 (seed 0) is a
 * multiple of N: independent of which function calls and of the pattern
 * of calls (with "every Nth call", a loop of malloc then realloc and an
 * even N fails only the reallocs), and the same faults on every run of a
 * deterministic program. */
static bool fault_now(void)
{
	uint64_t x =
	    atomic_fetch_add_explicit(&fault_calls, 1, memory_order_relaxed) *
	    0x9e3779b97f4a7c15u;
	return ml__splitmix64(&x) % fault_every == 0;
}

/* Each wrapper calls glibc itself: the table points at the wrappers. */
static void *fault_malloc(size_t n)
{
	return fault_now() ? fail() : __libc_malloc(n);
}
static void *fault_calloc(size_t a, size_t b)
{
	return fault_now() ? fail() : __libc_calloc(a, b);
}
static void *fault_realloc(void *p, size_t n)
{
	/* realloc(p, 0) frees p and needs no memory: it never fails. */
	return n && fault_now() ? fail() : __libc_realloc(p, n);
}
static void *fault_memalign(size_t a, size_t n)
{
	return fault_now() ? fail() : __libc_memalign(a, n);
}
static void *fault_valloc(size_t n)
{
	return fault_now() ? fail() : __libc_valloc(n);
}
static void *fault_pvalloc(size_t n)
{
	return fault_now() ? fail() : __libc_pvalloc(n);
}
#endif

void *ml__malloc_plain(size_t n)
{
	return ml__real.malloc(n);
}

#ifdef ML_FAULT_INJECTION
void ml__fault_libc(uint64_t every)
{
	fault_every = every;
	ml__real =
	    (struct ml__real){fault_malloc,   fault_calloc, fault_realloc,
	                      fault_memalign, fault_valloc, fault_pvalloc};
}
#endif

/* Under valgrind (memcheck replaces glibc's allocator below us, see
 * docs/reliability.md) there is no glibc header to read: block sizes come
 * from the replacement's malloc_usable_size, plus one header word, so the
 * meter keeps its unit. */
static size_t (*foreign_usable)(void *);

size_t ml__chunk_bytes(const void *p)
{
	if (ml__unlikely(foreign_usable != NULL))
		return foreign_usable((void *)p) + sizeof(size_t);
	return ml__chunk_word(p) & ~(size_t)7;
}

void ml__foreign_allocator(size_t (*usable)(void *))
{
	foreign_usable = usable;
}

bool ml__allocator_foreign(void)
{
	return foreign_usable != NULL;
}

/* Mirrors glibc's musable(): no __libc_ entry point exists for it. */
size_t ml__usable_size(void *p)
{
	if (!p)
		return 0;
	if (ml__unlikely(foreign_usable != NULL))
		return foreign_usable(p);
	size_t w = ml__chunk_word(p), size = w & ~(size_t)7;
	if (w & 2) /* mmapped: two header words */
		return size - 2 * sizeof(size_t);
	/* In use iff the next chunk's PREV_INUSE bit is set. */
	const size_t *next =
	    (const size_t *)(const void *)((const char *)p -
	                                   2 * sizeof(size_t) + size);
	return (next[1] & 1) ? size - sizeof(size_t) : 0;
}

/* valgrind's heap tools (memcheck, helgrind, drd, massif, dhat) preload
 * vgpreload_<tool>-*.so and replace glibc's allocator; with
 * --soname-synonyms=somalloc=nouserintercepts ours stays on top.  Their
 * blocks have no glibc headers: ask their malloc_usable_size.  (callgrind
 * and cachegrind preload only vgpreload_core and keep glibc's allocator.) */
void ml__detect_foreign_allocator(void)
{
	const char *pre = getenv("LD_PRELOAD");
	for (const char *p = pre; p && (p = strstr(p, "/vgpreload_")); p++)
		if (strncmp(p, "/vgpreload_core", 15) != 0) {
			size_t (*usable)(void *) = (size_t(*)(void *))dlsym(
			    RTLD_NEXT, "malloc_usable_size");
			if (usable)
				ml__foreign_allocator(usable);
			return;
		}
}
