/* Exact allocation budgets (ml_limits.exact_alloc; docs/statistics.md,
 * "Exact budgets").
 *
 * A task's budget L is shared by its slices: each slice holds a
 * reservation taken from the task's remaining budget, and the thread's
 * countdown runs to the nearer of the next sample and the end of the
 * smallest reservation on its stack (the clip), so the fast path is
 * unchanged: it sees the end of a reservation as it sees a sample.  The
 * thread remembers what it set the countdown to (armed) and what the clip
 * hid of the sampler's gap (cut); the bytes the fast path allocated since
 * are armed minus the countdown, charged to every exact slice on the stack
 * at the next slow path or change of the stack.
 *
 * An allocation of n bytes is let through while the task's bytes so far
 * plus n stay below L; the allocation that would reach L interrupts the
 * task (ML_ALLOC_LIMIT) and is refused as any interrupted allocation is.
 * The clip is therefore the reservation itself: the fast path lets n
 * through while n < countdown (interpose.c), i.e. n < reservation, and an
 * empty reservation (countdown 0) sends even malloc(0) here, so that a
 * budget of 0 stops the task at its first allocation of any size.
 * A slice refills its reservation from the task when an allocation does
 * not fit: at least the allocation, else max(L / 64, 4 KiB), never more
 * than is left.  Slices on other threads may hold what one slice needs:
 * the task can then be interrupted early by at most their reservations,
 * (threads - 1) x max(L / 64, 4 KiB) in all, 1.6 % of L on two threads;
 * a slice gives back what it did not use when it ends. */
#include "tasks/tasks.h"

#define MIN_CHUNK 4096

/* Is k the first slice of its task from the top?  (A task nested in
 * itself is charged once.) */
static bool first_of_task(const struct ml__thread *t, const struct ml__slice *k)
{
	for (const struct ml__slice *p = t->top; p != k; p = p->outer)
		if (p->task == k->task)
			return false;
	return true;
}

static uint64_t chunk_of(const struct ml_task *task)
{
	uint64_t c = task->alloc_limit / 64;
	return c > MIN_CHUNK ? c : MIN_CHUNK;
}

/* Take up to `want` (at least `need`) bytes from the task's remaining
 * budget: what was taken, 0 when even `need` is not left. */
static uint64_t take(struct ml_task *task, uint64_t need, uint64_t want)
{
	uint64_t left =
	    atomic_load_explicit(&task->exact_left, memory_order_relaxed);
	for (;;) {
		if (left < need)
			return 0;
		uint64_t got = left < want ? left : want;
		if (atomic_compare_exchange_weak_explicit(
		        &task->exact_left, &left, left - got,
		        memory_order_relaxed, memory_order_relaxed))
			return got;
	}
}

/* Bytes the thread allocated: each exact slice's reservation pays. */
static void charge(struct ml__thread *t, uint64_t bytes)
{
	if (!bytes)
		return;
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		struct ml_task *task = k->task;
		if (!task->exact || !first_of_task(t, k))
			continue;
		atomic_fetch_add_explicit(&task->exact_used, bytes,
		                          memory_order_relaxed);
		/* More than reserved only after an interruption let
		 * through (FLAG delivery): the budget is spent. */
		if (bytes <= k->res) {
			k->res -= bytes;
		} else {
			take(task, 0, bytes - k->res);
			k->res = 0;
		}
	}
}

static uint64_t *current(struct ml__thread *t)
{
	return t->forced ? &t->saved : &ml__countdown;
}

void ml__exact_settle(struct ml__thread *t)
{
	if (!t->exact)
		return;
	uint64_t *cur = current(t);
	uint64_t spent = t->armed - *cur;
	t->armed = *cur;
	charge(t, spent);
}

void ml__exact_spent(struct ml__thread *t, uint64_t bytes)
{
	charge(t, bytes);
}

void ml__exact_clip(struct ml__thread *t)
{
	uint64_t *cur = current(t);
	uint64_t gap = *cur + t->cut, m = UINT64_MAX;
	bool any = false;
	for (const struct ml__slice *k = t->top; k; k = k->outer)
		if (k->task->exact) {
			any = true;
			if (k->res < m)
				m = k->res;
		}
	/* The fast path lets n through while n < countdown, and a slice's n
	 * must stay below its reservation (ml__exact_check): the same test. */
	uint64_t v = gap < m ? gap : m;
	t->cut = gap - v;
	*cur = v;
	t->armed = v;
	t->exact = any;
}

bool ml__exact_check(struct ml__thread *t, uint64_t n)
{
	bool tripped = false;
	for (struct ml__slice *k = t->top; k; k = k->outer) {
		struct ml_task *task = k->task;
		if (!task->exact || !first_of_task(t, k) || n < k->res)
			continue;
		/* Interrupted already, on another thread perhaps: this
		 * slice must see it now, not let n through unpaid. */
		if (atomic_load_explicit(&task->status, memory_order_relaxed) !=
		    ML_OK) {
			tripped = true;
			continue;
		}
		/* Not within the reservation: the allocation is let through
		 * only while the task's bytes stay below L (one byte more
		 * than n must be left). */
		uint64_t need = n - k->res + 1;
		uint64_t chunk = chunk_of(task);
		uint64_t got = take(task, need, need > chunk ? need : chunk);
		if (got)
			k->res += got;
		else {
			ml__task_trip_here(task, ML_ALLOC_LIMIT);
			tripped = true;
		}
	}
	return tripped;
}

void ml__exact_release(struct ml__slice *k)
{
	if (k->res) {
		atomic_fetch_add_explicit(&k->task->exact_left, k->res,
		                          memory_order_relaxed);
		k->res = 0;
	}
}
