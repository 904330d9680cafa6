/* Tasks: the per-thread stack of slices, limits, interruptions and their
 * delivery, masking and cleanup handlers.
 *
 * A task (struct ml_task) is the shared record of one request: its limits,
 * its sample count and its status, for all its slices together.  A slice
 * (struct ml__slice) is one run of a task on one thread: an ml_run frame
 * (whose task lives in the same stack frame) or an ml_task_run; it lives in
 * its runner's stack frame, and cleanup records come from our own pool.
 * Samples arrive from the allocation slow path (ml__tasks_sample): each
 * distinct task on the stack is credited once (one atomic add on its
 * record, at a sample only), its limits are checked, and a newly reached
 * limit makes the task interrupted for good.  A slice on another thread
 * sees that at its own next sample or safe point (its `seen`).  Delivery
 * then depends on the interrupted slices of this thread:
 *  - the outermost interrupted JUMP slice is jumped to, when no runtime
 *    frame (libc, loader, libstdc++, libgcc) lies between the allocation
 *    and its runner and the thread is not masked; otherwise the jump is
 *    pending and every later allocation comes back here;
 *  - with an interrupted FAIL slice on the stack, allocations fail, except
 *    while masked or inside the loader;
 *  - FLAG slices are only flagged.
 * While anything is pending the countdown is forced to 0, so the fast path
 * itself never tests for it. */
#define _GNU_SOURCE
#include "tasks/tasks.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>

struct ml__cleanup {
	struct ml__cleanup *next;
	void (*fn)(void *);
	void *arg;
	uint32_t holes; /* failed pushes just below this record */
};

ML__POOL(, ml__cleanup_pool, sizeof(struct ml__cleanup))
ML__POOL(static, task_pool, (sizeof(struct ml_task) + 15) & ~(size_t)15)
/* ml_task_enter's slice records: the slice outlives the call that made
 * it, so it cannot live in a runner's frame. */
ML__POOL(static, entered_pool, (sizeof(struct ml__slice) + 15) & ~(size_t)15)

/* Bytes a pending JUMP task may allocate inside runtime frames before
 * those allocations start failing: bounds the overshoot of a jump that
 * cannot be delivered (docs/statistics.md, "Delivery"). */
#define PENDING_CAP_INTERVALS 4

bool ml__over_global(uint64_t n)
{
	uint64_t limit;
	return ml__global_overshoot(n, &limit) != 0;
}

/* The unwinder may allocate (frames registered at run time): those
 * allocations must pass straight through, also when we come from
 * ml_check or ml_unmask. */
static enum ml__frames frames_check(struct ml__thread *t, uintptr_t stop)
{
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__force_slow(t);
	enum ml__frames f = ml__frames_check(stop);
	t->busy = busy;
	ml__unforce(t);
	return f;
}

/* Anything on the stack that needs to see the next allocations? */
static bool needs_slow(const struct ml__thread *t)
{
	for (const struct ml__slice *k = t->top; k; k = k->outer)
		if (k->seen != ML_OK && k->task->delivery != ML_DELIVER_FLAG)
			return true;
	return false;
}

static void update_pending(struct ml__thread *t)
{
	t->pending = needs_slow(t);
	if (t->pending)
		ml__force_slow(t);
	else
		ml__unforce(t);
}

/* Cleanup records: a thread keeps up to CLEANUP_CACHE spare records of
 * its own, so that a push/pop pair takes no lock (the pool's spin lock
 * cost 18 ns alone, 51 ns with a second thread doing the same); the rest
 * go back to the pool, and all of them when the thread exits. */
#define CLEANUP_CACHE 16

static struct ml__cleanup *cleanup_get(struct ml__thread *t)
{
	struct ml__cleanup *c = t->cleanup_spare;
	if (ml__likely(c != NULL)) {
		t->cleanup_spare = c->next;
		t->cleanup_nspare--;
		return c;
	}
	return ml__pool_get(&ml__cleanup_pool);
}

static void cleanup_put(struct ml__thread *t, struct ml__cleanup *c)
{
	if (t->cleanup_nspare < CLEANUP_CACHE && t->state == ML__T_LIVE) {
		c->next = t->cleanup_spare;
		t->cleanup_spare = c;
		t->cleanup_nspare++;
		return;
	}
	ml__pool_put(&ml__cleanup_pool, c);
}

