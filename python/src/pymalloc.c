/* memlimits._memlimits, pymalloc's side: the MEM and OBJ domains'
 * wrappers, which note each object carved from an arena with
 * ml_note_alloc_block (its size: its size class, read from its pool's
 * header) and refuse it when the library says so.  The arenas themselves
 * are arenas.c's. */
#include "module.h"

#include <stdint.h>
#include <string.h>

/* The class of p when it is pymalloc's, else 0 (a RAW block).  Outside
 * our arenas only a learnt pool's block is taken (never a read of a RAW
 * block's neighbourhood). */
static inline size_t class_of(const void *p)
{
	if (mlpy_in_arena(p))
		return mlpy_block_class(p);
	if (p && !mlpy_preloaded && mlpy_old_pool_has(mlpy_pool_of(p)))
		return mlpy_block_class(p);
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
	if (mlpy_in_arena(p)) {
		c = mlpy_block_class(p);
	} else if (!mlpy_preloaded && mlpy_raw_calls == raw) {
		if (!mlpy_old_pool_has(mlpy_pool_of(p)))
			mlpy_old_pool_add(mlpy_pool_of(p));
		c = mlpy_block_class(p);
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
	if (on && !old && q != p && mlpy_in_arena(q)) {
		size_t c = mlpy_block_class(q);
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
 * our arenas and of the learnt pools are the debt (arenas.c).  Under the
 * GIL, which pymalloc's changes hold. */
void mlpy_meter_started(int on)
{
	debt = on ? mlpy_arenas_live() : 0;
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
