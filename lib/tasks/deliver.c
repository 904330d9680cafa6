/* Delivery: how an interruption reaches a slice of this thread.  A slice
 * sees its task's interruption at its own next sample or safe point (its
 * `seen`); then, by the interrupted slices of this thread:
 *  - the outermost interrupted JUMP slice is jumped to, when no runtime
 *    frame (libc, loader, libstdc++, libgcc) lies between the allocation
 *    and its runner and the thread is not masked; otherwise the jump is
 *    pending and every later allocation comes back here;
 *  - with an interrupted FAIL slice on the stack, allocations fail, except
 *    while masked or inside the loader;
 *  - FLAG slices are only flagged.
 * While anything is pending the countdown is forced to 0, so the fast path
 * itself never tests for it.  Safe points and masks are here too. */
#define _GNU_SOURCE
#include "tasks/tasks.h"

/* Bytes a pending JUMP task may allocate inside runtime frames before
 * those allocations start failing: bounds the overshoot of a jump that
 * cannot be delivered (docs/statistics.md, "Delivery"). */
#define PENDING_CAP_INTERVALS 4

/* The unwinder may allocate (frames registered at run time): those
 * allocations must pass straight through, also when we come from
 * ml_check or ml_unmask. */
enum ml__frames ml__tasks_frames_check(struct ml__thread *t, uintptr_t stop)
{
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__force_slow(t);
	enum ml__frames f = ml__frames_check(stop);
	t->busy = busy;
	ml__unforce(t);
	return f;
}

static _Noreturn void jump(struct ml__thread *t, struct ml__slice *target)
{
	/* Cleanup handlers run innermost first, masked, as ordinary code:
	 * their allocations are sampled but nothing is delivered. */
	t->busy = 0;
	/* What the slow path that jumps had set for the allocation it
	 * decided (issue 41): left set, run mode judged the thread's next
	 * blocks as mappings (the headroom) and held checks counted a block
	 * as replaced. */
	t->mapping = 0;
	t->replacing = NULL;
	t->mask_depth++;
	ml__cleanup_run_to(t, target->cleanups);
	t->cleanups = target->cleanups;
	t->cleanup_holes = target->holes;
	t->mask_depth = target->mask_depth;
	/* The slices above the target end here: their runners never
	 * return. */
	while (t->top != target)
		ml__slice_pop(t);
	if (t->own_interval)
		ml__thread_reinterval(t);
	siglongjmp(target->jb, 1);
}

/* Act on the interruptions on the stack for an allocation of n bytes
 * (alloc; n may be 0: malloc(0) is an allocation too), or at a safe point
 * such as ml_check (!alloc, n = 0).  0 = go on, -1 = fail it. */
int ml__deliver(struct ml__thread *t, uint64_t n, bool alloc)
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
		enum ml__frames f = ml__tasks_frames_check(t, target->frame);
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
		if (ml__tasks_frames_check(t, 0) == ML__FRAMES_LOADER ||
		    !ml__refusal_allowed())
			return 0;
		return -1;
	}
	return 0;
}

/* Bring each slice's view of its task's status up to date: true when a
 * slice of this thread newly sees an interruption. */
bool ml__refresh_seen(struct ml__thread *t)
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

int ml__tasks_pending(struct ml__thread *t, uint64_t n)
{
	return ml__deliver(t, n, true);
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
	if (ml__refresh_seen(t))
		ml__update_pending(t);
}

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
		ml__deliver(t, 0, false);
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
		ml__deliver(t, 0, false);
}

ML_EXPORT bool ml_is_masked(void)
{
	return ml__self.mask_depth != 0;
}
