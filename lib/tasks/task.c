/* Tasks: the records of tasks (struct ml_task, shared by all the task's
 * slices), their creation from limits, and the runners that run them as
 * slices of this thread (ml_run and its ml_limit_* wrappers, ml_task_run)
 * with the public task API.  Entered slices (ml_task_enter/leave) are
 * entered.c's, slices slice.c's, crediting credit.c's, delivery
 * deliver.c's, cleanup handlers cleanup.c's. */
#define _GNU_SOURCE
#include "tasks/tasks.h"

#include <errno.h>
#include <pthread.h>

/* Kept out of line so that every local the runner reads after the jump
 * lives in the slice record (memory), never in a register setjmp did not
 * save. */
static __attribute__((noinline)) void *call(struct ml__slice *slice,
                                            void *(*fn)(void *), void *arg)
{
	(void)slice;
	return fn(arg);
}

/* fn returned: unbalanced pushes or masks inside it end with it.  The
 * common case (balanced) costs a comparison and two stores. */
static inline __attribute__((always_inline)) void
slice_returned(struct ml__thread *t, struct ml__slice *slice)
{
	/* fn entered a task and returned without leaving it. */
	if (ml__unlikely(t->top != slice))
		ml__entered_abandon(t, slice);
	if (ml__unlikely(t->cleanups != slice->cleanups))
		ml__slice_release(t, slice);
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
			ml__slice_enter_slow((t), (slice));                   \
		else                                                          \
			(t)->top = (slice);                                   \
		/* pthread_exit, cancellation or a C++ exception inside fn    \
		 * unwinds this frame without returning (the library is built \
		 * with -fexceptions): end the slice before its record goes   \
		 * (TLS destructors run, and allocate, before our thread-exit \
		 * hook). */                                                  \
		pthread_cleanup_push(ml__slice_unwound, (slice));             \
		if (sigsetjmp((slice)->jb, 0) == 0) {                         \
			(ret) = call((slice), (fn), (arg));                   \
			slice_returned((t), (slice));                         \
		} else {                                                      \
			(ret) = NULL;                                         \
		}                                                             \
		pthread_cleanup_pop(0);                                       \
		if (ml__unlikely((t)->exact | (t)->own_interval |             \
		                 (slice)->task->slow_slice))                  \
			ml__slice_leave_slow((t), (slice));                   \
		else                                                          \
			(t)->top = (slice)->outer;                            \
		/* Taking a slice off the stack can only end a pending state. \
		 */                                                           \
		if ((t)->pending)                                             \
			ml__update_pending(t);                                \
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
	atomic_init(&task->entered_slices, 0);
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
	if (ml__unlikely(ml__held_limited(task.held_limit)))
		ml__held_need(); /* until slice_end */
	slice.task = &task;
	slice.owner = true;
	slice.entered = false;
	if (task.global)
		ml__global_register(&task);
	RUN_SLICE(t, &slice, fn, arg, ret);
	ml__wait_for_other_slices(&task);
	ml_status status = finish(&slice, &task, ret, out);
	if (task.global || ml__held_limited(task.held_limit) ||
	    atomic_load_explicit(&task.acct, memory_order_relaxed))
		ml__slice_end(&slice);
	ml__pressure_check();
	return status;
}
ML__SYMVER_DEFAULT(ml__run_0_2, ml_run, "MEMLIMITS_0.2");

ML_EXPORT ml_task *ml_task_new(const ml_limits *limits)
{
	if (!limits_valid(limits)) {
		errno = EINVAL;
		return NULL;
	}
	struct ml_task *task = ml__pool_get(&ml__task_pool);
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
	ml__task_unref(task);
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
	if (ml__task_poll(task) != ML_OK)
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
		ml__task_unref(task);
	ml__pressure_check();
	return status;
}

ML_EXPORT ml_status ml_task_status(const ml_task *task)
{
	if (!ml__task_valid(task))
		return ML_EINVAL;
	return ml__task_poll((struct ml_task *)task);
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
