/* The refusal guard (ml_set_refusal_guard, since 0.3): a function the
 * embedder registers, asked on the slow path before an interrupted task's
 * allocation is refused (deliver.c, ml__deliver()), so that regions where a
 * failed allocation is fatal (PostgreSQL's critical sections, where an
 * ERROR becomes a PANIC) let it through.
 *
 * The pair (fn, arg) is read on the slow path of any thread, inside
 * malloc: no lock there.  A sequence count makes the pair consistent: the
 * setter (under guard_lock, which the fork handlers hold, so a child never
 * inherits an odd count) makes it odd, stores both, makes it even; a
 * reader retries until it read both under one even count. */
#include "tasks/tasks.h"

ML__LOCK(static, guard_lock, ML__RANK_GLOBAL)
static _Atomic uint64_t guard_seq;
static ml_refusal_guard_fn _Atomic guard_fn;
static void *_Atomic guard_arg;

bool ml__refusal_allowed(void)
{
	ml_refusal_guard_fn fn;
	void *arg;
	uint64_t s;
	for (;;) {
		s = atomic_load_explicit(&guard_seq, memory_order_acquire);
		if (s & 1)
			continue; /* a setter is between its two stores */
		fn = atomic_load_explicit(&guard_fn, memory_order_relaxed);
		arg = atomic_load_explicit(&guard_arg, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&guard_seq, memory_order_relaxed) == s)
			break;
	}
	return fn == NULL || fn(arg);
}

ML_EXPORT int ml_set_refusal_guard(ml_refusal_guard_fn fn, void *arg)
{
	ml__spin_lock(&guard_lock);
	uint64_t s = atomic_load_explicit(&guard_seq, memory_order_relaxed);
	atomic_store_explicit(&guard_seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&guard_fn, fn, memory_order_relaxed);
	atomic_store_explicit(&guard_arg, fn ? arg : NULL,
	                      memory_order_relaxed);
	atomic_store_explicit(&guard_seq, s + 2, memory_order_release);
	ml__spin_unlock(&guard_lock);
	return ML_OK;
}