static void run_cleanups_to(struct ml__thread *t, struct ml__cleanup *stop)
{
	while (t->cleanups && t->cleanups != stop) {
		struct ml__cleanup *c = t->cleanups;
		t->cleanups = c->next;
		c->fn(c->arg);
		cleanup_put(t, c);
	}
}

static void slice_end(struct ml__slice *slice);
static void entered_abandon(struct ml__thread *t, struct ml__slice *stop);

/* An entered slice's record goes back: kept for the thread's next enter
 * (no lock), or to the pool once the thread is exiting. */
static void entered_put(struct ml__thread *t, struct ml__slice *k)
{
	if (t->state == ML__T_LIVE) {
		k->outer = t->entered_spare;
		t->entered_spare = k;
		return;
	}
	ml__pool_put(&entered_pool, k);
}
static void slice_exact_end(struct ml__thread *t, struct ml__slice *slice);

static _Noreturn void jump(struct ml__thread *t, struct ml__slice *target)
{
	/* Cleanup handlers run innermost first, masked, as ordinary code:
	 * their allocations are sampled but nothing is delivered. */
	t->busy = 0;
	t->mask_depth++;
	run_cleanups_to(t, target->cleanups);
	t->cleanups = target->cleanups;
	t->cleanup_holes = target->holes;
	t->mask_depth = target->mask_depth;
	/* The slices above the target end here: their runners never
	 * return. */
	while (t->top != target) {
		struct ml__slice *k = t->top;
		if (t->exact)
			slice_exact_end(t, k);
		t->top = k->outer;
		slice_end(k);
	}
	if (t->own_interval)
		ml__thread_reinterval(t);
	siglongjmp(target->jb, 1);
}

/* Act on the interruptions on the stack for an allocation of n bytes
 * (alloc; n may be 0: malloc(0) is an allocation too), or at a safe point
 * such as ml_check (!alloc, n = 0).  0 = go on, -1 = fail it. */
static int deliver(struct ml__thread *t, uint64_t n, bool alloc)
{
	struct ml__slice *target = NULL, *failing = NULL;
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		if (k->seen == ML_OK)
			continue;
		if (k->task->delivery == ML_DELIVER_JUMP)
			target = k; /* keeps the outermost */
		else if (k->task->delivery == ML_DELIVER_FAIL)
			failing = k;
	}
	if (t->mask_depth)
		return 0;
	if (target) {
		enum ml__frames f = frames_check(t, target->frame);
		if (f == ML__FRAMES_SAFE)
			jump(t, target);
		target->pending_bytes += n;
		uint64_t cap =
		    PENDING_CAP_INTERVALS * (uint64_t)t->sampler.interval;
		if (alloc && f != ML__FRAMES_LOADER &&
		    target->pending_bytes > cap && ml__refusal_allowed())
			return -1;
		return 0;
	}
	if (failing && alloc) {
		/* Only a loader frame matters here: the short walk.  Then
		 * the embedder's refusal guard (guard.c). */
		if (frames_check(t, 0) == ML__FRAMES_LOADER ||
		    !ml__refusal_allowed())
			return 0;
		return -1;
	}
	return 0;
}

/* A held limit is set: neither 0 nor ML_NO_LIMIT (one comparison). */
static inline bool held_limited(uint64_t held_limit)
{
	return held_limit - 1 < ML_NO_LIMIT - 1;
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

/* Bring each slice's view of its task's status up to date: true when a
 * slice of this thread newly sees an interruption. */
static bool refresh_seen(struct ml__thread *t)
{
	bool tripped = false;
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		if (k->seen != ML_OK)
			continue;
		int st = atomic_load_explicit(&k->task->status,
		                              memory_order_relaxed);
		if (st != ML_OK) {
			k->seen = (ml_status)st;
			tripped = true;
		}
	}
	return tripped;
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
		else if (held_limited(task->held_limit) &&
		         ml__held_bytes(task) + w >= task->held_limit)
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
	if (refresh_seen(t) || (hook & ML__HOOK_TRIPPED))
		update_pending(t);
	int verdict = 0;
	if (t->pending)
		verdict = deliver(t, n, true);
	/* The consumer refuses this one allocation (run mode's heap limit),
	 * unless masked or made by the loader (which cannot survive it). */
	if ((hook & ML__HOOK_REFUSE) && !verdict && !t->mask_depth &&
	    frames_check(t, 0) != ML__FRAMES_LOADER)
		verdict = -1;
	/* A refused allocation allocated nothing: its samples do not count
	 * towards the tasks' estimates. */
	if (verdict)
		ml__tasks_unsample(t);
	return verdict;
}

