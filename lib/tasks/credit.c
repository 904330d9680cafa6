/* Crediting: the samples of an allocation go to the tasks on the
 * thread's stack (each distinct task once, thinned for a task with an
 * interval of its own), their limits are checked, and a newly reached
 * limit makes the task interrupted for good; what is pending then goes
 * to delivery (deliver.c). */
#define _GNU_SOURCE
#include "tasks/tasks.h"

#include <math.h>

bool ml__over_global(uint64_t n)
{
	uint64_t limit;
	return ml__global_overshoot(n, &limit) != 0;
}

/* k's task also has a slice inside k on this thread: credited there. */
static bool nested_again(const struct ml__thread *t, const struct ml__slice *k)
{
	for (const struct ml__slice *p = t->top; p != k; p = p->outer)
		if (p->task == k->task)
			return true;
	return false;
}

void ml__tasks_unsample(struct ml__thread *t)
{
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		atomic_fetch_sub_explicit(&k->task->samples, k->credited,
		                          memory_order_relaxed);
		k->credited = 0;
	}
}

/* Of s samples at the thread's interval, those a task with a longer
 * interval of its own keeps: each with probability thread's / its own
 * (independent thinning: its samples stay a Poisson process of its own
 * mean gap; docs/statistics.md, "A task's own interval").  Binomial by
 * coin flips up to 4096 samples (an allocation of 4096 intervals), by
 * its normal approximation beyond. */
static uint64_t thinned(struct ml__thread *t, const struct ml_task *task,
                        uint64_t s)
{
	if (!t->own_interval)
		return s;
	double own = task->own_interval
	                 ? (double)task->own_interval
	                 : (double)atomic_load_explicit(&ml__interval,
	                                                memory_order_relaxed);
	double p = t->sampler.interval / own;
	if (p >= 1)
		return s;
	if (s <= 4096) {
		uint64_t kept = 0;
		for (uint64_t i = 0; i < s; i++)
			kept += ml__rng_unit(t->sampler.rng) < p;
		return kept;
	}
	double mean = (double)s * p, sd = sqrt(mean * (1 - p));
	double u1 = ml__rng_unit(t->sampler.rng),
	       u2 = ml__rng_unit(t->sampler.rng);
	double z = sqrt(-2 * log1p(-u1)) * cos(6.283185307179586 * u2);
	double k = floor(mean + sd * z + 0.5);
	return k < 0 ? 0 : k > (double)s ? s : (uint64_t)k;
}

static uint64_t samples_needed(uint64_t bytes, uint64_t s)
{
	if (bytes == ML_NO_LIMIT)
		return UINT64_MAX;
	return ml__samples_needed(bytes, s);
}

/* total >= k, with k computed at the task's first sample (0 until then:
 * every thread that sees 0 computes the same value). */
static ML__COLD bool alloc_reached(struct ml_task *task, uint64_t total)
{
	uint64_t k = atomic_load_explicit(&task->k, memory_order_relaxed);
	if (k == 0) {
		k = samples_needed(task->alloc_limit, task->interval);
		atomic_store_explicit(&task->k, k, memory_order_relaxed);
	}
	return total >= k;
}

bool ml__tasks_refused(struct ml__thread *t, unsigned hook)
{
	/* Unless masked or made by the loader (which cannot survive it). */
	return (hook & ML__HOOK_REFUSE) && !t->mask_depth &&
	       ml__tasks_frames_check(t, 0) != ML__FRAMES_LOADER;
}

int ml__tasks_sample(struct ml__thread *t, uint64_t s, uint64_t n,
                     unsigned hook)
{
	if (!t->top)
		return 0;
	bool global = false;
	/* What this allocation adds to the held estimates (held.c). */
	uint64_t w = s * (uint64_t)t->sampler.interval;
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		struct ml_task *task = k->task;
		k->credited = 0;
		if (nested_again(t, k))
			continue;
		uint64_t sk = thinned(t, task, s);
		k->credited = sk;
		uint64_t total = atomic_fetch_add_explicit(
		                     &task->samples, sk, memory_order_relaxed) +
		                 sk;
		if (atomic_load_explicit(&task->status, memory_order_relaxed) !=
		    ML_OK)
			continue;
		if (ml__unlikely(
		        total >=
		        atomic_load_explicit(&task->k, memory_order_relaxed)) &&
		    alloc_reached(task, total))
			ml__task_trip_here(task, ML_ALLOC_LIMIT);
		else if (ml__held_limited(task->held_limit) &&
		         ml__held_after(t, task, w) >= task->held_limit)
			ml__task_trip_here(task, ML_HELD_LIMIT);
		else if (task->token && ml__token_is_set(task->token))
			ml__task_trip_here(task, ML_CANCELLED);
		else
			global |= task->global;
	}
	uint64_t limit;
	if (global && ml__global_overshoot(n, &limit) != 0) {
		/* The largest holder, wherever it runs (global.c). */
		ml__global_choose(t, n);
	}
	if (ml__refresh_seen(t) || (hook & ML__HOOK_TRIPPED))
		ml__update_pending(t);
	int verdict = 0;
	if (t->pending)
		verdict = ml__deliver(t, n, true);
	/* The consumer refuses this allocation (run mode's heap limit). */
	if (!verdict && ml__tasks_refused(t, hook))
		verdict = -1;
	/* A refused allocation allocated nothing: its samples do not count
	 * towards the tasks' estimates. */
	if (verdict)
		ml__tasks_unsample(t);
	return verdict;
}
