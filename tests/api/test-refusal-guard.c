/* ml_set_refusal_guard (since 0.3): asked before an interrupted FAIL
 * task's allocation is refused; false lets that one allocation through,
 * the task stays interrupted and the refusals resume after the region;
 * asked only for refusals (not for allocations let through anyway: no
 * task, a task not interrupted, a masked thread); NULL removes it. */
#include <memlimits.h>
#include <stdlib.h>

#include "../tap/tap.h"

#define BLOCK (64 << 10)
#define MAX_BLOCKS 4096

static void *blocks[MAX_BLOCKS];
static int nblocks;
static void *volatile sink;

static _Atomic int calls;
static _Atomic bool in_region;
static void *seen_arg;

static bool guard(void *arg)
{
	calls++;
	seen_arg = arg;
	return !in_region; /* no allocation here */
}

static void free_all(void)
{
	while (nblocks > 0)
		free(blocks[--nblocks]);
}

/* Allocate blocks until one is refused (or MAX_BLOCKS): how many came. */
static int fill(void)
{
	while (nblocks < MAX_BLOCKS) {
		void *p = malloc(BLOCK);
		if (!p)
			return nblocks;
		blocks[nblocks++] = p;
	}
	return nblocks;
}

static ml_task *fail_task(uint64_t alloc_bytes, uint64_t held_bytes, bool exact)
{
	ml_limits l = ML_LIMITS_INIT;
	l.delivery = ML_DELIVER_FAIL;
	l.alloc_bytes = alloc_bytes;
	l.held_bytes = held_bytes;
	l.exact_alloc = exact;
	return ml_task_new(&l);
}

/* Over its limit: refused; in the region: let through (each asked);
 * after the region: refused again. */
static void *region_body(void *arg)
{
	int got = fill();
	tap_ok(got < MAX_BLOCKS, "the FAIL task is refused after %d blocks",
	       got);
	tap_is(calls, 1, "the guard was asked once: for the refusal only");
	tap_ok(seen_arg == arg, "the guard gets its arg");
	in_region = true;
	int through = 0;
	for (int i = 0; i < 20; i++) {
		void *p = malloc(BLOCK);
		if (p && nblocks < MAX_BLOCKS)
			blocks[nblocks++] = p, through++;
		else
			free(p);
	}
	tap_is(through, 20, "inside the region all 20 allocations go through");
	tap_is(calls, 21, "the guard was asked for each of them");
	tap_is(ml_task_status(ml_task_current()), ML_ALLOC_LIMIT,
	       "the task stays interrupted");
	in_region = false;
	sink = malloc(BLOCK);
	tap_ok(sink == NULL, "after the region the next allocation is refused");
	tap_is(calls, 22, "and the guard was asked for it");
	void *q = calloc(1, BLOCK);
	tap_ok(q == NULL, "calloc too");
	free(q);
	return NULL;
}

static void exact_region(void)
{
	tap_is(ml_set_refusal_guard(guard, &calls), ML_OK, "set: ML_OK");
	ml_task *t = fail_task(4 << 20, ML_NO_LIMIT, true);
	tap_ok(t != NULL, "a FAIL task with an exact 4 MiB allocation limit");
	ml_status st = ml_task_run(t, region_body, &calls, NULL);
	tap_is(st, ML_ALLOC_LIMIT, "the slice ends ML_ALLOC_LIMIT");
	free_all();
	ml_task_free(t);
}

/* The held limit's refusals come from a sample's verdict: the same. */
static void *held_body(void *arg)
{
	int got = fill();
	tap_ok(got < MAX_BLOCKS,
	       "the held-limit FAIL task is refused after %d "
	       "blocks",
	       got);
	int asked = calls;
	tap_ok(asked >= 1, "the guard was asked (%d)", asked);
	in_region = true;
	void *p = malloc(BLOCK);
	tap_ok(p != NULL, "inside the region it goes through");
	free(p);
	in_region = false;
	sink = malloc(BLOCK);
	tap_ok(sink == NULL, "after it, refused again");
	return NULL;
}

static void held_region(void)
{
	ml_set_sample_interval(8192);
	ml_set_refusal_guard(guard, NULL);
	ml_task *t = fail_task(ML_NO_LIMIT, 2 << 20, false);
	ml_status st = ml_task_run(t, held_body, NULL, NULL);
	tap_is(st, ML_HELD_LIMIT, "the slice ends ML_HELD_LIMIT");
	free_all();
	ml_task_free(t);
}

/* Nothing refused: never asked. */
static void *unlimited_body(void *arg)
{
	for (int i = 0; i < 2000; i++)
		free(malloc(BLOCK));
	return NULL;
}

static void only_refusals(void)
{
	ml_set_sample_interval(4096);
	ml_set_refusal_guard(guard, NULL);
	for (int i = 0; i < 2000; i++)
		free(malloc(BLOCK));
	tap_is(calls, 0, "outside any task: never asked");
	ml_task *t = fail_task(ML_NO_LIMIT, ML_NO_LIMIT, false);
	tap_is(ml_task_run(t, unlimited_body, NULL, NULL), ML_OK,
	       "a task under no limit runs");
	tap_is(calls, 0, "a task that is not interrupted: never asked");
	ml_task_free(t);
}

static void *masked_body(void *arg)
{
	fill();
	int asked = calls;
	ml_mask();
	sink = malloc(BLOCK);
	tap_ok(sink != NULL, "masked: the allocation goes through");
	free(sink);
	tap_is(calls, asked, "and the guard is not asked");
	ml_unmask();
	return NULL;
}

static void masked(void)
{
	ml_set_refusal_guard(guard, NULL);
	ml_task *t = fail_task(1 << 20, ML_NO_LIMIT, true);
	ml_task_run(t, masked_body, NULL, NULL);
	free_all();
	ml_task_free(t);
}

static void *removed_body(void *arg)
{
	in_region = true; /* would let everything through */
	int got = fill();
	tap_ok(got < MAX_BLOCKS,
	       "without a guard the task is refused (%d "
	       "blocks)",
	       got);
	tap_is(calls, 0, "the removed guard is not asked");
	return NULL;
}

static void removed(void)
{
	ml_set_refusal_guard(guard, NULL);
	tap_is(ml_set_refusal_guard(NULL, &calls), ML_OK,
	       "fn NULL removes it: ML_OK");
	ml_task *t = fail_task(1 << 20, ML_NO_LIMIT, true);
	tap_is(ml_task_run(t, removed_body, NULL, NULL), ML_ALLOC_LIMIT,
	       "the slice ends ML_ALLOC_LIMIT");
	free_all();
	ml_task_free(t);
}

int main(void)
{
	if (!(ml_capabilities() & ML_CAP_INTERPOSED)) {
		tap_skip(1, "the library's malloc is not the process's");
		return tap_done();
	}
	tap_case("exact_region", exact_region, 60);
	tap_case("held_region", held_region, 60);
	tap_case("only_refusals", only_refusals, 60);
	tap_case("masked", masked, 60);
	tap_case("removed", removed, 60);
	return tap_done();
}
