/* The refusal guard (ml_set_refusal_guard, since 0.3): a function the
 * embedder registers, asked on the slow path before an interrupted task's
 * allocation is refused (deliver.c, ml__deliver()), so that regions where a
 * failed allocation is fatal (PostgreSQL's critical sections, where an
 * ERROR becomes a PANIC) let it through.
 *
 * The pair (fn, arg) is read on the slow path of any thread, inside
 * malloc: an ml__fn_pair (util.h), set under guard_lock. */
#include "tasks/tasks.h"

ML__LOCK(static, guard_lock, ML__RANK_GLOBAL)
static struct ml__fn_pair guard;

bool ml__refusal_allowed(void)
{
	void *arg;
	ml_refusal_guard_fn fn =
	    (ml_refusal_guard_fn)ml__fn_pair_get(&guard, &arg);
	return fn == NULL || fn(arg);
}

ML_EXPORT int ml_set_refusal_guard(ml_refusal_guard_fn fn, void *arg)
{
	ml__spin_lock(&guard_lock);
	ml__fn_pair_set(&guard, (ml__any_fn)fn, arg);
	ml__spin_unlock(&guard_lock);
	return ML_OK;
}