void ml__tasks_recheck(struct ml__thread *t)
{
	update_pending(t);
}

void ml__tasks_push_bottom(struct ml__thread *t, struct ml__slice *slice)
{
	struct ml__slice **bottom = &t->top;
	while (*bottom)
		bottom = &(*bottom)->outer;
	slice->outer = NULL;
	*bottom = slice;
	update_pending(t);
}

int ml__tasks_pending(struct ml__thread *t, uint64_t n)
{
	return deliver(t, n, true);
}

void ml__tasks_thread_exit(struct ml__thread *t)
{
	/* pthread_exit inside ml_run: the frames are gone, so the handlers
	 * cannot run; only give their records back. */
	while (t->cleanups) {
		struct ml__cleanup *c = t->cleanups;
		t->cleanups = c->next;
		ml__pool_put(&ml__cleanup_pool, c);
	}
	while (t->cleanup_spare) {
		struct ml__cleanup *c = t->cleanup_spare;
		t->cleanup_spare = c->next;
		ml__pool_put(&ml__cleanup_pool, c);
	}
	t->cleanup_nspare = 0;
	/* Slices entered and never left (ml_task_enter): their records and
	 * their references to their tasks go now, as a leave would. */
	struct ml__slice *k = t->top;
	t->top = NULL;
	while (k) {
		struct ml__slice *outer = k->outer;
		ml__exact_release(k);
		if (k->entered)
			slice_end(k);
		k = outer;
	}
	while (t->entered_spare) {
		struct ml__slice *e = t->entered_spare;
		t->entered_spare = e->outer;
		ml__pool_put(&entered_pool, e);
	}
	t->exact = 0;
	t->own_interval = 0;
	t->cut = 0;
	t->mask_depth = 0;
	t->pending = 0;
	t->cleanup_holes = 0;
}

/* A safe point does not wait for a sample: the tokens of the tasks on
 * the stack, and interruptions made on other threads. */
void ml__tasks_poll(struct ml__thread *t)
{
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		struct ml_task *task = k->task;
		if (k->seen == ML_OK && task->token &&
		    atomic_load_explicit(&task->status, memory_order_relaxed) ==
		        ML_OK &&
		    ml__token_is_set(task->token))
			ml__task_trip(task, ML_CANCELLED);
	}
	if (refresh_seen(t))
		update_pending(t);
}

/* ---- Public API ------------------------------------------------------- */

/* Give back what a slice owns on its thread, as at its start: the cleanup
 * records pushed and not popped (discarded, not run), the holes above
 * them, the mask depth. */
static void slice_release(struct ml__thread *t, const struct ml__slice *slice)
{
	struct ml__cleanup *c;
	while ((c = t->cleanups) && c != slice->cleanups) {
		t->cleanups = c->next;
		cleanup_put(t, c);
	}
	t->cleanup_holes = slice->holes;
	t->mask_depth = slice->mask_depth;
}

/* The last reference to a task from ml_task_new went: the record goes
 * back. */
static ML__COLD void task_gone(struct ml_task *task)
{
	if (task->global)
		ml__global_unregister(task);
	ml__held_task_end(task);
	ml__held_unneed(); /* ml_task_new's */
	atomic_store_explicit(&task->magic, 0, memory_order_relaxed);
	ml__pool_put(&task_pool, task);
}

/* Drop a reference to a task from ml_task_new: the last one gives the
 * record back.  Inline: every ml_task_run ends with one. */
static inline __attribute__((always_inline)) void
task_unref(struct ml_task *task)
{
	if (atomic_fetch_sub_explicit(&task->refs, 1, memory_order_acq_rel) ==
	    1)
		task_gone(task);
}

/* A slice is off the stack, however it left (return, a jump past it,
 * unwinding): what it held of its task goes.  ml_run's own slice ends its
 * task (the global list, the held account); a slice of a task object
 * drops its reference, as does one of an ml_run's task run elsewhere. */
static void slice_end(struct ml__slice *slice)
{
	struct ml_task *task = slice->task;
	if (slice->owner) {
		if (task->global)
			ml__global_unregister(task);
		ml__held_task_end(task);
		if (held_limited(task->held_limit))
			ml__held_unneed();
	} else if (atomic_load_explicit(&task->magic, memory_order_relaxed) ==
	           ML__TASK_FRAME)
		atomic_fetch_sub_explicit(&task->refs, 1, memory_order_release);
	else
		task_unref(task);
	if (ml__unlikely(slice->entered))
		entered_put(&ml__self, slice);
}

