/* ml_task_describe: why and where a task was interrupted, in one line for
 * a server's error log: the reason, the limit, the estimates at the
 * interruption, and the innermost frames of the allocation that made it
 * (when it was one of the task's own: a task chosen by the global limit
 * on another thread's allocation has none). */
#define _GNU_SOURCE
#include "run/run.h"

#include <errno.h>
#include <string.h>

#define LINE_BYTES 2048
#define WHERE_FRAMES 8 /* innermost frames named */

static void put_estimates(struct ml__out *o, uint64_t allocated, uint64_t held)
{
	ml__out_puts(o, "allocated ~");
	ml__out_human(o, allocated);
	ml__out_puts(o, ", held ~");
	ml__out_human(o, held);
}

static void describe(struct ml__out *o, const struct ml_task *task,
                     ml_status st)
{
	if (st == ML_OK) {
		ml__out_puts(o, "not interrupted: ");
		put_estimates(o, ml_task_allocated(task), ml_task_held(task));
		return;
	}
	ml__out_puts(o, ml_status_str(st));
	ml__out_puts(o, ": ");
	uint64_t limit = ML_NO_LIMIT;
	if (st == ML_ALLOC_LIMIT)
		limit = task->alloc_limit;
	else if (st == ML_HELD_LIMIT)
		limit = task->held_limit;
	else if (st == ML_GLOBAL_LIMIT)
		limit =
		    task->shared_trip ? ml__shared_limit() : ml_global_limit();
	if (limit != ML_NO_LIMIT) {
		ml__out_puts(o, st != ML_GLOBAL_LIMIT ? "limit "
		                : task->shared_trip   ? "shared budget "
		                                      : "global limit ");
		ml__out_human(o, limit);
		ml__out_puts(o, ", ");
	}
	/* The thread that set the status may not have written the
	 * estimates of the moment yet: the current ones then. */
	if (atomic_load_explicit(&task->trip_ready, memory_order_acquire))
		put_estimates(o, task->trip_allocated, task->trip_held);
	else
		put_estimates(o, ml_task_allocated(task), ml_task_held(task));
	const struct ml__stack *where = ml__stack_get(
	    atomic_load_explicit(&task->trip_stack, memory_order_relaxed));
	uint32_t depth = where ? where->depth & ~ML__STACK_TRUNCATED : 0;
	if (!depth) {
		if (st == ML_GLOBAL_LIMIT)
			ml__out_puts(o, task->shared_trip
			                    ? ", chosen as the largest holder "
			                      "of the shared budget's processes"
			                    : ", chosen as the largest holder");
		return;
	}
	ml__out_puts(o, ", at ");
	struct ml__symbols *sy = ml__symbols_open(true);
	for (uint32_t i = 0; i < depth && i < WHERE_FRAMES; i++) {
		if (i)
			ml__out_puts(o, " < ");
		if (sy || ml__frame_named(where->ip[i]))
			ml__put_frame(o, sy, where->ip[i]);
		else /* no memory for symbols */
			ml__out_x(o, where->ip[i]);
	}
	if (depth > WHERE_FRAMES)
		ml__out_puts(o, " < ...");
	ml__symbols_close(sy);
}

ML_EXPORT int ml_task_describe(const ml_task *task, char *buf, size_t len)
{
	if (!ml__task_valid(task) || (!buf && len)) {
		errno = EINVAL;
		return ML_EINVAL;
	}
	char line[LINE_BYTES] = "";
	struct ml__out o = {.buf = line, .cap = sizeof line - 1, .fd = -1};
	/* Symbols may allocate (the demangler): on our own behalf. */
	struct ml__thread *t = &ml__self;
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__force_slow(t);
	describe(&o, task, ml_task_status(task));
	t->busy = busy;
	ml__unforce(t);
	if (len) {
		size_t n = o.len < len - 1 ? o.len : len - 1;
		memcpy(buf, line, n);
		buf[n] = 0;
	}
	return (int)o.len;
}
