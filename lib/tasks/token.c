/* Cancellation tokens: one atomic flag in a pool slot. */
#include "tasks/tasks.h"

ML__POOL(, ml__token_pool, 64)

ML_EXPORT ml_token *ml_token_new(void)
{
	/* 64-byte slots: one token per cache line, so a token set from another
	 * thread does not bounce its neighbours' lines. */
	ml_token *t = ml__pool_get(&ml__token_pool);
	if (t)
		atomic_init(&t->set, 0);
	return t;
}

ML_EXPORT void ml_token_set(ml_token *t)
{
	/* A lock-free store: async-signal-safe, any thread. */
	if (t)
		atomic_store_explicit(&t->set, 1, memory_order_release);
}

ML_EXPORT bool ml_token_is_set(const ml_token *t)
{
	return ml__token_is_set(t);
}

ML_EXPORT void ml_token_free(ml_token *t)
{
	ml__pool_put(&ml__token_pool, t);
}
