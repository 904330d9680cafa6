/* Counts for ml_write_metrics (issue 29): task starts, interruptions by
 * reason, samples and pressure callbacks, counted where they happen, each
 * thread in its own TLS record (struct ml__thread's `metrics`), so that
 * no task start or sample writes a line that another thread writes
 * (issue 26).  Listed at thread start; a thread that exits folds its
 * counts into `exited`.  Summed only when something is written
 * (api/metrics.c, run/stats.c). */
#include "tasks/tasks.h"

#include <string.h>

/* The live list: taken at thread start and exit and by a reader, never
 * at an event.  `exited` is written with atomics (an unlisted thread
 * adds to it without the lock). */
ML__LOCK(static, lock, ML__RANK_STATS)
static struct ml__metrics *live;
static _Atomic uint64_t exited[ML__M_N];
/* This thread's record while it is listed (NULL otherwise): a trip, which
 * may come from any file of the layer, finds it here without naming
 * ml__self (thread.c), which would make the files' references a loop. */
static ML__TLS struct ml__metrics *mine;

void ml__metrics_unlisted(unsigned i, uint64_t v)
{
	atomic_fetch_add_explicit(&exited[i], v, memory_order_relaxed);
}

void ml__metrics_tripped(ml_status why)
{
	if (why < ML_ALLOC_LIMIT || why > ML_HELD_LIMIT)
		return;
	unsigned i = ML__M_INTERRUPTED + (unsigned)why - 1;
	struct ml__metrics *m = mine;
	if (m)
		ML__MBUMP(m->c[i], 1);
	else
		ml__metrics_unlisted(i, 1);
}

void ml__metrics_thread_start(struct ml__thread *t)
{
	ml__spin_lock(&lock);
	t->metrics.next = live;
	live = &t->metrics;
	ml__spin_unlock(&lock);
	mine = &t->metrics;
}

void ml__metrics_thread_exit(struct ml__thread *t)
{
	ml__spin_lock(&lock);
	for (struct ml__metrics **p = &live; *p; p = &(*p)->next)
		if (*p == &t->metrics) {
			*p = t->metrics.next;
			break;
		}
	for (unsigned i = 0; i < ML__M_N; i++) {
		atomic_fetch_add_explicit(&exited[i], t->metrics.c[i],
		                          memory_order_relaxed);
		ML__MBUMP(t->metrics.c[i], -t->metrics.c[i]);
	}
	t->metrics.next = NULL;
	mine = NULL;
	ml__spin_unlock(&lock);
}

void ml__metrics_fork_child(struct ml__thread *t)
{
	/* The lock was held across the fork (forklock.c): the list is
	 * whole, and the other threads' records are gone with them.  The
	 * child counts its own events from zero: the parent's are the
	 * parent's. */
	for (unsigned i = 0; i < ML__M_N; i++)
		atomic_store(&exited[i], 0);
	memset(t->metrics.c, 0, sizeof t->metrics.c);
	t->metrics.next = NULL;
	live = t->state == ML__T_LIVE ? &t->metrics : NULL;
	mine = live;
}

void ml__metrics_sum(uint64_t sum[ML__M_N])
{
	ml__spin_lock(&lock);
	for (unsigned i = 0; i < ML__M_N; i++)
		sum[i] = atomic_load_explicit(&exited[i], memory_order_relaxed);
	for (const struct ml__metrics *m = live; m; m = m->next)
		for (unsigned i = 0; i < ML__M_N; i++)
			sum[i] += ML__MLOAD(m->c[i]);
	ml__spin_unlock(&lock);
}
