/* Per-thread state: the TLS block, forcing the slow path, and applying
 * the process's seed and interval to a thread.
 *
 * The fast path (api/interpose.c) only subtracts from the sampler's
 * countdown (ml__countdown, sampler.h).  Work
 * that must see every allocation for a while (a pending interruption,
 * FAIL delivery, the library's own allocations, a consumer that counts
 * every allocation) "forces" the countdown to 0 and parks the sampler's
 * real countdown in `saved`; the fast path needs no flag for it. */
#include "tasks/tasks.h"

ML__TLS struct ml__thread ml__self;
uint32_t ml__lineage;

static const struct ml__hooks no_hooks;
const struct ml__hooks *_Atomic ml__hooks = &no_hooks;
_Atomic bool ml__refusing;

void ml__hooks_install(const struct ml__hooks *h)
{
	atomic_store_explicit(&ml__hooks, h ? h : &no_hooks,
	                      memory_order_release);
}

/* The sampler's real countdown lives in `saved` while forced. */
void ml__force_slow(struct ml__thread *t)
{
	if (!t->forced) {
		t->saved = ml__countdown;
		t->forced = 1;
	}
	ml__countdown = 0;
}

void ml__unforce(struct ml__thread *t)
{
	if (t->forced && !t->busy && !t->pending &&
	    !ml__hooks_get()->every_alloc &&
	    !atomic_load_explicit(&ml__refusing, memory_order_relaxed)) {
		t->forced = 0;
		ml__countdown = t->saved;
	}
}

void ml__thread_reseed(struct ml__thread *t)
{
	uint64_t stream = ((uint64_t)ml__lineage << 32) | t->index;
	t->seed_epoch = atomic_load(&ml__seed_epoch);
	t->interval_epoch = atomic_load(&ml__interval_epoch);
	t->sampler.interval = ml__thread_interval(t);
	ml__sampler_seed(&t->sampler, atomic_load(&ml__seed), stream);
}

/* A thread's sampler state after a change of seed or interval: by
 * memorylessness a fresh gap at the new rate is exact from here on. */
uint64_t ml__thread_regap(struct ml__thread *t)
{
	if (t->seed_epoch != atomic_load(&ml__seed_epoch))
		ml__thread_reseed(t);
	t->interval_epoch = atomic_load(&ml__interval_epoch);
	t->sampler.interval = ml__thread_interval(t);
	return ml__sampler_gap(&t->sampler);
}

void ml__thread_set_gap(struct ml__thread *t, uint64_t c)
{
	/* Exact budgets first take what the fast path spent (exact.c). */
	ml__exact_settle(t);
	uint64_t v = c + 1; /* the countdown's form: sampler.h */
	if (t->forced)
		t->saved = v;
	else
		ml__countdown = v;
	t->armed = v;
	t->cut = 0;
	if (t->exact)
		ml__exact_clip(t);
}

void ml__thread_refresh(struct ml__thread *t)
{
	ml__thread_set_gap(t, ml__thread_regap(t));
}

double ml__thread_interval(const struct ml__thread *t)
{
	uint64_t process =
	    atomic_load_explicit(&ml__interval, memory_order_relaxed);
	if (!t->own_interval)
		return (double)process;
	uint64_t m = UINT64_MAX;
	bool all_own = t->top != NULL;
	for (const struct ml__slice *k = t->top; k; k = k->outer) {
		uint64_t s = k->task->own_interval;
		all_own &= s != 0;
		if (s && s < m)
			m = s;
	}
	/* A task without one of its own samples at the process's. */
	if (!all_own && process < m)
		m = process;
	return (double)m;
}

void ml__thread_reinterval(struct ml__thread *t)
{
	bool any = false;
	for (const struct ml__slice *k = t->top; k; k = k->outer)
		any |= k->task->own_interval != 0;
	t->own_interval = any;
	double s = ml__thread_interval(t);
	if (s == t->sampler.interval)
		return;
	t->sampler.interval = s;
	ml__thread_set_gap(t, ml__sampler_gap(&t->sampler));
}