/* Entered slices above `stop` on t's stack, left without ml_task_leave:
 * the runner of `stop` returned or unwound, or a jump passes them.  They
 * leave as ml_task_leave would have (a later leave finds them gone:
 * ML_EINVAL). */
static ML__COLD void entered_abandon(struct ml__thread *t,
                                     struct ml__slice *stop)
{
	while (t->top != stop && t->top && t->top->entered) {
		struct ml__slice *k = t->top;
		if (t->exact)
			slice_exact_end(t, k);
		t->top = k->outer;
		slice_end(k);
	}
	if (t->own_interval)
		ml__thread_reinterval(t);
}

/* Slices of an ml_run's task handed to other threads (ml_task_current)
 * end before the record goes with the ml_run's frame. */
static void wait_for_other_slices(struct ml_task *task)
{
	while (atomic_load_explicit(&task->refs, memory_order_acquire) > 1)
		sched_yield();
}

/* The runner's frame is unwound without returning (pthread_exit,
 * cancellation, a C++ exception out of fn): end the slice as a return
 * does, or a later jump would run handlers of the dead frame; and wait,
 * as a return does, for the other threads' slices of an ml_run's task,
 * whose record goes with the frame. */
static void slice_unwound(void *arg)
{
	struct ml__thread *t = &ml__self;
	struct ml__slice *slice = arg;
	if (t->top != slice)
		entered_abandon(t, slice);
	slice_release(t, slice);
	if (t->exact)
		slice_exact_end(t, slice);
	t->top = slice->outer;
	if (t->own_interval)
		ml__thread_reinterval(t);
	update_pending(t);
	if (slice->owner)
		wait_for_other_slices(slice->task);
	slice_end(slice);
}

/* An exact slice leaves (or one above it): charge what the fast path
 * allocated, give its reservation back, clip to what stays. */
static ML__COLD void slice_exact_end(struct ml__thread *t,
                                     struct ml__slice *slice)
{
	ml__exact_settle(t);
	ml__exact_release(slice);
	t->top = slice->outer;
	ml__exact_clip(t);
	t->top = slice;
}

/* Kept out of line so that every local the runner reads after the jump
 * lives in the slice record (memory), never in a register setjmp did not
 * save. */
static __attribute__((noinline)) void *call(struct ml__slice *slice,
                                            void *(*fn)(void *), void *arg)
{
	(void)slice;
	return fn(arg);
}

/* A slice of an exact task, of a task with an interval of its own, or on
 * a thread with an exact budget or an interval of its own on its stack
 * enters and leaves here, out of the common path (task->slow_slice is
 * exact || own_interval).  A task without an interval of its own entering
 * above one with a longer interval brings the thread back to the
 * process's, and leaving brings it back up: reinterval both ways. */
static ML__COLD void slice_enter_slow(struct ml__thread *t,
                                      struct ml__slice *slice)
{
	if (t->exact | slice->task->exact)
		ml__exact_settle(t);
	t->top = slice;
	if (t->exact | slice->task->exact)
		ml__exact_clip(t);
	if (slice->task->own_interval != 0 || t->own_interval)
		ml__thread_reinterval(t);
}

static ML__COLD void slice_leave_slow(struct ml__thread *t,
                                      struct ml__slice *slice)
{
	if (t->exact)
		slice_exact_end(t, slice);
	t->top = slice->outer;
	if (slice->task->own_interval != 0 || t->own_interval)
		ml__thread_reinterval(t);
}

/* fn returned: unbalanced pushes or masks inside it end with it.  The
 * common case (balanced) costs a comparison and two stores. */
static inline __attribute__((always_inline)) void
slice_returned(struct ml__thread *t, struct ml__slice *slice)
{
	/* fn entered a task and returned without leaving it. */
	if (ml__unlikely(t->top != slice))
		entered_abandon(t, slice);
	if (ml__unlikely(t->cleanups != slice->cleanups))
		slice_release(t, slice);
	t->cleanup_holes = slice->holes;
	t->mask_depth = slice->mask_depth;
}

