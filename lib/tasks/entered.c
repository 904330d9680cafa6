/* Entered slices (ml_task_enter, ml_task_leave): a task entered on this
 * thread without a call to run, left by the same thread; a slice record
 * from the thread's spares or ml__entered_pool, never a jump's target
 * (FAIL and FLAG delivery only).  What ends a slice left entered is
 * slice.c's (ml__entered_abandon); the thread is started above, by
 * api/enter.c. */
#include "tasks/tasks.h"

int ml__task_enter(ml_task *task)
{
	if (!ml__task_valid(task) || task->delivery == ML_DELIVER_JUMP)
		return ML_EINVAL;
	struct ml__thread *t = &ml__self;
	/* Once per thread: entering twice would count nothing more, and
	 * the two leaves could not be told apart.  A task entered nowhere
	 * (the count is 0) is not entered here: this thread's own enters
	 * are in the count it reads.  Only a task entered on some thread
	 * walks this thread's stack, so nested enters of distinct tasks
	 * cost the same at any depth. */
	if (atomic_load_explicit(&task->entered_slices, memory_order_relaxed))
		for (const struct ml__slice *k = t->top; k; k = k->outer)
			if (k->entered && k->task == task)
				return ML_EINVAL;
	/* As ml_task_run: an interrupted task runs no further slice. */
	ml_status st = ml__task_poll(task);
	if (st != ML_OK)
		return st;
	struct ml__slice *slice = t->entered_spare;
	if (ml__likely(slice != NULL)) {
		t->entered_spare = slice->outer;
	} else {
		slice = ml__pool_get(&ml__entered_pool);
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
	atomic_fetch_add_explicit(&task->entered_slices, 1,
	                          memory_order_relaxed);
	if (ml__unlikely(t->exact | t->own_interval | task->slow_slice))
		ml__slice_enter_slow(t, slice);
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
		ml__slice_release(t, slice);
	t->cleanup_holes = slice->holes;
	t->mask_depth = slice->mask_depth;
	if (ml__unlikely(t->exact | t->own_interval | task->slow_slice))
		ml__slice_leave_slow(t, slice);
	else
		t->top = slice->outer;
	if (t->pending)
		ml__update_pending(t);
	/* Read before the reference goes: it may be the last. */
	ml_status st = slice->lost_cleanup
	                   ? ML_ENOMEM
	                   : (ml_status)atomic_load_explicit(
	                         &task->status, memory_order_relaxed);
	ml__slice_end(slice);
	ml__pressure_check();
	return st;
}
