/* Held memory's accounts: each task's estimate of the bytes it holds and
 * its peak, made at the first charge, shared (run mode's root tasks) or
 * batched (run mode's process account), and read by the limits and the
 * reports.  The records that charge them are held.c's; the charge itself
 * is held.h's.
 *
 * An account shared by every thread would have every thread write its
 * line at every sample and every free of a sampled block: such an
 * account is batched (ml__held_batch), each thread keeping its own change
 * to it (ml__held_own) until the change reaches the batch. */
#include "tasks/held.h"

ML__POOL(static, account_pool, sizeof(struct ml__account))
ML__TLS struct ml__held_own ml__held_own;

void ml__account_free(struct ml__account *a)
{
	ml__pool_put(&account_pool, a);
}

struct ml__account *ml__account_of(struct ml_task *task)
{
	struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	if (a)
		return a;
	struct ml__account *n = ml__pool_get(&account_pool);
	if (!n)
		return NULL;
	atomic_init(&n->held, 0);
	atomic_init(&n->peak, 0);
	atomic_init(&n->refs, 1);
	n->batch = 0;
	if (atomic_compare_exchange_strong(&task->acct, &a, n))
		return n;
	ml__pool_put(&account_pool, n); /* another thread made it first */
	return a;
}

void ml__held_thread_exit(void)
{
	ml__account_flush();
	ml__held_own.done = true;
}

uint64_t ml__held_bytes(const struct ml_task *task)
{
	const struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	if (!a)
		return 0;
	uint64_t h = atomic_load_explicit(&a->held, memory_order_relaxed);
	/* A batched account: this thread's own change too (the others' are
	 * the documented slack). */
	if (ml__held_own.acct == a)
		h += (uint64_t)ml__held_own.delta;
	return (int64_t)h < 0 ? 0 : h;
}

uint64_t ml__held_peak(const struct ml_task *task)
{
	const struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	return a ? atomic_load_explicit(&a->peak, memory_order_relaxed) : 0;
}

void ml__held_task_end(struct ml_task *task)
{
	struct ml__account *a =
	    atomic_exchange_explicit(&task->acct, NULL, memory_order_acq_rel);
	if (a)
		ml__account_unref(a);
}

bool ml__held_share(struct ml_task *to, struct ml_task *from)
{
	struct ml__account *a = ml__account_of(from);
	if (!a)
		return false;
	atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
	atomic_store_explicit(&to->acct, a, memory_order_release);
	return true;
}

bool ml__held_batch(struct ml_task *task, uint64_t batch)
{
	struct ml__account *a = ml__account_of(task);
	if (!a)
		return false;
	a->batch = batch;
	return true;
}