/* Run fn(arg) as `slice` of its task on t's stack; ret: fn's result, or
 * NULL when an interruption jumped back here.  A macro, so that
 * sigsetjmp's frame is the runner's own (ml_run, ml_task_run): no extra
 * call on the path of an empty task, and `frame` points into it.  Field by
 * field: a designated initializer would also zero the 200-byte jump buffer
 * that sigsetjmp is about to fill.  ret needs no volatile: it is written
 * only after fn returned (no jump can come back then) or after the jump. */
#define RUN_SLICE(t, slice, fn, arg, ret)                                     \
	do {                                                                  \
		(slice)->outer = (t)->top;                                    \
		(slice)->seen = ML_OK;                                        \
		(slice)->mask_depth = (t)->mask_depth;                        \
		(slice)->cleanups = (t)->cleanups;                            \
		(slice)->holes = (t)->cleanup_holes;                          \
		(slice)->lost_cleanup = false;                                \
		(slice)->pending_bytes = 0;                                   \
		(slice)->res = 0;                                             \
		(slice)->credited = 0;                                        \
		(slice)->frame = (uintptr_t)__builtin_frame_address(0);       \
		if (ml__unlikely((t)->exact | (t)->own_interval |             \
		                 (slice)->task->slow_slice))                  \
			slice_enter_slow((t), (slice));                       \
		else                                                          \
			(t)->top = (slice);                                   \
		/* pthread_exit, cancellation or a C++ exception inside fn    \
		 * unwinds this frame without returning (the library is built \
		 * with -fexceptions): end the slice before its record goes   \
		 * (TLS destructors run, and allocate, before our thread-exit \
		 * hook). */                                                  \
		pthread_cleanup_push(slice_unwound, (slice));                 \
		if (sigsetjmp((slice)->jb, 0) == 0) {                         \
			(ret) = call((slice), (fn), (arg));                   \
			slice_returned((t), (slice));                         \
		} else {                                                      \
			(ret) = NULL;                                         \
		}                                                             \
		pthread_cleanup_pop(0);                                       \
		if (ml__unlikely((t)->exact | (t)->own_interval |             \
		                 (slice)->task->slow_slice))                  \
			slice_leave_slow((t), (slice));                       \
		else                                                          \
			(t)->top = (slice)->outer;                            \
		/* Taking a slice off the stack can only end a pending state. \
		 */                                                           \
		if ((t)->pending)                                             \
			update_pending(t);                                    \
	} while (0)

/* Its bytes so far: exact, or estimated from its samples. */
static inline uint64_t task_allocated(const struct ml_task *task)
{
	if (task->exact)
		return atomic_load_explicit(&task->exact_used,
		                            memory_order_relaxed);
	return atomic_load_explicit(&task->samples, memory_order_relaxed) *
	       task->interval;
}

/* Fill an outcome: the status the call returns, fn's result, the task's
 * estimate so far. */
static inline __attribute__((always_inline)) ml_status
finish(const struct ml__slice *slice, const struct ml_task *task, void *ret,
       ml_outcome *out)
{
	/* A cleanup handler that could not be registered may have been
	 * needed: the caller must know its cleanup discipline failed. */
	ml_status status = slice->lost_cleanup
	                       ? ML_ENOMEM
	                       : (ml_status)atomic_load_explicit(
	                             &task->status, memory_order_relaxed);
	if (out) {
		out->status = status;
		out->ret = ret;
		out->allocated = task_allocated(task);
		/* Most tasks never held a sampled block: no account, no
		 * calls. */
		bool acct = atomic_load_explicit(&task->acct,
		                                 memory_order_relaxed) != NULL;
		out->held = acct ? ml__held_bytes(task) : 0;
		out->held_peak = acct ? ml__held_peak(task) : 0;
	}
	return status;
}

static bool limits_valid(const ml_limits *limits)
{
	return limits && (unsigned)limits->delivery <= ML_DELIVER_FLAG;
}

/* A task's fields from its limits (the atomics without a fence: nobody
 * sees the record yet). */
