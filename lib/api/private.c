/* Private memory a program gets from libc by other ways than the malloc
 * family and the mmap family (issue 41, item 6): run mode counts it as it
 * counts a mapping (api/mmap.c's ml__map_private), refused the same way.
 *
 * - sbrk, __sbrk and brk: the program's own growth of the break counts
 *   as heap, its shrinking uncounts.  glibc's malloc moves the break
 *   through libc's internal __sbrk, which never reaches these names (its
 *   arena is counted as blocks); an allocator underneath that calls sbrk
 *   itself (tcmalloc's SbrkSysAllocator) is told by the caller's pc in
 *   its object, as for its mappings: its blocks are counted as blocks.
 *
 * The calls are forwarded to libc's own __sbrk and brk, read from its
 * symbol table (util/elf.c): tcmalloc exports an sbrk of its own, and a
 * break moved with the system call alone would leave glibc's record of it
 * (__curbrk) behind, for its malloc to undo. */
#define _GNU_SOURCE
#include "api/api.h"
#include "util/elf.h"

#include <errno.h>
#include <unistd.h>

static void *(*_Atomic libc_sbrk)(intptr_t);
static int (*_Atomic libc_brk)(void *);

/* libc's own functions, found at the first call (allocating nothing). */
static bool break_calls(void)
{
	if (ml__likely(atomic_load_explicit(&libc_sbrk, memory_order_acquire) &&
	               atomic_load_explicit(&libc_brk, memory_order_acquire)))
		return true;
	void *s = ml__elf_libc_symbol("__sbrk"),
	     *b = ml__elf_libc_symbol("brk");
	if (!s || !b)
		return false;
	atomic_store_explicit(&libc_brk, (int (*)(void *))b,
	                      memory_order_release);
	atomic_store_explicit(&libc_sbrk, (void *(*)(intptr_t))s,
	                      memory_order_release);
	return true;
}

static inline uintptr_t page_up(uintptr_t x)
{
	uintptr_t pg = (uintptr_t)getpagesize();
	return (x + pg - 1) & ~(pg - 1);
}

/* The break now, or (uintptr_t)-1 when libc cannot say. */
static uintptr_t break_now(void)
{
	return (uintptr_t)atomic_load_explicit(&libc_sbrk,
	                                       memory_order_relaxed)(0);
}

struct grow {
	intptr_t incr; /* sbrk's argument, or 0 for brk */
	void *to;      /* brk's */
	uintptr_t cur; /* the break before (brk) */
	void *old;     /* sbrk's result */
};

static uintptr_t grow_make(void *arg)
{
	struct grow *g = arg;
	if (g->incr) {
		g->old = atomic_load_explicit(&libc_sbrk,
		                              memory_order_relaxed)(g->incr);
		return g->old == (void *)-1 ? 0 : page_up((uintptr_t)g->old);
	}
	if (atomic_load_explicit(&libc_brk, memory_order_relaxed)(g->to) != 0)
		return 0;
	return page_up(g->cur);
}

/* The break moved from cur to `to`, by sbrk(incr) or brk(to): growth
 * counts (and may be refused), shrinking uncounts.  true when made;
 * *old is sbrk's result. */
static bool move_break(intptr_t incr, void *to, uintptr_t pc, void **old)
{
	uintptr_t cur = break_now();
	if (cur == (uintptr_t)-1)
		return false; /* errno: libc's */
	uintptr_t end;
	bool up;
	if (incr) {
		up = incr > 0;
		end = up ? cur + (uintptr_t)incr : cur - (0 - (uintptr_t)incr);
		/* Past either end of the address space: libc's own error. */
		if (up ? end < cur : end > cur)
			up = false, end = cur;
	} else {
		end = (uintptr_t)to;
		up = end > cur;
	}
	struct grow g = {.incr = incr, .to = to, .cur = cur, .old = (void *)-1};
	if (!up) {
		if (end < cur)
			ml__unmap_private(page_up(end), page_up(cur));
		bool made = grow_make(&g) != 0;
		*old = g.old;
		return made;
	}
	uintptr_t made = ml__map_private(page_up(end) - page_up(cur), grow_make,
	                                 &g, incr ? "sbrk" : "brk", pc);
	*old = g.old;
	return made != 0;
}

static void *sbrk_from(intptr_t incr, uintptr_t pc)
{
	if (!break_calls()) {
		errno = ENOMEM;
		return (void *)-1;
	}
	if (!incr)
		return (void *)break_now();
	void *old = (void *)-1;
	if (!move_break(incr, NULL, pc, &old))
		return (void *)-1;
	return old;
}

ML__API void *sbrk(intptr_t incr)
{
	return sbrk_from(incr, (uintptr_t)__builtin_return_address(0));
}

ML__API void *__sbrk(intptr_t incr);
ML__API void *__sbrk(intptr_t incr)
{
	return sbrk_from(incr, (uintptr_t)__builtin_return_address(0));
}

ML__API int brk(void *to)
{
	if (!break_calls()) {
		errno = ENOMEM;
		return -1;
	}
	void *old;
	return move_break(0, to, (uintptr_t)__builtin_return_address(0), &old)
	           ? 0
	           : -1;
}
