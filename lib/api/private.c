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
 * - shmat of an IPC_PRIVATE segment, writable: private memory in effect
 *   (no other process can find it by a key), counted at its attachment
 *   for the segment's size (shmctl IPC_STAT), uncounted at shmdt.  The
 *   attachments counted are kept in a small fixed table (no malloc): a
 *   segment attached twice counts once; one the table has no room for is
 *   not counted.  A segment with a key is shared between processes, as a
 *   shared mapping is, and is not counted: the bytes attached so are kept
 *   for the report (run/report.c), as are those the table had no room for.
 *
 * The calls are forwarded to libc's own __sbrk and brk, read from its
 * symbol table (util/elf.c): tcmalloc exports an sbrk of its own, and a
 * break moved with the system call alone would leave glibc's record of it
 * (__curbrk) behind, for its malloc to undo. */
#define _GNU_SOURCE
#include "api/api.h"
#include "util/elf.h"

#include <errno.h>
#include <sys/ipc.h>
#include <sys/shm.h>
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

/* ---- SysV shared memory ------------------------------------------------ */

static void *(*_Atomic libc_shmat)(int, const void *, int);
static int (*_Atomic libc_shmdt)(const void *);

_Atomic uint64_t ml__shm_keyed_bytes, ml__shm_untracked_bytes;

static bool shm_calls(void)
{
	if (ml__likely(
	        atomic_load_explicit(&libc_shmat, memory_order_acquire) &&
	        atomic_load_explicit(&libc_shmdt, memory_order_acquire)))
		return true;
	void *a = ml__elf_libc_symbol("shmat"),
	     *d = ml__elf_libc_symbol("shmdt");
	if (!a || !d)
		return false;
	atomic_store_explicit(&libc_shmdt, (int (*)(const void *))d,
	                      memory_order_release);
	atomic_store_explicit(&libc_shmat, (void *(*)(int, const void *, int))a,
	                      memory_order_release);
	return true;
}

/* A slot is free (at 0), claimed (at 1: being attached) or holds a
 * counted attachment [at, at + len) of segment id. */
#define SHM_SLOTS 1024
static struct shm_slot {
	_Atomic uintptr_t at;
	uintptr_t len;
	int id;
} shm_slots[SHM_SLOTS];

static struct shm_slot *shm_claim(int id, bool *again)
{
	*again = false;
	for (unsigned i = 0; i < SHM_SLOTS; i++) {
		const struct shm_slot *s = &shm_slots[i];
		if (atomic_load_explicit(&s->at, memory_order_acquire) > 1 &&
		    s->id == id) {
			*again = true;
			return NULL;
		}
	}
	for (unsigned i = 0; i < SHM_SLOTS; i++) {
		uintptr_t none = 0;
		if (atomic_compare_exchange_strong(&shm_slots[i].at, &none, 1))
			return &shm_slots[i];
	}
	return NULL;
}

struct attach {
	int id, flags;
	const void *addr;
	void *p;
};

static uintptr_t attach_make(void *arg)
{
	struct attach *a = arg;
	a->p = atomic_load_explicit(&libc_shmat, memory_order_relaxed)(
	    a->id, a->addr, a->flags);
	return a->p == (void *)-1 ? 0 : (uintptr_t)a->p;
}

ML__API void *shmat(int id, const void *addr, int flags)
{
	uintptr_t pc = (uintptr_t)__builtin_return_address(0);
	if (!shm_calls()) {
		errno = EINVAL;
		return (void *)-1;
	}
	void *(*attach)(int, const void *, int) =
	    atomic_load_explicit(&libc_shmat, memory_order_relaxed);
	struct shmid_ds ds;
	int e = errno;
	if (shmctl(id, IPC_STAT, &ds) != 0) {
		errno = e;
		return attach(id, addr, flags); /* its own error */
	}
	errno = e;
	uintptr_t n = page_up((uintptr_t)ds.shm_segsz);
	if (ds.shm_perm.__key != IPC_PRIVATE) {
		void *p = attach(id, addr, flags);
		if (p != (void *)-1)
			atomic_fetch_add_explicit(&ml__shm_keyed_bytes, n,
			                          memory_order_relaxed);
		return p;
	}
	if (flags & SHM_RDONLY)
		return attach(id, addr, flags); /* nothing written through it */
	bool again;
	struct shm_slot *s = shm_claim(id, &again);
	if (!s) {
		void *p = attach(id, addr, flags);
		if (p != (void *)-1 && !again)
			atomic_fetch_add_explicit(&ml__shm_untracked_bytes, n,
			                          memory_order_relaxed);
		return p;
	}
	struct attach a = {
	    .id = id, .flags = flags, .addr = addr, .p = (void *)-1};
	uintptr_t got = ml__map_private(n, attach_make, &a, "shmat", pc);
	if (!got) {
		atomic_store_explicit(&s->at, 0, memory_order_release);
		if (a.p == (void *)-1)
			return (void *)-1; /* refused (ENOMEM) or failed */
		return a.p;
	}
	s->len = n;
	s->id = id;
	atomic_fetch_add_explicit(&ml__shm_private_bytes, n,
	                          memory_order_relaxed);
	atomic_store_explicit(&s->at, got, memory_order_release);
	return a.p;
}

ML__API int shmdt(const void *addr)
{
	if (!shm_calls()) {
		errno = EINVAL;
		return -1;
	}
	int r = atomic_load_explicit(&libc_shmdt, memory_order_relaxed)(addr);
	if (r != 0)
		return r;
	uintptr_t at = (uintptr_t)addr;
	for (unsigned i = 0; i < SHM_SLOTS && at > 1; i++) {
		struct shm_slot *s = &shm_slots[i];
		uintptr_t was = at;
		if (atomic_load_explicit(&s->at, memory_order_acquire) != at)
			continue;
		uintptr_t len = s->len;
		/* The one detaching thread takes the slot (a slot claimed by
		 * another attachment is 1, never at). */
		if (!atomic_compare_exchange_strong(&s->at, &was, 1))
			continue;
		int e = errno;
		ml__unmap_private(at, at + len);
		errno = e;
		atomic_fetch_sub_explicit(&ml__shm_private_bytes, len,
		                          memory_order_relaxed);
		atomic_store_explicit(&s->at, 0, memory_order_release);
		break;
	}
	return 0;
}