static inline __attribute__((always_inline)) void
task_init(struct ml_task *task, const ml_limits *limits, uint32_t magic)
{
	uint64_t interval =
	    limits->interval
	        ? limits->interval
	        : atomic_load_explicit(&ml__interval, memory_order_relaxed);
	task->own_interval = limits->interval;
	atomic_init(&task->magic, magic);
	task->global = limits->global;
	task->internal = false;
	task->shared_trip = false; /* issue 27 */
	task->delivery = limits->delivery;
	task->token = limits->token;
	/* An exact budget is counted by exact.c, not by samples; its two
	 * counters are read only when exact. */
	task->exact = limits->exact_alloc && limits->alloc_bytes != ML_NO_LIMIT;
	if (ml__unlikely(task->exact)) {
		atomic_init(&task->k, UINT64_MAX);
		atomic_init(&task->exact_left, limits->alloc_bytes);
		atomic_init(&task->exact_used, 0);
	} else {
		atomic_init(&task->k, 0); /* at the first sample */
	}
	task->slow_slice = task->exact || limits->interval != 0;
	task->held_limit = limits->held_bytes; /* 0 or ML_NO_LIMIT: none */
	task->alloc_limit = limits->alloc_bytes;
	/* trip_allocated and trip_held are written before trip_ready is
	 * set (ml__task_trip), and read only after it. */
	atomic_init(&task->trip_ready, false);
	atomic_init(&task->trip_stack, 0);
	task->interval = interval;
	atomic_init(&task->samples, 0);
	atomic_init(&task->status, ML_OK);
	atomic_init(&task->refs, 1);
	atomic_init(&task->acct, NULL);
}

ML__VERSIONED ml_status ml__run_0_2(const ml_limits *limits,
                                    void *(*fn)(void *), void *arg,
                                    ml_outcome *out)
{
	if (!limits_valid(limits) || !fn)
		return ML_EINVAL;
	if (limits->token && ml__token_is_set(limits->token)) {
		if (out)
			*out = (ml_outcome){.status = ML_CANCELLED};
		return ML_CANCELLED;
	}
	struct ml__thread *t = &ml__self;
	struct ml_task task;
	struct ml__slice slice;
	void *ret;
	task_init(&task, limits, ML__TASK_FRAME);
	ml__metrics_add(t, ML__M_STARTED, 1);
	if (ml__unlikely(held_limited(task.held_limit)))
		ml__held_need(); /* until slice_end */
	slice.task = &task;
	slice.owner = true;
	slice.entered = false;
	if (task.global)
		ml__global_register(&task);
	RUN_SLICE(t, &slice, fn, arg, ret);
	wait_for_other_slices(&task);
	ml_status status = finish(&slice, &task, ret, out);
	if (task.global || held_limited(task.held_limit) ||
	    atomic_load_explicit(&task.acct, memory_order_relaxed))
		slice_end(&slice);
	ml__pressure_check();
	return status;
}
ML__SYMVER_DEFAULT(ml__run_0_2, ml_run, "MEMLIMITS_0.2");

/* A task pointer from outside: a live task of ml_task_new, or ml_run's
 * (FRAME) while it runs; anything else is refused where it can be told. */
bool ml__task_valid(const struct ml_task *task)
{
	if (!task)
		return false;
	uint32_t magic =
	    atomic_load_explicit(&task->magic, memory_order_relaxed);
	return magic == ML__TASK_LIVE ||
	       (magic == ML__TASK_FRAME && !task->internal);
}

/* A set token interrupts its task at once, seen from any call.  Inline:
 * every ml_task_run starts with one. */
static inline __attribute__((always_inline)) ml_status
task_poll(struct ml_task *task)
{
	int st = atomic_load_explicit(&task->status, memory_order_relaxed);
	if (st == ML_OK && task->token && ml__token_is_set(task->token))
		st = ml__task_trip(task, ML_CANCELLED);
	return (ml_status)st;
}

ML_EXPORT ml_task *ml_task_new(const ml_limits *limits)
{
	if (!limits_valid(limits)) {
		errno = EINVAL;
		return NULL;
	}
	struct ml_task *task = ml__pool_get(&task_pool);
	if (!task) {
		errno = ENOMEM;
		return NULL;
	}
	/* A task object may outlive its slices and hold memory between
	 * them: what it holds is tracked from now on, until its record goes
	 * (task_unref). */
	ml__held_need();
	task_init(task, limits, ML__TASK_LIVE);
	ml__metrics_add(&ml__self, ML__M_STARTED, 1);
	if (task->global)
		ml__global_register(task);
	return task;
}

ML_EXPORT void ml_task_free(ml_task *task)
{
	if (!task)
		return;
	if (atomic_load_explicit(&task->magic, memory_order_relaxed) !=
	    ML__TASK_LIVE) {
		ml__diag("ml_task_free: %p is not a live task (freed twice, or "
		         "an ml_run's task)",
		         (void *)task);
		return;
	}
	atomic_store_explicit(&task->magic, ML__TASK_FREED,
	                      memory_order_relaxed);
	task_unref(task);
}

