/* Slices: a task running on this thread, on its stack.  Their start and
 * end out of the common path, how they end (return, jump, unwinding,
 * thread exit), ml_task_enter's records, what is pending on the stack. */
#define _GNU_SOURCE
#include "tasks/tasks.h"

#include <sched.h>

ML__POOL(, ml__task_pool, (sizeof(struct ml_task) + 15) & ~(size_t)15)
/* ml_task_enter's slice records: the slice outlives the call that made
 * it, so it cannot live in a runner's frame. */
ML__POOL(, ml__entered_pool, (sizeof(struct ml__slice) + 15) & ~(size_t)15)

/* Anything on the stack that needs to see the next allocations? */
static bool needs_slow(const struct ml__thread *t)
{
	for (const struct ml__slice *k = t->top; k; k = k->outer)
		if (k->seen != ML_OK && k->task->delivery != ML_DELIVER_FLAG)
			return true;
	return false;
}

void ml__update_pending(struct ml__thread *t)
{
	t->pending = needs_slow(t);
	if (t->pending)
		ml__force_slow(t);
	else
		ml__unforce(t);
}

/* An entered slice's record goes back: kept for the thread's next enter
 * (no lock), or to the pool once the thread is exiting. */
static void entered_put(struct ml__thread *t, struct ml__slice *k)
{
	if (t->state == ML__T_LIVE) {
		k->outer = t->entered_spare;
		t->entered_spare = k;
		return;
	}
	ml__pool_put(&ml__entered_pool, k);
}

void ml__tasks_recheck(struct ml__thread *t)
{
	ml__update_pending(t);
}

void ml__tasks_push_bottom(struct ml__thread *t, struct ml__slice *slice)
{
	struct ml__slice **bottom = &t->top;
	while (*bottom)
		bottom = &(*bottom)->outer;
	slice->outer = NULL;
	*bottom = slice;
	ml__update_pending(t);
}

void ml__tasks_thread_exit(struct ml__thread *t)
{
	ml__cleanup_thread_exit(t);
	/* Slices entered and never left (ml_task_enter): their records and
	 * their references to their tasks go now, as a leave would. */
	struct ml__slice *k = t->top;
	t->top = NULL;
	while (k) {
		struct ml__slice *outer = k->outer;
		ml__exact_release(k);
		if (k->entered)
			ml__slice_end(k);
		k = outer;
	}
	while (t->entered_spare) {
		struct ml__slice *e = t->entered_spare;
		t->entered_spare = e->outer;
		ml__pool_put(&ml__entered_pool, e);
	}
	t->exact = 0;
	t->own_interval = 0;
	t->cut = 0;
	t->mask_depth = 0;
	t->pending = 0;
	t->cleanup_holes = 0;
}

/* The last reference to a task from ml_task_new went: the record goes
 * back. */
ML__COLD void ml__task_gone(struct ml_task *task)
{
	if (task->global)
		ml__global_unregister(task);
	ml__held_task_end(task);
	ml__held_unneed(); /* ml_task_new's */
	atomic_store_explicit(&task->magic, 0, memory_order_relaxed);
	ml__pool_put(&ml__task_pool, task);
}

/* A slice is off the stack, however it left (return, a jump past it,
 * unwinding): what it held of its task goes.  ml_run's own slice ends its
 * task (the global list, the held account); a slice of a task object
 * drops its reference, as does one of an ml_run's task run elsewhere. */
void ml__slice_end(struct ml__slice *slice)
{
	struct ml_task *task = slice->task;
	/* Before the reference goes: it may be the last. */
	if (ml__unlikely(slice->entered))
		atomic_fetch_sub_explicit(&task->entered_slices, 1,
		                          memory_order_relaxed);
	if (slice->owner) {
		if (task->global)
			ml__global_unregister(task);
		ml__held_task_end(task);
		if (ml__held_limited(task->held_limit))
			ml__held_unneed();
	} else if (atomic_load_explicit(&task->magic, memory_order_relaxed) ==
	           ML__TASK_FRAME)
		atomic_fetch_sub_explicit(&task->refs, 1, memory_order_release);
	else
		ml__task_unref(task);
	if (ml__unlikely(slice->entered))
		entered_put(&ml__self, slice);
}

void ml__slice_pop(struct ml__thread *t)
{
	struct ml__slice *k = t->top;
	if (t->exact)
		ml__slice_exact_end(t, k);
	t->top = k->outer;
	ml__slice_end(k);
}

/* Entered slices above `stop` on t's stack, left without ml_task_leave:
 * the runner of `stop` returned or unwound, or a jump passes them.  They
 * leave as ml_task_leave would have (a later leave finds them gone:
 * ML_EINVAL). */
ML__COLD void ml__entered_abandon(struct ml__thread *t, struct ml__slice *stop)
{
	while (t->top != stop && t->top && t->top->entered)
		ml__slice_pop(t);
	if (t->own_interval)
		ml__thread_reinterval(t);
}

/* The runner's frame is unwound without returning (pthread_exit,
 * cancellation, a C++ exception out of fn): end the slice as a return
 * does, or a later jump would run handlers of the dead frame; and wait,
 * as a return does, for the other threads' slices of an ml_run's task,
 * whose record goes with the frame. */
void ml__slice_unwound(void *arg)
{
	struct ml__thread *t = &ml__self;
	struct ml__slice *slice = arg;
	if (t->top != slice)
		ml__entered_abandon(t, slice);
	ml__slice_release(t, slice);
	if (t->exact)
		ml__slice_exact_end(t, slice);
	t->top = slice->outer;
	if (t->own_interval)
		ml__thread_reinterval(t);
	ml__update_pending(t);
	if (slice->owner)
		ml__wait_for_other_slices(slice->task);
	ml__slice_end(slice);
}

/* An exact slice leaves (or one above it): charge what the fast path
 * allocated, give its reservation back, clip to what stays. */
ML__COLD void ml__slice_exact_end(struct ml__thread *t, struct ml__slice *slice)
{
	ml__exact_settle(t);
	ml__exact_release(slice);
	t->top = slice->outer;
	ml__exact_clip(t);
	t->top = slice;
}

/* A slice of an exact task, of a task with an interval of its own, or on
 * a thread with an exact budget or an interval of its own on its stack
 * enters and leaves here, out of the common path (task->slow_slice is
 * exact || own_interval).  A task without an interval of its own entering
 * above one with a longer interval brings the thread back to the
 * process's, and leaving brings it back up: reinterval both ways. */
ML__COLD void ml__slice_enter_slow(struct ml__thread *t,
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

ML__COLD void ml__slice_leave_slow(struct ml__thread *t,
                                   struct ml__slice *slice)
{
	if (t->exact)
		ml__slice_exact_end(t, slice);
	t->top = slice->outer;
	if (slice->task->own_interval != 0 || t->own_interval)
		ml__thread_reinterval(t);
}
