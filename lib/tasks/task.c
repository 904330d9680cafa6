/* Tasks: the per-thread stack of ml_run frames, limits, interruptions and
 * their delivery, masking and cleanup handlers.
 *
 * A task record lives in its ml_run's stack frame; cleanup records come
 * from our own pool.  Samples arrive from the allocation slow path
 * (ml__tasks_sample); every task on the stack is credited, each one's
 * limits are checked, and a newly reached limit makes the task
 * interrupted for good.  Delivery then depends on the interrupted tasks:
 *  - the outermost interrupted JUMP task is jumped to, when no runtime frame
 *    (libc, loader, libstdc++, libgcc, libunwind) lies between the
 *    allocation and its ml_run and the thread is not masked; otherwise the
 *    jump is pending and every later allocation comes back here;
 *  - with an interrupted FAIL task on the stack, allocations fail, except
 *    while masked or inside the loader;
 *  - FLAG tasks are only flagged.
 * While anything is pending the countdown is forced to 0, so the fast path
 * itself never tests for it. */
#define _GNU_SOURCE
#include "tasks/tasks.h"

#include <errno.h>
#include <pthread.h>

struct ml__cleanup {
	struct ml__cleanup *next;
	void (*fn)(void *);
	void *arg;
	uint32_t holes; /* failed pushes just below this record */
};

ML__POOL(, ml__cleanup_pool, sizeof(struct ml__cleanup))

/* Bytes a pending JUMP task may allocate inside runtime frames before
 * those allocations start failing: bounds the overshoot of a jump that
 * cannot be delivered (docs/statistics.md, "Delivery"). */
#define PENDING_CAP_INTERVALS 4

