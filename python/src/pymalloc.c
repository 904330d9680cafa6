/* memlimits._memlimits, pymalloc's side: the arenas (raw mappings that
 * the library does not count, in a bitmap that tells an arena's object
 * from a RAW block in one load) and the MEM and OBJ domains' wrappers,
 * which note each object carved from an arena with ml_note_alloc_block
 * (its size: its size class, read from its pool's header) and refuse it
 * when the library says so. */
#include "module.h"

#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* ---- Arenas: raw mappings, in granules of 256 KiB, in a bitmap ---------
 *
 * A granule is ours whole or not at all, so that no other mapping (a
 * large RAW block) is ever taken for an arena.  256 KiB: Debian's 3.11
 * makes its arenas that size (ARENA_SIZE; 1 MiB with other build
 * options, also whole granules). */

#define ARENA_BITS 18
/* A pool's size: 16 KiB from 3.10 on (USE_LARGE_POOLS, with the radix
 * tree), 4 KiB (a page) before; validate_classes checks it. */
#if PY_VERSION_HEX >= 0x030A0000
#define POOL_BITS 14
#else
#define POOL_BITS 12
#endif
#define POOL_SZIDX_OFF 36 /* struct pool_header's szidx (obmalloc.c) */
#define ALIGN_SHIFT 4
static uint8_t *arena_map; /* a bit per granule of a 47-bit space */
static int class_ok;       /* the pool header reads as validated */

