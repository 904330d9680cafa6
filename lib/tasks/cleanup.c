/* Cleanup handlers (ml_cleanup_push/pop): the records, each thread's
 * spares, running them down to a slice's (a jump) and giving them back at
 * thread exit. */
#define _GNU_SOURCE
#include "tasks/tasks.h"

struct ml__cleanup {
	struct ml__cleanup *next;
	void (*fn)(void *);
	void *arg;
	uint32_t holes; /* failed pushes just below this record */
};

ML__POOL(, ml__cleanup_pool, sizeof(struct ml__cleanup))

/* Cleanup records: a thread keeps up to CLEANUP_CACHE spare records of
 * its own, so that a push/pop pair takes no lock (the pool's spin lock
 * cost 18 ns alone, 51 ns with a second thread doing the same); the rest
 * go back to the pool, and all of them when the thread exits. */
#define CLEANUP_CACHE 16

static struct ml__cleanup *cleanup_get(struct ml__thread *t)
{
	struct ml__cleanup *c = t->cleanup_spare;
	if (ml__likely(c != NULL)) {
		t->cleanup_spare = c->next;
		t->cleanup_nspare--;
		return c;
	}
	return ml__pool_get(&ml__cleanup_pool);
}

static void cleanup_put(struct ml__thread *t, struct ml__cleanup *c)
{
	if (t->cleanup_nspare < CLEANUP_CACHE && t->state == ML__T_LIVE) {
		c->next = t->cleanup_spare;
		t->cleanup_spare = c;
		t->cleanup_nspare++;
		return;
	}
	ml__pool_put(&ml__cleanup_pool, c);
}

void ml__cleanup_run_to(struct ml__thread *t, struct ml__cleanup *stop)
{
	while (t->cleanups && t->cleanups != stop) {
		struct ml__cleanup *c = t->cleanups;
		t->cleanups = c->next;
		c->fn(c->arg);
		cleanup_put(t, c);
	}
}

/* pthread_exit inside ml_run: the frames are gone, so the handlers
 * cannot run; only give their records back. */
void ml__cleanup_thread_exit(struct ml__thread *t)
{
	while (t->cleanups) {
		struct ml__cleanup *c = t->cleanups;
		t->cleanups = c->next;
		ml__pool_put(&ml__cleanup_pool, c);
	}
	while (t->cleanup_spare) {
		struct ml__cleanup *c = t->cleanup_spare;
		t->cleanup_spare = c->next;
		ml__pool_put(&ml__cleanup_pool, c);
	}
	t->cleanup_nspare = 0;
}

ML_EXPORT void ml_cleanup_push(void (*fn)(void *), void *arg)
{
	struct ml__thread *t = &ml__self;
	/* A NULL handler is a hole too, so that its pop stays paired. */
	struct ml__cleanup *c = fn ? cleanup_get(t) : NULL;
	if (!fn) {
		t->cleanup_holes++;
		return;
	}
	if (!c) {
		/* No memory for the record: remember a hole so that the
		 * matching pop stays paired, and make ml_run report it. */
		t->cleanup_holes++;
		if (t->top)
			t->top->lost_cleanup = true;
		ml__diag("ml_cleanup_push: no memory for a cleanup record");
		return;
	}
	*c = (struct ml__cleanup){t->cleanups, fn, arg, t->cleanup_holes};
	t->cleanups = c;
	t->cleanup_holes = 0;
}

ML_EXPORT void ml_cleanup_pop(bool execute)
{
	struct ml__thread *t = &ml__self;
	const struct ml__slice *top = t->top;
	/* Never pop what belongs to an enclosing task. */
	if (top && t->cleanups == top->cleanups &&
	    t->cleanup_holes <= top->holes)
		return;
	if (t->cleanup_holes) {
		t->cleanup_holes--;
		return;
	}
	struct ml__cleanup *c = t->cleanups;
	if (!c)
		return;
	t->cleanups = c->next;
	t->cleanup_holes = c->holes;
	void (*fn)(void *) = c->fn;
	void *arg = c->arg;
	cleanup_put(t, c);
	if (execute)
		fn(arg);
}

/* Give back what a slice owns on its thread, as at its start: the cleanup
 * records pushed and not popped (discarded, not run), the holes above
 * them, the mask depth. */
void ml__slice_release(struct ml__thread *t, const struct ml__slice *slice)
{
	struct ml__cleanup *c;
	while ((c = t->cleanups) && c != slice->cleanups) {
		t->cleanups = c->next;
		cleanup_put(t, c);
	}
	t->cleanup_holes = slice->holes;
	t->mask_depth = slice->mask_depth;
}
