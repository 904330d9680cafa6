/* Per-thread state: creation, the allocation slow path, fork and exit.
 *
 * The fast path (interpose.c) only subtracts from `countdown`.  When it
 * borrows, ml__alloc_slow works out how many samples the allocation
 * carried and hands them to the tasks.  Work that must see every
 * allocation for a while (a pending interruption, FAIL delivery, the
 * library's own allocations) "forces" the countdown to 0 and parks the
 * sampler's real countdown in `saved`; the fast path needs no flag for it. */
#define _GNU_SOURCE
#include "internal.h"

#include <pthread.h>
#include <sched.h>

ML__TLS struct ml__thread ml__self;

static pthread_key_t exit_key;
static bool have_key; /* pthread_key_create succeeded */
static _Atomic uint32_t thread_count;
/* Which process of a fork tree this is: 0 in the first, a fresh value in
 * every child (the parent keeps its own, so its runs stay reproducible). */
static uint32_t lineage;
static _Atomic uint32_t forks;   /* forks made by this process */
static uint32_t next_lineage;    /* computed in prepare, taken by the child */
static _Atomic int global_state; /* 0 new, 1 initialising, 2 ready */

/* The sampler's real countdown lives in `saved` while forced. */
void ml__force_slow(struct ml__thread *t)
{
	if (!t->forced) {
		t->saved = t->countdown;
		t->forced = 1;
	}
	t->countdown = 0;
}

void ml__unforce(struct ml__thread *t)
{
	if (t->forced && !t->busy && !t->pending && !ml__run.stats) {
		t->forced = 0;
		t->countdown = t->saved;
	}
}

static void reseed(struct ml__thread *t)
{
	uint64_t stream = ((uint64_t)lineage << 32) | t->index;
	t->seed_epoch = atomic_load(&ml__seed_epoch);
	t->interval_epoch = atomic_load(&ml__interval_epoch);
	t->sampler.interval = (double)atomic_load(&ml__interval);
	ml__sampler_seed(&t->sampler, atomic_load(&ml__seed), stream);
}

/* A thread's sampler state after a change of seed or interval: by
 * memorylessness a fresh gap at the new rate is exact from here on. */
static uint64_t refresh(struct ml__thread *t)
{
	if (t->seed_epoch != atomic_load(&ml__seed_epoch))
		reseed(t);
	t->interval_epoch = atomic_load(&ml__interval_epoch);
	t->sampler.interval = (double)atomic_load(&ml__interval);
	return ml__sampler_gap(&t->sampler);
}

void ml__thread_refresh(struct ml__thread *t)
{
	uint64_t c = refresh(t);
	if (t->forced)
		t->saved = c;
	else
		t->countdown = c;
}

static void on_thread_exit(void *arg)
{
	struct ml__thread *t = &ml__self;
	(void)arg;
	t->busy = 1;
	ml__tasks_thread_exit(t);
	ml__run_thread_exit(t);
	ml__meter_flush(t);
	t->state = ML__T_EXITING;
	t->busy = 0;
}

/* Around fork, hold every lock of ours (forklock.c): a child must not
 * inherit one held by a thread that does not exist there.  The generation
 * advances in the parent, so that every child of a process gets its own
 * stream. */
static void atfork_prepare(void)
{
	ml__fork_locks_acquire();
	uint64_t x =
	    ((uint64_t)lineage << 32) | (atomic_fetch_add(&forks, 1) + 1);
	next_lineage = (uint32_t)ml__splitmix64(&x) | 1;
}

static void atfork_parent(void)
{
	ml__fork_locks_release();
}

static void atfork_child(void)
{
	struct ml__thread *t = &ml__self;
	atfork_parent();
	/* The child's sampler must not replay the parent's random stream,
	 * nor a sibling's. */
	lineage = next_lineage;
	atomic_store(&forks, 0);
	/* Run mode: a process is one budget; a forked child starts its own
	 * (as an exec'd one does), with its thread's root task fresh. */
	atomic_store(&ml__run.samples, 0);
	atomic_store(&ml__run.fired, ML_OK);
	if (t->root) {
		t->root->status = ML_OK;
		t->root->samples = 0;
		ml__tasks_recheck(t);
	}
	if (t->state == ML__T_LIVE) {
		reseed(t);
		uint64_t c = ml__sampler_gap(&t->sampler);
		if (t->forced)
			t->saved = c;
		else
			t->countdown = c;
	}
	ml__meter_flush(t);
}

void ml__global_init(void)
{
	int expect = 0;
	if (atomic_load_explicit(&global_state, memory_order_acquire) == 2)
		return;
	if (!atomic_compare_exchange_strong(&global_state, &expect, 1)) {
		while (atomic_load_explicit(&global_state,
		                            memory_order_acquire) != 2)
			sched_yield();
		return;
	}
	int rc = pthread_key_create(&exit_key, on_thread_exit);
	if (rc)
		ml__diag("cannot create a thread key (error %d): the state of "
		         "exiting threads is not reclaimed",
		         rc);
	else
		have_key = true;
	ml__atfork(atfork_prepare, atfork_parent, atfork_child,
	           "a child forked while another thread is inside the "
	           "library may hang, and children repeat the parent's "
	           "samples");
	atomic_store_explicit(&global_state, 2, memory_order_release);
}

void ml__thread_init(struct ml__thread *t)
{
	ml__global_init();
	t->index = atomic_fetch_add(&thread_count, 1);
	reseed(t);
	t->state = ML__T_LIVE;
	ml__run_thread_start(t);
	/* Any non-NULL value makes the destructor run at thread exit. */
	if (have_key && pthread_setspecific(exit_key, t) != 0) {
		static _Atomic bool said;
		if (!atomic_exchange(&said, true))
			ml__diag(
			    "cannot set a thread-specific value: the state "
			    "of some exiting threads is not reclaimed");
	}
}

int ml__alloc_slow(uint64_t n)
{
	struct ml__thread *t = &ml__self;
	if (t->busy) {
		/* Our own allocation: no sample, no decision. */
		t->countdown = 0;
		t->charged = 0;
		return 0;
	}
	t->busy = 1;
	/* Undo the fast path's subtraction to recover the countdown the
	 * allocation started from. */
	uint64_t c = t->forced ? t->saved : t->countdown + n;
	ml__force_slow(t);

	if (ml__unlikely(t->state != ML__T_LIVE)) {
		if (t->state == ML__T_NEW)
			ml__thread_init(t);
		c = refresh(t);
	} else if (ml__unlikely(
	               t->interval_epoch != atomic_load(&ml__interval_epoch) ||
	               t->seed_epoch != atomic_load(&ml__seed_epoch))) {
		c = refresh(t);
	}

	uint64_t s = 0;
	if (n > c)
		s = ml__sampler_hit(&t->sampler, &c, n);
	else
		c -= n;
	t->saved = c;

	if (ml__unlikely(ml__run.stats))
		ml__stats_alloc(t, n, s);
	int verdict = 0;
	if (s) {
		if (ML__METER_ON)
			ml__meter_flush(t);
		if (ml__unlikely(ml__run.profiling))
			ml__profile_sample(t, s, n);
		verdict = ml__tasks_sample(t, s, n);
		/* A refused allocation allocated nothing. */
		if (ml__unlikely(ml__run.profiling) && verdict != 0)
			ml__profile_refused(t, s);
	} else if (t->pending) {
		verdict = ml__tasks_pending(t, n);
	}
	t->charged = verdict == 0;
	t->charged_samples = s;
	t->busy = 0;
	ml__unforce(t);
	return verdict;
}