static void *sys_mmap(size_t n)
{
	long r = syscall(SYS_mmap, NULL, n, PROT_READ | PROT_WRITE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	return r == -1 ? NULL : (void *)r;
}
static void sys_munmap(void *p, size_t n)
{
	syscall(SYS_munmap, p, n);
}

static inline int in_arena(const void *p)
{
	uintptr_t m = (uintptr_t)p >> ARENA_BITS;
	if (m >> (47 - ARENA_BITS))
		return 0;
	return (arena_map[m >> 3] >> (m & 7)) & 1;
}
static uintptr_t map_lo = UINTPTR_MAX, map_hi; /* granules ever marked */
static void arena_mark(void *p, size_t n, int on)
{
	if ((uintptr_t)p >> ARENA_BITS < map_lo)
		map_lo = (uintptr_t)p >> ARENA_BITS;
	if (((uintptr_t)p + n) >> ARENA_BITS > map_hi)
		map_hi = ((uintptr_t)p + n) >> ARENA_BITS;
	for (uintptr_t m = (uintptr_t)p >> ARENA_BITS;
	     m < ((uintptr_t)p + n + (1u << ARENA_BITS) - 1) >> ARENA_BITS;
	     m++) {
		if (on)
			arena_map[m >> 3] |= (uint8_t)(1u << (m & 7));
		else
			arena_map[m >> 3] &= (uint8_t) ~(1u << (m & 7));
	}
}

static void *arena_alloc(void *ctx, size_t n)
{
	(void)ctx;
	size_t a = (size_t)1 << ARENA_BITS;
	size_t whole = (n + a - 1) & ~(a - 1);
	char *m = sys_mmap(whole + a);
	if (!m)
		return NULL;
	char *p = (char *)(((uintptr_t)m + a - 1) & ~(uintptr_t)(a - 1));
	if (p > m)
		sys_munmap(m, (size_t)(p - m));
	if (p + whole < m + whole + a)
		sys_munmap(p + whole, (size_t)(m + whole + a - (p + whole)));
	if ((uintptr_t)p >> 47) {
		sys_munmap(p, whole);
		return NULL;
	}
	arena_mark(p, whole, 1);
	return p;
}
static void arena_free(void *ctx, void *p, size_t n)
{
	(void)ctx;
	size_t a = (size_t)1 << ARENA_BITS;
	size_t whole = (n + a - 1) & ~(a - 1);
	/* An arena made before the module was imported (pymalloc's own
	 * mmap): exactly what it mapped. */
	if (!in_arena(p)) {
		mlpy_old_pools_drop(p, n);
		sys_munmap(p, n);
		return;
	}
	arena_mark(p, whole, 0);
	sys_munmap(p, whole);
}

static inline uintptr_t pool_of(const void *p)
{
	return (uintptr_t)p & ~(((uintptr_t)1 << POOL_BITS) - 1);
}
/* The size class of a block of pymalloc's (in one of our arenas, or in a
 * pool of oldpools.c). */
static inline size_t block_class(const void *p)
{
	unsigned szidx = *(const unsigned *)(pool_of(p) + POOL_SZIDX_OFF);
	return ((size_t)szidx + 1) << ALIGN_SHIFT;
}
/* The class of p when it is pymalloc's, else 0 (a RAW block).  Outside
 * our arenas only a learnt pool's block is taken (never a read of a RAW
 * block's neighbourhood). */
static inline size_t class_of(const void *p)
{
	if (in_arena(p))
		return block_class(p);
	if (p && !mlpy_preloaded && mlpy_old_pool_has(pool_of(p)))
		return block_class(p);
	return 0;
}

/* ---- The MEM and OBJ domains: pymalloc, wrapped ------------------------ */

static PyMemAllocatorEx prev_mem, prev_obj;

/* Objects are noted where something reads them: on a thread inside a
 * task of this module (`mlpy_entered`, its slices open here), or everywhere
 * while a global limit is set or under the preload (`mlpy_count_all`: the
 * heap, run mode's process task).  Elsewhere an allocation is
 * CPython's alone after one test: no task would be charged, and the
 * sampler's Poisson process over the bytes it does see stays one
 * (memorylessness).  Frees are always noted: a block allocated inside a
 * task may be held and freed anywhere. */
MLPY_TLS unsigned mlpy_entered;
int mlpy_count_all;

static inline int noting(void)
{
	return mlpy_entered || mlpy_count_all;
}

/* Inside a wrapper of the MEM or OBJ domain on this thread, noting: a
 * refusal now is of the interpreter's own allocation, which the refusal
 * guard may let through.  Under the preload a C library's malloc (lxml's
 * libxml2, PIL) is refused too, and gets no such grace: libxml2 goes on
 * after a NULL, and 256 allocations granted after each refusal let a
 * billion laughs reach 1.2 GB under a 64 MiB limit.  The same holds
 * without the preload once the other objects are patched (hooks.c,
 * mlpy_c_counted).  Where neither, the library sees the domains' blocks
 * only: the wrappers that mark (MARK 1) go in where C code's malloc is
 * counted alone, as the mark costs the regex loop 1.3 points inside a
 * block. */
MLPY_TLS unsigned mlpy_in_python;
/* The size of the allocation the library may be about to refuse, for the
 * refusal guard's budget (guard.c): set by the RAW domain's functions and
 * by the marking wrappers (the preload), where a request may be large;
 * an object of an arena leaves it as it is (the guard takes 0 as 512
 * bytes, the largest class, and a stale size only counts more). */
MLPY_TLS size_t mlpy_req;

/* p as pymalloc made it, noted; raw: mlpy_raw_calls before the call.
 * A block outside our arenas made with no RAW call is pymalloc's, from a
 * pool of an arena made before the import (the RAW domain is ours
 * without the preload): its pool is learnt (oldpools.c), and the block
 * noted as ours are. */
static inline void *noted(PyMemAllocatorEx *prev, void *p, unsigned raw)
{
	size_t c;
	if (!p)
		return p;
	if (in_arena(p)) {
		c = block_class(p);
	} else if (!mlpy_preloaded && mlpy_raw_calls == raw) {
		if (!mlpy_old_pool_has(pool_of(p)))
			mlpy_old_pool_add(pool_of(p));
		c = block_class(p);
	} else {
		return p;
	}
	if (!ml_note_alloc_block(p, c)) {
		prev->free(prev->ctx, p);
		return NULL;
	}
	return p;
}
static inline void *pm_malloc_(void *ctx, size_t n, unsigned mark)
{
	PyMemAllocatorEx *prev = ctx;
	if (!noting())
		return prev->malloc(prev->ctx, n);
	if (mark)
		mlpy_req = n;
	mlpy_in_python += mark;
	unsigned raw = mlpy_raw_calls;
	void *p = noted(prev, prev->malloc(prev->ctx, n), raw);
	mlpy_in_python -= mark;
	return p;
}
static inline void *pm_calloc_(void *ctx, size_t a, size_t b, unsigned mark)
{
	PyMemAllocatorEx *prev = ctx;
	if (!noting())
		return prev->calloc(prev->ctx, a, b);
	if (mark)
		mlpy_req = a * b;
	mlpy_in_python += mark;
	unsigned raw = mlpy_raw_calls;
	void *p = noted(prev, prev->calloc(prev->ctx, a, b), raw);
	mlpy_in_python -= mark;
	return p;
}
/* The bytes of objects the meter never counted (made before it ran),
 * set when a global limit switches it on (mlpy_meter_started), and
 * grown by a block pymalloc moved that the library refused (pm_realloc_):
 * the first frees, up to that many bytes, subtract nothing from it.  Which
 * free is of an uncounted object is not known, so the meter stays low by
 * max(0, debt - bytes freed since), never high, and is exact once that
 * many bytes were freed; it went below zero and stayed wrong for good
 * (set after 200 MB of strs were made and freed: heap() 0). */
static size_t debt;

/* realloc of a block in one of our arenas, inside a task: pymalloc's own
 * realloc (obmalloc.c, pymalloc_realloc) done here, so that the new
 * block is noted while the old one still exists, and a refusal leaves
 * the old block as it was (NULL: the caller raises MemoryError).  pymalloc
 * moved such a block itself, freeing the old one before the note could
 * refuse: a stopped block's strings finished by a shrinking realloc
 * ("%d" % i, str.format: _PyUnicodeWriter_Finish) ran on.  Kept in place
 * exactly where pymalloc keeps it (a shrink to more than 3/4 of the
 * class), moved otherwise. */
static inline void *pm_move(PyMemAllocatorEx *prev, void *p, size_t old,
                            size_t n)
{
	if (n && n <= old && 4 * n > 3 * old)
		return prev->realloc(prev->ctx, p, n); /* p itself */
	unsigned raw = mlpy_raw_calls;
	void *q = noted(prev, prev->malloc(prev->ctx, n), raw);
	if (!q)
		return NULL;
	memcpy(q, p, n < old ? n : old);
	ml_note_free_block(p, old);
	prev->free(prev->ctx, p);
	return q;
}
static inline void *pm_realloc_(void *ctx, void *p, size_t n, unsigned mark)
{
	PyMemAllocatorEx *prev = ctx;
	size_t old = p ? class_of(p) : 0;
	int on = noting();
	if (on && (old || !p)) {
		/* Into a new block (noted, refusable), or moved ourselves. */
		if (mark)
			mlpy_req = n;
		mlpy_in_python += mark;
		unsigned raw = mlpy_raw_calls;
		void *q = p ? pm_move(prev, p, old, n)
		            : noted(prev, prev->malloc(prev->ctx, n), raw);
		mlpy_in_python -= mark;
		return q;
	}
	/* Not noting, or a RAW block, which pymalloc reallocs in the RAW
	 * domain (counted and refused there, the old block kept on NULL). */
	mark &= (unsigned)on;
	if (mark)
		mlpy_req = n;
	mlpy_in_python += mark;
	void *q = prev->realloc(prev->ctx, p, n);
	mlpy_in_python -= mark;
	if (!q || (q == p && old))
		return q; /* failed, or in place in its pool: same class */
	if (old)
		ml_note_free_block(p, old);
	/* A block of a pool that is not ours (an arena made before the
	 * import, which under the preload is counted as the mapping it is)
	 * that pymalloc moved into one of our arenas: with its own malloc,
	 * past our wrapper, so the new block is noted here.  Every string
	 * finished by a shrinking realloc ("%d" % i, str.format, a + b in
	 * place) took that way under the preload, from a buffer in an old
	 * pool: not counted, then subtracted at its free (1.5 GB resident
	 * under --heap-limit 200MiB).  The old block is gone, so a refusal
	 * cannot fail this call: the block stays, uncounted, its bytes a
	 * debt its free pays (below), and the task, interrupted by the
	 * refusal, has its next allocation refused. */
	if (on && !old && q != p && in_arena(q)) {
		size_t c = block_class(q);
		if (!ml_note_alloc_block(q, c))
			debt += c;
	}
	/* Not noting: nothing is counted for the new block (no task would
	 * be charged), as pm_malloc_ counts nothing then. */
	return q;
}
#define MARK_VARIANTS(suffix, mark)                                   \
	static void *pm_malloc##suffix(void *ctx, size_t n)           \
	{                                                             \
		return pm_malloc_(ctx, n, mark);                      \
	}                                                             \
	static void *pm_calloc##suffix(void *ctx, size_t a, size_t b) \
	{                                                             \
		return pm_calloc_(ctx, a, b, mark);                   \
	}                                                             \
	static void *pm_realloc##suffix(void *ctx, void *p, size_t n) \
	{                                                             \
		return pm_realloc_(ctx, p, n, mark);                  \
	}
MARK_VARIANTS(, 0)
MARK_VARIANTS(_marking, 1)
static void pm_free(void *ctx, void *p)
{
	PyMemAllocatorEx *prev = ctx;
	size_t c = p ? class_of(p) : 0;
	if (c) {
		if (__builtin_expect(debt != 0, 0)) {
			size_t d = debt < c ? debt : c;
			debt -= d;
			c -= d;
		}
		ml_note_free_block(p, c);
	}
	prev->free(prev->ctx, p);
}

/* A global limit switched the meter on (on) or off: the live objects of
 * our arenas (each pool's count of blocks in use, at offset 0 of its
 * header, times its class) and of the learnt pools are the debt.  Under
 * the GIL, which pymalloc's changes hold. */
void mlpy_meter_started(int on)
{
	debt = 0;
	for (uintptr_t m = map_lo; on && arena_map && m < map_hi; m++)
		for (uintptr_t q = m << ARENA_BITS;
		     in_arena((void *)q) && q < (m + 1) << ARENA_BITS;
		     q += (uintptr_t)1 << POOL_BITS)
			debt += *(const unsigned *)q * block_class((void *)q);
	for (size_t i = 0; on && i < MLPY_OLD_SLOTS; i++)
		if (mlpy_old_slots[i])
			debt += *(const unsigned *)mlpy_old_slots[i] *
			        block_class((void *)mlpy_old_slots[i]);
}

/* The pool header is read as CPython 3.10 to 3.13 lay it out: checked on
 * blocks of every size class before any hook goes in. */
static int validate_classes(void)
{
	for (size_t n = 1; n <= 512; n += 3) {
		void *p = PyObject_Malloc(n);
		if (!p)
			return -1;
		size_t c = block_class(p);
		PyObject_Free(p);
		if (c < n || c - n >= ((size_t)1 << ALIGN_SHIFT))
			return -1;
	}
	return 0;
}

/* Our wrapper of domain d (MEM or OBJ), as PyMem_SetAllocator takes it,
 * and the allocator it forwards to: mlpy_wrap_domains puts them in, and
 * rehook.c compares the domain with them at every enter and puts them
 * back over whatever replaced them. */
static int wrapped_marking;
PyMemAllocatorEx *mlpy_domain_prev(PyMemAllocatorDomain d)
{
	return d == PYMEM_DOMAIN_MEM ? &prev_mem : &prev_obj;
}
void mlpy_domain_ours(PyMemAllocatorDomain d, PyMemAllocatorEx *a)
{
	PyMemAllocatorEx w = {mlpy_domain_prev(d), pm_malloc, pm_calloc,
	                      pm_realloc, pm_free};
	if (wrapped_marking) {
		w.malloc = pm_malloc_marking;
		w.calloc = pm_calloc_marking;
		w.realloc = pm_realloc_marking;
	}
	*a = w;
}

/* The domains' wrappers, from the first limit on (mlpy_wrap, hooks.c). */
void mlpy_wrap_domains(int marking)
{
	wrapped_marking = marking;
	PyMemAllocatorEx mem, obj;
	PyMem_GetAllocator(PYMEM_DOMAIN_MEM, &prev_mem);
	PyMem_GetAllocator(PYMEM_DOMAIN_OBJ, &prev_obj);
	mlpy_domain_ours(PYMEM_DOMAIN_MEM, &mem);
	mlpy_domain_ours(PYMEM_DOMAIN_OBJ, &obj);
	PyMem_SetAllocator(PYMEM_DOMAIN_MEM, &mem);
	PyMem_SetAllocator(PYMEM_DOMAIN_OBJ, &obj);
}

/* The arenas are ours from the import on, so that objects in the arenas
 * pymalloc makes before the first limit count from then.  0, or -1 with
 * why in mlpy_counting (nothing changed). */
int mlpy_arenas_install(void)
{
	if (validate_classes() != 0) {
		mlpy_counting =
		    "off: pymalloc's pools are not laid out as expected";
		return -1;
	}
	class_ok = 1;
	arena_map = sys_mmap((size_t)1 << (47 - ARENA_BITS - 3));
	if (!arena_map) {
		mlpy_counting = "off: no memory for the arena map";
		return -1;
	}
	PyObjectArenaAllocator arenas = {NULL, arena_alloc, arena_free};
	PyObject_SetArenaAllocator(&arenas);
	return 0;
}