ML_EXPORT ml_status ml_task_run(ml_task *task, void *(*fn)(void *), void *arg,
                                ml_outcome *out)
{
	if (!ml__task_valid(task) || !fn)
		return ML_EINVAL;
	struct ml__slice slice;
	slice.task = task;
	slice.owner = false;
	slice.entered = false;
	slice.lost_cleanup = false;
	if (task_poll(task) != ML_OK)
		return finish(&slice, task, NULL, out);
	struct ml__thread *t = &ml__self;
	void *ret;
	atomic_fetch_add_explicit(&task->refs, 1, memory_order_relaxed);
	RUN_SLICE(t, &slice, fn, arg, ret);
	ml_status status = finish(&slice, task, ret, out);
	/* slice_end for a slice that is not its task's owner, inline. */
	if (atomic_load_explicit(&task->magic, memory_order_relaxed) ==
	    ML__TASK_FRAME)
		atomic_fetch_sub_explicit(&task->refs, 1, memory_order_release);
	else
		task_unref(task);
	ml__pressure_check();
	return status;
}

ML_EXPORT ml_status ml_task_status(const ml_task *task)
{
	if (!ml__task_valid(task))
		return ML_EINVAL;
	return task_poll((struct ml_task *)task);
}

ML_EXPORT uint64_t ml_task_allocated(const ml_task *task)
{
	if (!ml__task_valid(task))
		return 0;
	return task_allocated(task);
}

ML_EXPORT uint64_t ml_task_held(const ml_task *task)
{
	if (!ml__task_valid(task))
		return 0;
	return ml__held_bytes(task);
}

ML_EXPORT ml_task *ml_task_current(void)
{
	for (struct ml__slice *k = ml__self.top; k; k = k->outer)
		if (!k->task->internal)
			return k->task;
	return NULL;
}

int ml__task_enter(ml_task *task)
{
	if (!ml__task_valid(task) || task->delivery == ML_DELIVER_JUMP)
		return ML_EINVAL;
	struct ml__thread *t = &ml__self;
	/* Once per thread: entering twice would count nothing more, and
	 * the two leaves could not be told apart. */
	for (const struct ml__slice *k = t->top; k; k = k->outer)
		if (k->entered && k->task == task)
			return ML_EINVAL;
	/* As ml_task_run: an interrupted task runs no further slice. */
	ml_status st = task_poll(task);
	if (st != ML_OK)
		return st;
	struct ml__slice *slice = t->entered_spare;
	if (ml__likely(slice != NULL)) {
		t->entered_spare = slice->outer;
	} else {
		slice = ml__pool_get(&entered_pool);
		if (!slice)
			return ML_ENOMEM;
	}
	slice->task = task;
	slice->owner = false;
	slice->entered = true;
	slice->outer = t->top;
	slice->seen = ML_OK;
	slice->mask_depth = t->mask_depth;
	slice->cleanups = t->cleanups;
	slice->holes = t->cleanup_holes;
	slice->lost_cleanup = false;
	slice->pending_bytes = 0;
	slice->res = 0;
	slice->credited = 0;
	slice->frame = 0; /* never a jump's target: FAIL and FLAG only */
	atomic_fetch_add_explicit(&task->refs, 1, memory_order_relaxed);
	if (ml__unlikely(t->exact | t->own_interval | task->slow_slice))
		slice_enter_slow(t, slice);
	else
		t->top = slice;
	return ML_OK;
}

ML_EXPORT int ml_task_leave(ml_task *task)
{
	struct ml__thread *t = &ml__self;
	struct ml__slice *slice = t->top;
	if (!task || !slice || !slice->entered || slice->task != task)
		return ML_EINVAL;
	/* Unbalanced pushes and masks end with the slice, as with fn's
	 * return in ml_task_run. */
	if (ml__unlikely(t->cleanups != slice->cleanups))
		slice_release(t, slice);
	t->cleanup_holes = slice->holes;
	t->mask_depth = slice->mask_depth;
	if (ml__unlikely(t->exact | t->own_interval | task->slow_slice))
		slice_leave_slow(t, slice);
	else
		t->top = slice->outer;
	if (t->pending)
		update_pending(t);
	/* Read before the reference goes: it may be the last. */
	ml_status st = slice->lost_cleanup
	                   ? ML_ENOMEM
	                   : (ml_status)atomic_load_explicit(
	                         &task->status, memory_order_relaxed);
	slice_end(slice);
	ml__pressure_check();
	return st;
}

