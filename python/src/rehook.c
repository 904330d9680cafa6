/* memlimits._memlimits, the wrappers kept in: at every enter of a task
 * (and every global limit set) the three domains are checked to still
 * reach this module's functions, and ours go back in over a hook that
 * took them out.
 *
 * A hook can take them out: tracemalloc.start() saves the allocators it
 * finds and tracemalloc.stop() puts them back, so a tracemalloc started
 * before the first limit and stopped after it restores CPython's plain
 * allocators and leaves no wrapper (a runaway under held=64MiB then made
 * its 10**7 strings unstopped); an extension's PyMem_SetAllocator that
 * does not chain to the allocator it found does the same.
 *
 * The rule: a domain whose allocator is ours (the same functions and the
 * same context) is kept.  Any other allocator is probed: a block of one
 * byte is allocated and freed through it, and when that call reaches our
 * wrapper (a hook that chains to ours, as a tracemalloc started inside a
 * limit does), the domain is kept as it is.  When it does not, ours goes
 * back in over it.  In the MEM and OBJ domains ours then forwards to that
 * allocator (the one tracemalloc.stop() restored), so that each block is
 * freed by the allocator underneath that made it; the RAW domain is the
 * library's malloc family, whose free takes glibc's blocks, as at the
 * first install.
 *
 * That the probe reached ours is seen without touching the wrappers'
 * fast paths: for MEM and OBJ, the malloc our wrapper forwards to is
 * swapped for probe_malloc during the probe's one call (under the GIL,
 * which every MEM and OBJ call holds, so that no other call sees it);
 * for RAW, whose calls run without the GIL, by this thread's count of
 * RAW calls (mlpy_raw_calls), which only our RAW functions bump.
 *
 * What was held while ours was out: a block noted through ours and freed
 * while ours was out is freed without its note, so a sampled one keeps
 * its held record, and the task it was charged to keeps its bytes, until
 * that address is freed through ours again (the sampled-block filter
 * finds the record by address; pymalloc hands a freed block's address
 * to the next object of its size class) or the task ends.  The error is
 * upward (a task may stop early, never late) and bounded by what the
 * tasks held through ours when it was taken out (docs/python.md). */
#include "module.h"

static int same(const PyMemAllocatorEx *a, const PyMemAllocatorEx *b)
{
	return a->ctx == b->ctx && a->malloc == b->malloc &&
	       a->calloc == b->calloc && a->realloc == b->realloc &&
	       a->free == b->free;
}

/* MEM and OBJ: the malloc our wrapper forwards to, during the probe. */
static void *(*probe_real)(void *, size_t);
static int probe_hit;
static void *probe_malloc(void *ctx, size_t n)
{
	probe_hit = 1;
	return probe_real(ctx, n);
}

/* 1 when cur reaches ours, 0 when it does not, -1 when it cannot tell
 * (its allocation failed before it got to ours). */
static int reaches_ours(PyMemAllocatorDomain d, const PyMemAllocatorEx *cur)
{
	int hit;
	void *p;
	if (d == PYMEM_DOMAIN_RAW) {
		unsigned before = mlpy_raw_calls;
		p = cur->malloc(cur->ctx, 1);
		hit = mlpy_raw_calls != before;
	} else {
		PyMemAllocatorEx *prev = mlpy_domain_prev(d);
		probe_real = prev->malloc;
		probe_hit = 0;
		prev->malloc = probe_malloc;
		p = cur->malloc(cur->ctx, 1);
		prev->malloc = probe_real;
		hit = probe_hit;
	}
	if (p)
		cur->free(cur->ctx, p);
	return hit ? 1 : p ? 0 : -1;
}

static void check(PyMemAllocatorDomain d)
{
	PyMemAllocatorEx cur, ours;
	if (d == PYMEM_DOMAIN_RAW)
		mlpy_raw_ours(&ours);
	else
		mlpy_domain_ours(d, &ours);
	PyMem_GetAllocator(d, &cur);
	if (same(&cur, &ours) || reaches_ours(d, &cur) != 0)
		return;
	/* Taken out: ours over what is there now. */
	if (d != PYMEM_DOMAIN_RAW)
		*mlpy_domain_prev(d) = cur;
	PyMem_SetAllocator(d, &ours);
}

/* Under the GIL, with the wrappers in (mlpy_wrap). */
void mlpy_rehook(void)
{
	check(PYMEM_DOMAIN_MEM);
	check(PYMEM_DOMAIN_OBJ);
	/* Under the preload the RAW domain is CPython's own: its malloc is
	 * the library's already. */
	if (!mlpy_preloaded)
		check(PYMEM_DOMAIN_RAW);
}
