/* ml_task_enter: a thread that never allocated is started first, as its
 * first allocation would start it (the slow path, tasks/slow.c), so that
 * its exit reclaims the slices it leaves entered (the thread key is set
 * there).  Here, above the tasks layer: tasks/task.c, where ml__task_enter
 * was when this was written, may not call slow.c (the files' references
 * form no loop); it is tasks/entered.c's now. */
#include "api/api.h"

static ML__COLD void thread_start(struct ml__thread *t)
{
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__force_slow(t);
	ml__thread_init(t);
	ml__thread_refresh(t);
	t->busy = busy;
	ml__unforce(t);
}

ML_EXPORT int ml_task_enter(ml_task *task)
{
	struct ml__thread *t = &ml__self;
	if (ml__unlikely(t->state == ML__T_NEW))
		thread_start(t);
	return ml__task_enter(task);
}
