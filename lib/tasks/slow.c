/* The allocation slow path, thread start and exit, and fork.
 *
 * When the countdown sends an allocation here (ml__alloc_slow, all that
 * the malloc family in api/interpose.c calls of this layer),
 * ml__alloc_begin works out how many samples it carried, tells the hook
 * consumer, and hands them to the tasks (credit.c); the allocator makes
 * the block (alloc/family.h); ml__alloc_end settles with its answer.  The
 * mmap family and the notes, which have no allocator call of this kind,
 * use the pair directly. */
#define _GNU_SOURCE
#include "tasks/tasks.h"

#include "alloc/family.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

static pthread_key_t exit_key;
static bool have_key; /* pthread_key_create succeeded */
static _Atomic uint32_t thread_count;
static _Atomic uint32_t forks;   /* forks made by this process */
static uint32_t next_lineage;    /* computed in prepare, taken by the child */
static _Atomic int global_state; /* 0 new, 1 initialising, 2 ready */

static void on_thread_exit(void *arg)
{
	struct ml__thread *t = &ml__self;
	const struct ml__hooks *h = ml__hooks_get();
	(void)arg;
	t->busy = 1;
	ml__tasks_thread_exit(t);
	if (h->thread_exit) {
		int e = errno; /* a hook never changes errno (issue 41) */
		h->thread_exit(t);
		errno = e;
	}
	ml__held_thread_exit();
	ml__meter_flush();
	ml__metrics_thread_exit(t);
	t->state = ML__T_EXITING;
	t->busy = 0;
}

/* Around fork, hold every lock of ours (util/forklock.c): a child must
 * not inherit one held by a thread that does not exist there.  The
 * generation advances in the parent, so that every child of a process
 * gets its own stream. */
static void atfork_prepare(void)
{
	ml__fork_locks_acquire();
	uint64_t x =
	    ((uint64_t)ml__lineage << 32) | (atomic_fetch_add(&forks, 1) + 1);
	next_lineage = (uint32_t)ml__splitmix64(&x) | 1;
}

static void atfork_parent(void)
{
	ml__fork_locks_release();
}

static void atfork_child(void)
{
	struct ml__thread *t = &ml__self;
	const struct ml__hooks *h = ml__hooks_get();
	atfork_parent();
	/* The child's sampler must not replay the parent's random stream,
	 * nor a sibling's. */
	ml__lineage = next_lineage;
	atomic_store(&forks, 0);
	if (t->state == ML__T_LIVE) {
		ml__thread_reseed(t);
		ml__thread_set_gap(t, ml__sampler_gap(&t->sampler));
	}
	ml__metrics_fork_child(t);
	if (h->fork_child) {
		int e = errno; /* fork's caller sees fork's own */
		h->fork_child(t);
		errno = e;
	}
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
	/* What this calls may allocate on this thread (glibc's
	 * pthread_atfork grows its handler list with malloc): the thread is
	 * marked busy, so that such an allocation passes through to the
	 * allocator instead of starting the thread, which would wait above
	 * for this very initialisation (from the constructor the thread is
	 * not busy yet). */
	struct ml__thread *t = &ml__self;
	uint8_t busy = t->busy;
	t->busy = 1;
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
	t->busy = busy;
	atomic_store_explicit(&global_state, 2, memory_order_release);
}

void ml__thread_init(struct ml__thread *t)
{
	const struct ml__hooks *h;
	ml__global_init();
	t->index = atomic_fetch_add(&thread_count, 1);
	ml__thread_reseed(t);
	ml__metrics_thread_start(t);
	t->state = ML__T_LIVE;
	h = ml__hooks_get();
	if (h->thread_start) {
		int e = errno; /* this is the thread's first allocation */
		h->thread_start(t);
		errno = e;
	}
	/* Any non-NULL value makes the destructor run at thread exit. */
	if (have_key && pthread_setspecific(exit_key, t) != 0) {
		static _Atomic bool said;
		if (!atomic_exchange(&said, true))
			ml__diag(
			    "cannot set a thread-specific value: the state "
			    "of some exiting threads is not reclaimed");
	}
}

