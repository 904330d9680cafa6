/* What the held-memory files (held.c, account.c, tracking.c) share and
 * nothing else sees: the account and its charge, static inline here
 * because a sampled free runs them (a call into account.c would cost
 * that free the inlining it had when the three were one file), and the
 * records' two entries for tracking.c. */
#ifndef ML_TASKS_HELD_H
#define ML_TASKS_HELD_H

#include "tasks/tasks.h"

#pragma GCC visibility push(hidden)

/* Distinct accounts a record charges, the innermost task first. */
#define ML__HELD_TASKS 4

struct ml__account {
	_Atomic uint64_t held; /* bytes: the weights of its live records */
	_Atomic uint64_t peak;
	/* The task's own reference (until it ends) plus one per record;
	 * a batched account is never freed and counts no records. */
	_Atomic uint32_t refs;
	/* 0, or the change a thread keeps to itself (bytes, either way)
	 * before adding it to `held`. */
	uint64_t batch;
};

/* This thread's change to one batched account (account.c); `done` once
 * the thread has flushed at its exit (what it adds after that goes
 * straight in). */
struct ml__held_own {
	struct ml__account *acct;
	int64_t delta;
	bool done;
};
extern ML__TLS struct ml__held_own ml__held_own;

/* The task's account, made at its first charge; NULL when no memory. */
struct ml__account *ml__account_of(struct ml_task *task);
/* The account's slot goes back to its pool (its last reference went). */
void ml__account_free(struct ml__account *a);

/* One reference fewer; the last one frees the account.  Inline: a
 * sampled free drops one per account of its record. */
static inline void ml__account_unref(struct ml__account *a)
{
	if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
		ml__account_free(a);
}

/* The free hook (alloc/alloc.h) while tracking runs: p's bucket is
 * marked (held.c). */
void ml__held_free(void *p);
/* Under no lock: if tracking is off and no record is left, the filter
 * goes off (held.c; the reasoning is tracking.c's). */
void ml__held_drain_check(void);

/* w bytes more (or, modulo 2^64, fewer) in a's estimate, now. */
static inline __attribute__((always_inline)) void
ml__account_add(struct ml__account *a, uint64_t w)
{
	uint64_t h =
	    atomic_fetch_add_explicit(&a->held, w, memory_order_relaxed) + w;
	if ((int64_t)w <= 0)
		return;
	uint64_t pk = atomic_load_explicit(&a->peak, memory_order_relaxed);
	while (h > pk && !atomic_compare_exchange_weak_explicit(
	                     &a->peak, &pk, h, memory_order_relaxed,
	                     memory_order_relaxed))
		;
}

/* The thread's change goes into its account. */
static inline void ml__account_flush(void)
{
	if (ml__held_own.acct && ml__held_own.delta)
		ml__account_add(ml__held_own.acct,
		                (uint64_t)ml__held_own.delta);
	ml__held_own.acct = NULL;
	ml__held_own.delta = 0;
}

/* w bytes more (or, modulo 2^64, fewer) held in a: into the thread's own
 * change for a batched account. */
static inline __attribute__((always_inline)) void
ml__account_charge(struct ml__account *a, uint64_t w)
{
	if (!a->batch || ml__held_own.done) {
		ml__account_add(a, w);
		return;
	}
	if (ml__held_own.acct != a) {
		ml__account_flush();
		ml__held_own.acct = a;
	}
	ml__held_own.delta += (int64_t)w;
	if ((uint64_t)(ml__held_own.delta < 0 ? -ml__held_own.delta
	                                      : ml__held_own.delta) >= a->batch)
		ml__account_flush();
}

#pragma GCC visibility pop

#endif