bool ml__over_global(uint64_t n)
{
	uint64_t limit =
	    atomic_load_explicit(&ml__global_limit, memory_order_relaxed);
	if (limit == ML_NO_LIMIT)
		return false;
	uint64_t usage = ml__meter_usage();
	return usage > limit || n > limit - usage;
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
	for (const struct ml__task *k = t->top; k; k = k->outer)
		if (k->status != ML_OK && k->delivery != ML_DELIVER_FLAG)
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

static void run_cleanups_to(struct ml__thread *t, struct ml__cleanup *stop)
{
	while (t->cleanups && t->cleanups != stop) {
		struct ml__cleanup *c = t->cleanups;
		t->cleanups = c->next;
		c->fn(c->arg);
		ml__pool_put(&ml__cleanup_pool, c);
	}
}

static _Noreturn void jump(struct ml__thread *t, struct ml__task *target)
{
	/* Cleanup handlers run innermost first, masked, as ordinary code:
	 * their allocations are sampled but nothing is delivered. */
	t->busy = 0;
	t->mask_depth++;
	run_cleanups_to(t, target->cleanups);
	t->cleanups = target->cleanups;
	t->cleanup_holes = target->holes;
	t->mask_depth = target->mask_depth;
	t->top = target;
	siglongjmp(target->jb, 1);
}

/* Act on the interruptions on the stack for an allocation of n bytes
 * (n = 0: a safe point such as ml_check).  0 = go on, -1 = fail it. */
static int deliver(struct ml__thread *t, uint64_t n)
{
	struct ml__task *target = NULL, *failing = NULL;
	for (struct ml__task *k = t->top; k; k = k->outer) {
		if (k->status == ML_OK)
			continue;
		if (k->delivery == ML_DELIVER_JUMP)
			target = k; /* keeps the outermost */
		else if (k->delivery == ML_DELIVER_FAIL)
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
		if (n && f != ML__FRAMES_LOADER && target->pending_bytes > cap)
			return -1;
		return 0;
	}
	if (failing && n) {
		/* Only a loader frame matters here: the short walk. */
		if (frames_check(t, 0) == ML__FRAMES_LOADER)
			return 0;
		return -1;
	}
	return 0;
}

void ml__tasks_unsample(struct ml__thread *t, uint64_t s)
{
	for (struct ml__task *k = t->top; k; k = k->outer)
		k->samples -= s;
}

int ml__tasks_sample(struct ml__thread *t, uint64_t s, uint64_t n,
                     unsigned hook)
{
	if (!t->top)
		return 0;
	bool tripped = (hook & ML__HOOK_TRIPPED) != 0;
	for (struct ml__task *k = t->top; k; k = k->outer) {
		k->samples += s;
		if (k->status != ML_OK)
			continue;
		if (k->samples >= k->k)
			k->status = ML_ALLOC_LIMIT;
		else if (k->global && ml__over_global(n))
			k->status = ML_GLOBAL_LIMIT;
		else if (k->token && ml_token_is_set(k->token))
			k->status = ML_CANCELLED;
		else
			continue;
		tripped = true;
	}
	if (tripped)
		update_pending(t);
	int verdict = 0;
	if (t->pending)
		verdict = deliver(t, n);
	/* The consumer refuses this one allocation (run mode's heap limit),
	 * unless masked or made by the loader (which cannot survive it). */
	if ((hook & ML__HOOK_REFUSE) && !verdict && !t->mask_depth &&
	    frames_check(t, 0) != ML__FRAMES_LOADER)
		verdict = -1;
	/* A refused allocation allocated nothing: its samples do not count
	 * towards the tasks' estimates. */
	if (verdict)
		ml__tasks_unsample(t, s);
	return verdict;
}

void ml__tasks_recheck(struct ml__thread *t)
{
	update_pending(t);
}

void ml__tasks_push_bottom(struct ml__thread *t, struct ml__task *task)
{
	struct ml__task **bottom = &t->top;
	while (*bottom)
		bottom = &(*bottom)->outer;
	task->outer = NULL;
	*bottom = task;
	update_pending(t);
}

void ml__tasks_remove(struct ml__thread *t, struct ml__task *task)
{
	for (struct ml__task **p = &t->top; *p; p = &(*p)->outer)
		if (*p == task) {
			*p = task->outer;
			break;
		}
	update_pending(t);
}

int ml__tasks_pending(struct ml__thread *t, uint64_t n)
{
	return deliver(t, n);
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
	t->top = NULL;
	t->mask_depth = 0;
	t->pending = 0;
	t->cleanup_holes = 0;
}

/* Poll the tokens of the tasks on the stack (a safe point does not wait
 * for a sample to notice a cancellation). */
static void poll_tokens(struct ml__thread *t)
{
	bool tripped = false;
	for (struct ml__task *k = t->top; k; k = k->outer)
		if (k->status == ML_OK && k->token &&
		    ml_token_is_set(k->token)) {
			k->status = ML_CANCELLED;
			tripped = true;
		}
	if (tripped)
		update_pending(t);
}

/* ---- Public API ------------------------------------------------------- */

static uint64_t samples_needed(uint64_t bytes, uint64_t s)
{
	if (bytes == ML_NO_LIMIT)
		return UINT64_MAX;
	return ml__samples_needed(bytes, s);
}

/* Give back what a task owns on its thread, as at its start: the cleanup
 * records pushed and not popped (discarded, not run), the holes above
 * them, the mask depth. */
static void task_release(struct ml__thread *t, const struct ml__task *task)
{
	struct ml__cleanup *c;
	while ((c = t->cleanups) && c != task->cleanups) {
		t->cleanups = c->next;
		ml__pool_put(&ml__cleanup_pool, c);
	}
	t->cleanup_holes = task->holes;
	t->mask_depth = task->mask_depth;
}

/* ml_run's frame is unwound without returning (pthread_exit,
 * cancellation, a C++ exception out of fn): end the task as a return
 * does, or a later jump would run handlers of the dead frame. */
static void task_unwound(void *arg)
{
	struct ml__thread *t = &ml__self;
	struct ml__task *task = arg;
	task_release(t, task);
	t->top = task->outer;
	update_pending(t);
}

/* Kept out of line so that every local ml_run reads after the jump lives
 * in the task record (memory), never in a register setjmp did not save. */
static __attribute__((noinline)) void *call(struct ml__task *task,
                                            void *(*fn)(void *), void *arg)
{
	(void)task;
	return fn(arg);
}

ML_EXPORT ml_status ml_run(const ml_limits *limits, void *(*fn)(void *),
                           void *arg, ml_outcome *out)
{
	if (!limits || !fn || (unsigned)limits->delivery > ML_DELIVER_FLAG)
		return ML_EINVAL;
	struct ml__thread *t = &ml__self;
	uint64_t interval = atomic_load(&ml__interval);
	if (limits->token && ml_token_is_set(limits->token)) {
		if (out)
			*out = (ml_outcome){ML_CANCELLED, NULL, 0};
		return ML_CANCELLED;
	}
	/* Field by field: a designated initializer would also zero the
	 * 200-byte jump buffer that sigsetjmp is about to fill. */
	struct ml__task task;
	task.outer = t->top;
	task.k = samples_needed(limits->alloc_bytes, interval);
	task.samples = 0;
	task.token = limits->token;
	task.global = limits->global;
	task.delivery = limits->delivery;
	task.status = ML_OK;
	task.mask_depth = t->mask_depth;
	task.cleanups = t->cleanups;
	task.holes = t->cleanup_holes;
	task.lost_cleanup = false;
	task.pending_bytes = 0;
	task.frame = (uintptr_t)__builtin_frame_address(0);
	void *volatile ret = NULL;
	t->top = &task;
	/* pthread_exit, cancellation or a C++ exception inside fn unwinds
	 * this frame without returning (the library is built with
	 * -fexceptions): end the task before its record goes (TLS destructors
	 * run, and allocate, before our thread-exit hook). */
	pthread_cleanup_push(task_unwound, &task);
	if (sigsetjmp(task.jb, 0) == 0) {
		ret = call(&task, fn, arg);
		/* Unbalanced pushes or masks inside fn end with it. */
		task_release(t, &task);
	}
	pthread_cleanup_pop(0);
	t->top = task.outer;
	update_pending(t);
	/* A cleanup handler that could not be registered may have been
	 * needed: the caller must know its cleanup discipline failed. */
	ml_status status = task.lost_cleanup ? ML_ENOMEM : task.status;
	if (out) {
		out->status = status;
		out->ret = ret;
		out->allocated = task.samples * interval;
	}
	return status;
}

ML_EXPORT ml_status ml_limit_allocations(uint64_t bytes, void *(*fn)(void *),
                                         void *arg, ml_outcome *out)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = bytes;
	l.delivery = ml_default_delivery();
	return ml_run(&l, fn, arg, out);
}