int ml__alloc_begin(uint64_t n, const void *replacing)
{
	struct ml__thread *t = &ml__self;
	if (t->busy) {
		/* Our own allocation: no sample, no decision. */
		ml__countdown = 0;
		t->charged = 0;
		return 0;
	}
	t->busy = 1;
	t->resize_old = ml__meter_self.resizing;
	ml__meter_self.resizing = 0;
	/* Undo the fast path's subtraction to recover the countdown the
	 * allocation started from: one more than the sampler's gap c. */
	uint64_t v = t->forced ? t->saved : ml__countdown + n;
	if (ml__unlikely(t->exact)) {
		/* The bytes the fast path let through since the countdown
		 * was set, and the sampler's gap the clip hid (exact.c). */
		uint64_t spent = t->armed - v;
		t->armed = v;
		v += t->cut;
		t->cut = 0;
		ml__exact_spent(t, spent);
	}
	ml__force_slow(t);
	/* 0 only before the thread's first gap (NEW: drawn below). */
	uint64_t c = v ? v - 1 : 0;

	if (ml__unlikely(t->state != ML__T_LIVE)) {
		if (t->state == ML__T_NEW)
			ml__thread_init(t);
		c = ml__thread_regap(t);
	} else if (ml__unlikely(
	               t->interval_epoch != atomic_load(&ml__interval_epoch) ||
	               t->seed_epoch != atomic_load(&ml__seed_epoch))) {
		c = ml__thread_regap(t);
	}

	uint64_t s = 0;
	if (n > c)
		s = ml__sampler_hit(&t->sampler, &c, n);
	else
		c -= n;
	t->saved = c + 1;
	t->armed = c + 1; /* nothing spent since, whatever comes next */

	const struct ml__hooks *h = ml__hooks_get();
	/* The hooks write reports and timelines (run mode): an allocation
	 * they let through must return with the caller's errno. */
	if (ml__unlikely(h->alloc != NULL)) {
		int e = errno;
		h->alloc(t, n, s);
		errno = e;
	}
	int verdict = 0;
	/* An allocation past an exact budget interrupts its task here. */
	if (ml__unlikely(t->exact) && ml__exact_check(t, n))
		ml__tasks_poll(t);
	if (s) {
		ml__metrics_add(t, ML__M_SAMPLES, s);
		/* No fold of the meter here: a check reads the total plus
		 * this thread's own delta, and a fold at every sample wrote
		 * the shared total from every thread (issue 17). */
		t->stack = ml__unlikely(atomic_load_explicit(
		               &ml__stacks_wanted, memory_order_relaxed))
		               ? ml__stack_here()
		               : 0;
		t->replacing = replacing;
		unsigned hv = 0;
		if (h->sample) {
			int e = errno;
			hv = h->sample(t, s, n);
			errno = e;
		}
		verdict = ml__tasks_sample(t, s, n, hv);
		t->replacing = NULL;
		/* A refused allocation allocated nothing. */
		if (verdict != 0 && h->unsample) {
			int e = errno;
			h->unsample(t, s);
			errno = e;
		}
	} else if (t->pending) {
		verdict = ml__tasks_pending(t, n);
	}
	/* After a refusal, every allocation is the consumer's to check, not
	 * only a sampled one: a retry that carries no sample must not get
	 * through (Lua's allocator after its emergency collection, Ruby's
	 * after a GC).  ml__unforce keeps the countdown forced meanwhile. */
	if (ml__unlikely(
	        atomic_load_explicit(&ml__refusing, memory_order_relaxed)) &&
	    !verdict && h->recheck) {
		t->replacing = replacing;
		unsigned hv = h->recheck(t, n);
		t->replacing = NULL;
		if (ml__tasks_refused(t, hv)) {
			verdict = -1;
			if (s) {
				ml__tasks_unsample(t);
				if (h->unsample)
					h->unsample(t, s);
			}
		}
	}
	t->charged = verdict == 0;
	t->charged_samples = s;
	if (ml__unlikely(t->exact)) {
		if (verdict == 0)
			ml__exact_spent(t, n);
		ml__exact_clip(t);
	}
	t->busy = 0;
	ml__unforce(t);
	return verdict;
}

/* The allocation of n bytes that the last ml__alloc_begin let through
 * failed in the allocator: take back what it was charged (tasks and the
 * consumer's counts).  Leaves errno alone. */
static ML__COLD void alloc_failed(struct ml__thread *t, uint64_t n)
{
	if (!t->charged || t->busy)
		return;
	t->charged = 0;
	uint64_t s = t->charged_samples;
	const struct ml__hooks *h = ml__hooks_get();
	int e = errno;
	t->busy = 1;
	if (s) {
		/* As a refused allocation (ml__tasks_sample): the samples
		 * go; a limit they reached stays reached. */
		ml__tasks_unsample(t);
		if (h->unsample)
			h->unsample(t, s);
	}
	if (h->failed)
		h->failed(t, n, s);
	t->busy = 0;
	errno = e;
}

