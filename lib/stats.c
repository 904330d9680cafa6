/* Run-mode sampling statistics: placeholder hooks, filled in by issue 5. */
#include "internal.h"

void ml__stats_alloc(struct ml__thread *t, uint64_t n, uint64_t s)
{
	(void)t, (void)n, (void)s;
}

void ml__stats_thread_exit(struct ml__thread *t)
{
	t->stats = NULL;
}

void ml__stats_write(void)
{
}
