/* Call stacks, captured inside malloc and interned: a sampled allocation's
 * stack becomes a small number that held records (tasks/held.c) and run
 * mode's profile (run/report.c) keep instead of the frames.
 *
 * The table is fixed (ML__NSTACKS stacks) in our own mmap'd memory, its
 * pages touched only as stacks arrive, and claimed with compare-and-swap:
 * no lock, so neither a fork nor a signal can leave one held.  A stack is
 * known by a 64-bit hash of its frames; with at most ML__NSTACKS stacks a
 * collision is negligible (about 2^-41), so the hash alone identifies it.
 * Stacks that find no room get id 0, which prints as "[unknown]". */
#define _GNU_SOURCE
#include "core/core.h"

#include <errno.h>
#include <string.h>

#define CAPTURE 48 /* room for our own frames above the caller's */
#define MAX_PROBES 64

_Atomic unsigned ml__stacks_wanted;

static struct ml__stack *_Atomic stacks;
/* Threads that capture their first stacks at once all find the same
 * range: relaxed atomics, no lock. */
static _Atomic uintptr_t self_start, self_end;
static _Atomic bool self_known;

/* Our own frames are the allocation path: skipped.  Linked into the
 * program itself (tests/api/test-core-alone), the object is the
 * program's, whose frames must stay: nothing is skipped then. */
static void find_self(void)
{
	struct ml__object o;
	if (ml__find_object((uintptr_t)&find_self, &o) == 0 && o.name[0]) {
		atomic_store_explicit(&self_start, o.start,
		                      memory_order_relaxed);
		atomic_store_explicit(&self_end, o.end, memory_order_relaxed);
	}
	atomic_store_explicit(&self_known, true, memory_order_release);
}

uint32_t ml__stack_capture(uintptr_t *ip)
{
	void *buf[CAPTURE];
	int n = ml__backtrace(buf, CAPTURE);
	if (!atomic_load_explicit(&self_known, memory_order_acquire))
		find_self();
	uintptr_t lo = atomic_load_explicit(&self_start, memory_order_relaxed);
	uintptr_t hi = atomic_load_explicit(&self_end, memory_order_relaxed);
	int i = 0;
	while (i < n && (uintptr_t)buf[i] >= lo && (uintptr_t)buf[i] < hi)
		i++;
	uint32_t d = 0;
	for (; i < n && d < ML__STACK_DEPTH; i++)
		ip[d++] = (uintptr_t)buf[i];
	/* A full buffer may have been cut short too. */
	if (i < n || n == CAPTURE)
		d |= ML__STACK_TRUNCATED;
	return d;
}

static uint64_t hash_stack(const uintptr_t *ip, uint32_t depth)
{
	uint64_t h = 0x9e3779b97f4a7c15u ^ depth;
	for (uint32_t i = 0; i < (depth & ~ML__STACK_TRUNCATED); i++) {
		h = (h ^ ip[i]) * 0xff51afd7ed558ccdu;
		h ^= h >> 32;
	}
	return h | 1;
}

static struct ml__stack *table(void)
{
	struct ml__stack *s =
	    atomic_load_explicit(&stacks, memory_order_acquire);
	if (ml__likely(s != NULL))
		return s;
	struct ml__stack *fresh = ml__raw_alloc(ML__NSTACKS * sizeof *fresh);
	if (!fresh)
		return NULL;
	if (!atomic_compare_exchange_strong(&stacks, &s, fresh)) {
		ml__raw_free(fresh, ML__NSTACKS * sizeof *fresh);
		return s;
	}
	return fresh;
}

uint32_t ml__stack_intern(const uintptr_t *ip, uint32_t depth)
{
	struct ml__stack *tab = table();
	uint64_t h = hash_stack(ip, depth);
	for (unsigned p = 0; tab && p < MAX_PROBES; p++) {
		uint32_t i = (uint32_t)((h + p) & (ML__NSTACKS - 1));
		struct ml__stack *e = &tab[i];
		uint64_t k =
		    atomic_load_explicit(&e->key, memory_order_acquire);
		if (k == 0 && atomic_compare_exchange_strong(&e->key, &k, h)) {
			e->depth = depth;
			memcpy(e->ip, ip,
			       (depth & ~ML__STACK_TRUNCATED) * sizeof *ip);
			atomic_store_explicit(&e->ready, 1,
			                      memory_order_release);
			return i + 1;
		}
		/* Another thread may still be writing its frames: the id
		 * is valid now, the frames by the time anyone prints. */
		if (k == h)
			return i + 1;
	}
	return 0;
}

uint32_t ml__stack_here(void)
{
	uintptr_t ip[ML__STACK_DEPTH];
	uint32_t depth = ml__stack_capture(ip);
	return ml__stack_intern(ip, depth);
}

const struct ml__stack *ml__stack_get(uint32_t id)
{
	struct ml__stack *tab =
	    atomic_load_explicit(&stacks, memory_order_acquire);
	if (!tab || id == 0 || id > ML__NSTACKS)
		return NULL;
	const struct ml__stack *e = &tab[id - 1];
	return atomic_load_explicit(&e->ready, memory_order_acquire) ? e : NULL;
}

ML_EXPORT int ml_set_stack_capture(bool on)
{
	void *ip[4];
	/* No unwinder (ml_capabilities() without ML_CAP_STACKS): nothing
	 * to turn on. */
	if (on && ml__backtrace(ip, 4) <= 0) {
		errno = ENOTSUP;
		return ML_EINVAL;
	}
	if (on)
		atomic_fetch_or(&ml__stacks_wanted, ML__STACKS_API);
	else
		atomic_fetch_and(&ml__stacks_wanted, ~ML__STACKS_API);
	return 0;
}