/* The sampled block is to be recorded: held tracking is on, or the API's
 * global limit switches it on at a program's task's first sample under it
 * (global.c). */
static inline bool held_wanted(struct ml__thread *t)
{
	if (ML__HELD_ON)
		return true;
	return ml__unlikely(atomic_load_explicit(&ml__api_limit,
	                                         memory_order_relaxed)) &&
	       ml__global_held_need(t);
}

void ml__alloc_granted(void)
{
	struct ml__thread *t = &ml__self;
	const struct ml__hooks *h = ml__hooks_get();
	if (!t->charged_samples || !h->granted || t->busy)
		return;
	int e = errno;
	t->busy = 1;
	h->granted(t);
	t->busy = 0;
	errno = e;
}

void *ml__alloc_end(void *p, uint64_t n)
{
	struct ml__thread *t = &ml__self;
	if (ml__unlikely(p == NULL)) {
		alloc_failed(t, n);
		return p;
	}
	if (t->charged && t->charged_samples) {
		if (held_wanted(t))
			ml__held_note(t, p, t->charged_samples);
		else if (ml__unlikely(atomic_load_explicit(
		             &ml__held_draining, memory_order_relaxed)))
			ml__held_drain_tick();
	}
	ml__alloc_granted();
	return p;
}

/* The malloc family's slow path: decide, call the allocator, settle, all
 * from here, so that a sampled allocation goes down the layers and never
 * back through the entry file (docs/internals.md, section 4).  A refusal
 * returns NULL with errno ENOMEM, or, for posix_memalign, sets c->rc to
 * ENOMEM and leaves errno alone, as the allocators do. */
static inline void *slow(struct ml__call *c)
{
	/* A request of at least ML__PROBE_MIN that the allocator refuses
	 * anyway (underlying.c) carries no sample: the countdown gets its n
	 * back (modulo 2^64, like the fast path's subtraction) and the
	 * request goes on unseen, settled by nobody. */
	if (c->n >= ML__PROBE_MIN && ml__refused_anyway(c->n)) {
		ml__countdown += c->n;
		return ml__family_call(c);
	}
	int verdict;
	if (c->kind != ML__CALL_RESIZE) {
		verdict = ml__alloc_begin(c->n, NULL);
	} else if (c->n == 0) {
		/* realloc(p, 0) frees p: it is never refused (a refusal
		 * returns NULL, which the caller takes for "freed") and
		 * carries nothing to settle. */
		return ml__family_call(c);
	} else {
		/* The heap after this realloc holds n bytes, not the old
		 * block's plus n: the heap limit checks that (git's buffer
		 * grown by half at 1.5 x its peak was refused for old + new,
		 * which the meter never counts).  The held limits likewise
		 * see what realloc changes: the new block comes as the old
		 * one goes (held.c, ml__held_after). */
		if (c->old && ML__METER_ON)
			ml__meter_self.resizing = ml__chunk_bytes(c->old);
		verdict = ml__alloc_begin(c->n, c->old);
		ml__meter_self.resizing = 0;
	}
	if (verdict != 0) {
		/* Nothing was allocated; realloc's old block stays valid. */
		if (c->kind == ML__CALL_POSIX_MEMALIGN)
			c->rc = ENOMEM;
		else
			errno = ENOMEM;
		return NULL;
	}
	return ml__alloc_end(ml__family_call(c), c->n);
}

/* The entries take their arguments in registers, so that the malloc
 * family reaches them with a tail call and the answer goes straight back
 * to the program. */
void *ml__alloc_slow(int kind, size_t n, size_t a, size_t b, void *old)
{
	struct ml__call c = {.kind = (enum ml__call_kind)kind,
	                     .n = n,
	                     .a = a,
	                     .b = b,
	                     .old = old};
	return slow(&c);
}

int ml__alloc_slow_posix(void **out, size_t align, size_t n)
{
	struct ml__call c = {.kind = ML__CALL_POSIX_MEMALIGN,
	                     .n = n,
	                     .a = align,
	                     .b = n,
	                     .out = out};
	slow(&c);
	return c.rc;
}
