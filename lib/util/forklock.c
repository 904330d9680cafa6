/* The fork registry: every lock the library owns, held around fork.
 *
 * A child has only the thread that forked; a lock held by any other thread
 * at that moment stays held there for good.  So the fork handlers
 * (thread.c) take every lock of ours before fork and release them after,
 * in both processes.  Each lock registers itself where it is defined
 * (ML__LOCK / ML__POOL in util/util.h, through a constructor), so a new lock
 * cannot be left out; tests/concurrency/test-locks.sh rejects a lock made any
 * other way.  Locks are taken in rank order, then definition order: a thread
 * that nests two locks must take them in that same order. */
#include "util/util.h"

#include <pthread.h>
#include <sched.h>

#define MAX_LOCKS 128

static struct ml__lock *table[MAX_LOCKS];
static enum ml__lock_rank ranks[MAX_LOCKS];
static unsigned count;
/* Guards the table against a fork during registration.  The only lock not
 * made with ML__LOCK: the registry's own, taken first. */
static atomic_flag registry = ATOMIC_FLAG_INIT;

void ml__spin_wait(struct ml__lock *l)
{
	while (
	    atomic_flag_test_and_set_explicit(&l->flag, memory_order_acquire))
		sched_yield();
}

void ml__fork_lock_register(struct ml__lock *l, enum ml__lock_rank rank)
{
	while (
	    atomic_flag_test_and_set_explicit(&registry, memory_order_acquire))
		sched_yield();
	if (count == MAX_LOCKS) {
		atomic_flag_clear_explicit(&registry, memory_order_release);
		ml__diag(
		    "internal error: more than %d locks for the fork "
		    "registry (lib/util/forklock.c): a fork may hang the child",
		    MAX_LOCKS);
		return;
	}
	/* Stable insertion by rank. */
	unsigned i = count++;
	for (; i > 0 && ranks[i - 1] > rank; i--) {
		table[i] = table[i - 1];
		ranks[i] = ranks[i - 1];
	}
	table[i] = l;
	ranks[i] = rank;
	atomic_flag_clear_explicit(&registry, memory_order_release);
}

void ml__fork_locks_acquire(void)
{
	while (
	    atomic_flag_test_and_set_explicit(&registry, memory_order_acquire))
		sched_yield();
	for (unsigned i = 0; i < count; i++)
		ml__spin_lock(table[i]);
}

void ml__fork_locks_release(void)
{
	for (unsigned i = count; i-- > 0;)
		ml__spin_unlock(table[i]);
	atomic_flag_clear_explicit(&registry, memory_order_release);
}

void ml__atfork(void (*prepare)(void), void (*parent)(void),
                void (*child)(void), const char *lost)
{
	int rc = pthread_atfork(prepare, parent, child);
	if (rc)
		ml__diag("cannot register fork handlers (error %d): %s", rc,
		         lost);
}
