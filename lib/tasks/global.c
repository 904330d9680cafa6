/* The global limit's choice of task (docs/statistics.md, "The global
 * limit"): when an allocation would take the heap over the limit, the
 * live global task that holds the most memory is interrupted, wherever it
 * runs and whether or not a slice of it runs now; tasks that hold little
 * go on.
 *
 * Every live global task is in one list (registered at its start, removed
 * when its record goes).  The choice, at a sample of a thread that runs a
 * global task, with usage u, the request n and the limit L:
 *  - tasks already interrupted by the global limit are expected to free
 *    what they hold: while they still hold at least the overshoot
 *    u + n - L, nobody else is chosen (no cascade while the first victim
 *    unwinds);
 *  - otherwise the task holding the most is interrupted; a task on the
 *    sampling thread wins ties (also when every task holds nothing, so
 *    that an allocation with no holder in sight stops its own task);
 *  - beyond the margin L / 8 over the limit, and each time the heap has
 *    grown by another margin since the last choice, the heap grows
 *    whatever the victims do: the largest holder not interrupted yet is
 *    chosen even while victims hold the overshoot.  A heap that waits
 *    for its victims to free does not grow: a task streaming through a
 *    small buffer meanwhile is never chosen.
 * The held estimates are those of tasks/held.c: every live global task
 * needs held tracking (registered to unregistered), so the choice has
 * them; the limit alone needs nothing more (see api_limit below). */
#include "tasks/tasks.h"

ML__LOCK(static, list_lock, ML__RANK_GLOBAL)
static struct ml_task *head;

void ml__global_register(struct ml_task *task)
{
	/* The choice reads what each global task holds: tracked while it
	 * lives, from before it runs, so that all its blocks count, also
	 * when the limit comes later. */
	ml__held_need();
	ml__spin_lock(&list_lock);
	task->gprev = NULL;
	task->gnext = head;
	if (head)
		head->gprev = task;
	head = task;
	ml__spin_unlock(&list_lock);
}

void ml__global_unregister(struct ml_task *task)
{
	ml__spin_lock(&list_lock);
	if (task->gprev)
		task->gprev->gnext = task->gnext;
	else
		head = task->gnext;
	if (task->gnext)
		task->gnext->gprev = task->gprev;
	task->gnext = task->gprev = NULL;
	ml__spin_unlock(&list_lock);
	ml__held_unneed();
}

/* How far an allocation of n bytes would take usage past the global
 * limit: 0 when it stays within (or no limit is set).  Saturates.  For
 * a realloc, n replaces the old block (t->resize_old). */
uint64_t ml__global_overshoot(uint64_t n, uint64_t *limitp)
{
	uint64_t limit =
	    atomic_load_explicit(&ml__global_limit, memory_order_relaxed);
	*limitp = limit;
	if (limit == ML_NO_LIMIT)
		return 0;
	/* A realloc's old block goes when the new one comes: the heap after
	 * it is usage - old + n (called inside the slow path only). */
	uint64_t usage = ml__meter_usage(), old = ml__self.resize_old;
	usage = usage > old ? usage - old : 0;
	if (usage <= limit)
		return n > limit - usage ? n - (limit - usage) : 0;
	uint64_t over = usage - limit;
	return over + n < over ? UINT64_MAX : over + n;
}

static ml_status status_of(struct ml_task *task)
{
	return (ml_status)atomic_load_explicit(&task->status,
	                                       memory_order_relaxed);
}

/* Usage when the last victim was chosen (under list_lock). */
static uint64_t chosen_at;

void ml__global_choose(struct ml__thread *t, uint64_t n)
{
	/* The sampling thread's own best candidate first: it wins ties. */
	struct ml_task *best = NULL;
	uint64_t best_held = 0;
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		struct ml_task *task = k->task;
		if (!task->global || status_of(task) != ML_OK)
			continue;
		uint64_t h = ml__held_bytes(task);
		if (!best || h > best_held) {
			best = task;
			best_held = h;
		}
	}
	uint64_t unwinding = 0, limit;
	ml__spin_lock(&list_lock);
	for (struct ml_task *task = head; task; task = task->gnext) {
		ml_status st = status_of(task);
		uint64_t h = ml__held_bytes(task);
		if (st == ML_GLOBAL_LIMIT)
			unwinding += h;
		else if (st == ML_OK && (!best || h > best_held)) {
			best = task;
			best_held = h;
		}
	}
	/* Still over, now that no task can come or go: a task is chosen
	 * only while the limit it is chosen for holds.  Read after the held
	 * estimates: a victim frees its blocks (its held estimate falls)
	 * before the meter counts them freed, never after (alloc/meter.c),
	 * so a usage read first could be that of a heap the victim has
	 * emptied since, with nobody left holding the overshoot: a bystander
	 * would be chosen (seen under load, 1 run in 6 over mimalloc). */
	uint64_t over = ml__global_overshoot(n, &limit);
	/* Past the margin the heap grows whatever the victims do (slow to
	 * free, or memory held outside tasks): another victim each time it
	 * has grown by a margin since the last choice.  A heap only waiting
	 * for its victims to free does not grow: nobody more is chosen. */
	uint64_t margin = limit / 8, usage = limit + (over - n);
	bool grown =
	    over > n && over - n > margin && usage - margin >= chosen_at;
	if (best && over && (unwinding < over || grown)) {
		ml__task_trip(best, ML_GLOBAL_LIMIT);
		chosen_at = usage;
	}
	/* A limit of 0 is always exceeded, whatever anyone frees: every
	 * global task on the sampling thread stops too. */
	if (limit == 0)
		for (struct ml__slice *k = t->top; k; k = k->outer)
			if (k->task->global)
				ml__task_trip(k->task, ML_GLOBAL_LIMIT);
	ml__spin_unlock(&list_lock);
}