ML__VERSIONED ml_status ml__limit_allocations_0_2(uint64_t bytes,
                                                  void *(*fn)(void *),
                                                  void *arg, ml_outcome *out)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = bytes;
	l.delivery = ml_default_delivery();
	return ml__run_0_2(&l, fn, arg, out);
}
ML__SYMVER_DEFAULT(ml__limit_allocations_0_2, ml_limit_allocations,
                   "MEMLIMITS_0.2");

ML__VERSIONED ml_status ml__limit_global_memory_0_2(void *(*fn)(void *),
                                                    void *arg, ml_outcome *out)
{
	ml_limits l = ML_LIMITS_INIT;
	l.global = true;
	l.delivery = ml_default_delivery();
	return ml__run_0_2(&l, fn, arg, out);
}
ML__SYMVER_DEFAULT(ml__limit_global_memory_0_2, ml_limit_global_memory,
                   "MEMLIMITS_0.2");

ML__VERSIONED ml_status ml__limit_with_token_0_2(ml_token *tok,
                                                 void *(*fn)(void *), void *arg,
                                                 ml_outcome *out)
{
	if (!tok)
		return ML_EINVAL;
	ml_limits l = ML_LIMITS_INIT;
	l.token = tok;
	l.delivery = ml_default_delivery();
	return ml__run_0_2(&l, fn, arg, out);
}
ML__SYMVER_DEFAULT(ml__limit_with_token_0_2, ml_limit_with_token,
                   "MEMLIMITS_0.2");

ML_EXPORT bool ml_is_interrupted(void)
{
	struct ml__thread *t = &ml__self;
	ml__pressure_check();
	ml__tasks_poll(t);
	for (struct ml__slice *k = t->top; k; k = k->outer)
		if (k->seen != ML_OK)
			return true;
	return false;
}

ML_EXPORT void ml_check(void)
{
	struct ml__thread *t = &ml__self;
	ml__pressure_check();
	ml__tasks_poll(t);
	if (t->pending)
		deliver(t, 0, false);
}

ML_EXPORT void ml_mask(void)
{
	ml__self.mask_depth++;
}

ML_EXPORT void ml_unmask(void)
{
	struct ml__thread *t = &ml__self;
	if (!t->mask_depth)
		return;
	if (--t->mask_depth)
		return;
	/* The outermost unmask is a safe point, like ml_check. */
	ml__tasks_poll(t);
	if (t->pending)
		deliver(t, 0, false);
}

ML_EXPORT bool ml_is_masked(void)
{
	return ml__self.mask_depth != 0;
}

ML_EXPORT void ml_cleanup_push(void (*fn)(void *), void *arg)
{
	struct ml__thread *t = &ml__self;
	/* A NULL handler is a hole too, so that its pop stays paired. */
	struct ml__cleanup *c = fn ? cleanup_get(t) : NULL;
	if (!fn) {
		t->cleanup_holes++;
		return;
	}
	if (!c) {
		/* No memory for the record: remember a hole so that the
		 * matching pop stays paired, and make ml_run report it. */
		t->cleanup_holes++;
		if (t->top)
			t->top->lost_cleanup = true;
		ml__diag("ml_cleanup_push: no memory for a cleanup record");
		return;
	}
	*c = (struct ml__cleanup){t->cleanups, fn, arg, t->cleanup_holes};
	t->cleanups = c;
	t->cleanup_holes = 0;
}

ML_EXPORT void ml_cleanup_pop(bool execute)
{
	struct ml__thread *t = &ml__self;
	const struct ml__slice *top = t->top;
	/* Never pop what belongs to an enclosing task. */
	if (top && t->cleanups == top->cleanups &&
	    t->cleanup_holes <= top->holes)
		return;
	if (t->cleanup_holes) {
		t->cleanup_holes--;
		return;
	}
	struct ml__cleanup *c = t->cleanups;
	if (!c)
		return;
	t->cleanups = c->next;
	t->cleanup_holes = c->holes;
	void (*fn)(void *) = c->fn;
	void *arg = c->arg;
	cleanup_put(t, c);
	if (execute)
		fn(arg);
}