ML_EXPORT ml_status ml_limit_global_memory(void *(*fn)(void *), void *arg,
                                           ml_outcome *out)
{
	ml_limits l = ML_LIMITS_INIT;
	l.global = true;
	l.delivery = ml_default_delivery();
	return ml_run(&l, fn, arg, out);
}

ML_EXPORT ml_status ml_limit_with_token(ml_token *tok, void *(*fn)(void *),
                                        void *arg, ml_outcome *out)
{
	if (!tok)
		return ML_EINVAL;
	ml_limits l = ML_LIMITS_INIT;
	l.token = tok;
	l.delivery = ml_default_delivery();
	return ml_run(&l, fn, arg, out);
}

ML_EXPORT bool ml_is_interrupted(void)
{
	struct ml__thread *t = &ml__self;
	poll_tokens(t);
	for (struct ml__task *k = t->top; k; k = k->outer)
		if (k->status != ML_OK)
			return true;
	return false;
}

ML_EXPORT void ml_check(void)
{
	struct ml__thread *t = &ml__self;
	poll_tokens(t);
	if (t->pending)
		deliver(t, 0);
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
	poll_tokens(t);
	if (t->pending)
		deliver(t, 0);
}

ML_EXPORT bool ml_is_masked(void)
{
	return ml__self.mask_depth != 0;
}

ML_EXPORT void ml_cleanup_push(void (*fn)(void *), void *arg)
{
	struct ml__thread *t = &ml__self;
	/* A NULL handler is a hole too, so that its pop stays paired. */
	struct ml__cleanup *c = fn ? ml__pool_get(&ml__cleanup_pool) : NULL;
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
	const struct ml__task *top = t->top;
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
	ml__pool_put(&ml__cleanup_pool, c);
	if (execute)
		fn(arg);
}