/* ---- Pressure ------------------------------------------------------------
 *
 * The user's function is called once per upward crossing of fraction x the
 * global limit (detected by the meter at a fold, alloc/meter.c), at the
 * next safe point of any thread: the end of an ml_run or a slice,
 * ml_check, ml_is_interrupted (ml_unmask delivers interruptions but
 * does not call it).  Never inside an
 * allocation, so it may allocate and call any ml_ function. */
static ml_pressure_fn _Atomic pressure_fn;
static void *_Atomic pressure_arg;
static _Atomic uint64_t pressure_ppm; /* fraction in millionths */

/* The threshold for the current limit and fraction (0: none). */
static void pressure_threshold(uint64_t limit)
{
	uint64_t ppm = atomic_load(&pressure_ppm), th = 0;
	if (ppm && limit != ML_NO_LIMIT) {
		th = (uint64_t)((unsigned __int128)limit * ppm / 1000000);
		th = th ? th : 1; /* 0 means "no callback" */
	}
	atomic_store(&ml__pressure_bytes, th);
	ml__pressure_rearm();
}

void ml__pressure_poll(void)
{
	if (!atomic_exchange_explicit(&ml__pressure_pending, false,
	                              memory_order_acquire))
		return;
	ml_pressure_fn fn = atomic_load(&pressure_fn);
	if (fn) {
		ml__metrics_add(&ml__self, ML__M_PRESSURE, 1);
		fn(ml__meter_usage(), atomic_load(&ml__global_limit),
		   atomic_load(&pressure_arg));
	}
}

ML_EXPORT int ml_set_pressure_callback(double fraction, ml_pressure_fn fn,
                                       void *arg)
{
	if (fn && !(fraction > 0 && fraction <= 1))
		return ML_EINVAL;
	ml__spin_lock(&list_lock);
	atomic_store(&pressure_fn, fn);
	atomic_store(&pressure_arg, arg);
	atomic_store(&pressure_ppm,
	             fn ? (uint64_t)(fraction * 1e6 + 0.5) : (uint64_t)0);
	pressure_threshold(atomic_load(&ml__global_limit));
	ml__spin_unlock(&list_lock);
	return ML_OK;
}

void ml__global_limit_set(uint64_t bytes)
{
	/* Under the list's lock: a choice in progress sees the limit it
	 * started with until it has chosen. */
	ml__spin_lock(&list_lock);
	ml__meter_set_limit(bytes);
	pressure_threshold(bytes);
	chosen_at = 0; /* a new limit: a new episode */
	ml__spin_unlock(&list_lock);
}

/* The API's limit (not run mode's heap limit) is set: a program's tasks
 * may read what they hold from then on (ml_set_global_limit(3)).  They
 * need tracking only where they sample, and a block is recorded only at a
 * sample: so the limit needs it from the first sample of a program's task
 * under it (limit_needs, under list_lock) until it is removed, and a
 * process with a limit and no task pays the meter alone (issue 26). */
_Atomic bool ml__api_limit;
static bool limit_needs;

bool ml__global_held_need(struct ml__thread *t)
{
	if (t->top && !t->top->task->internal) {
		ml__spin_lock(&list_lock);
		if (!limit_needs && atomic_load(&ml__api_limit)) {
			limit_needs = true;
			ml__held_need();
		}
		ml__spin_unlock(&list_lock);
	}
	return ML__HELD_ON;
}

ML_EXPORT int ml_set_global_limit(uint64_t bytes)
{
	ml__global_limit_set(bytes);
	ml__spin_lock(&list_lock);
	atomic_store(&ml__api_limit, bytes != ML_NO_LIMIT);
	bool drop = limit_needs && bytes == ML_NO_LIMIT;
	limit_needs &= !drop;
	if (drop)
		ml__held_unneed();
	ml__spin_unlock(&list_lock);
	return 0;
}

ML_EXPORT uint64_t ml_global_limit(void)
{
	return atomic_load(&ml__global_limit);
}

/* The 0.1 names, kept as aliases: ml_global_memory_limit read too much like
 * the task runner ml_limit_global_memory. */
ML_EXPORT int ml_set_global_memory_limit(uint64_t bytes)
    __attribute__((alias("ml_set_global_limit")));
ML_EXPORT uint64_t ml_global_memory_limit(void)
    __attribute__((alias("ml_global_limit")));

/* ---- Issue 27: for shared budgets (lib/shared) ------------------------- */

void ml__global_visit(void (*fn)(struct ml_task *task, void *arg), void *arg)
{
	ml__spin_lock(&list_lock);
	for (struct ml_task *task = head; task; task = task->gnext)
		fn(task, arg);
	ml__spin_unlock(&list_lock);
}

/* Issue 35: the same from a signal handler, which must not wait on a lock
 * its own thread may hold: false, and nothing visited, when taken. */
bool ml__global_try_visit(void (*fn)(struct ml_task *task, void *arg),
                          void *arg)
{
	if (!ml__spin_trylock(&list_lock))
		return false;
	for (struct ml_task *task = head; task; task = task->gnext)
		fn(task, arg);
	ml__spin_unlock(&list_lock);
	return true;
}

ml_pressure_fn ml__pressure_get(uint64_t *ppm, void **arg)
{
	*ppm = atomic_load(&pressure_ppm);
	*arg = atomic_load(&pressure_arg);
	return atomic_load(&pressure_fn);
}
