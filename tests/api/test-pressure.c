/* ml_set_pressure_callback: called once per upward crossing of a fraction
 * of the global limit, at a safe point, never inside an allocation (it
 * allocates here), damped near the line, and never without a limit. */
#include <memlimits.h>
#include <stdlib.h>

#include "../tap/tap.h"

#define BLOCK (1 << 20)
#define MAX_BLOCKS 512
static void *blocks[MAX_BLOCKS];
static int nblocks;
static int calls;
static uint64_t seen_usage, seen_limit;
static void *seen_arg;

static void on_pressure(uint64_t usage, uint64_t limit, void *arg)
{
	calls++;
	seen_usage = usage;
	seen_limit = limit;
	seen_arg = arg;
	free(malloc(4096)); /* it may allocate */
}

static void *nothing(void *arg)
{
	return arg;
}

static void grow_to(uint64_t bytes)
{
	while (ml_global_memory_usage() < bytes && nblocks < MAX_BLOCKS)
		blocks[nblocks++] = malloc(BLOCK);
}

static void shrink_to(uint64_t bytes)
{
	while (ml_global_memory_usage() > bytes && nblocks > 0)
		free(blocks[--nblocks]);
}

int main(void)
{
	int tag;
	if (tap_under_valgrind()) {
		/* valgrind's allocator has no mallinfo2: the meter starts
		 * from 0 and the blocks freed since read as negative, so the
		 * absolute heap level this test crosses is not reached. */
		tap_skip(1, "under valgrind (see the comment)");
		return tap_done();
	}
	tap_is(ml_set_pressure_callback(0, on_pressure, NULL), ML_EINVAL,
	       "fraction 0: ML_EINVAL");
	tap_is(ml_set_pressure_callback(1.5, on_pressure, NULL), ML_EINVAL,
	       "fraction 1.5: ML_EINVAL");
	tap_is(ml_set_pressure_callback(0.5, on_pressure, &tag), ML_OK,
	       "fraction 0.5: ML_OK");

	/* No global limit: never called. */
	grow_to(ml_global_memory_usage() + (64 << 20));
	ml_check();
	tap_is(calls, 0, "no global limit: not called");
	shrink_to(0);

	uint64_t base = ml_global_memory_usage();
	uint64_t limit = base + (256 << 20), line = limit / 2;
	ml_set_global_limit(limit);
	grow_to(line - (8 << 20));
	ml_check();
	tap_is(calls, 0, "below the line: not called");
	grow_to(line + (8 << 20));
	tap_is(calls, 0, "crossed, but no safe point yet: not called");
	ml_check();
	tap_is(calls, 1, "crossed: called once, at ml_check");
	tap_ok(seen_usage >= line && seen_limit == limit && seen_arg == &tag,
	       "with the usage (%llu >= %llu), the limit and its argument",
	       (unsigned long long)seen_usage, (unsigned long long)line);
	grow_to(line + (64 << 20));
	ml_check();
	tap_is(calls, 1, "still above: not called again");
	shrink_to(line - line / 64); /* within the damping band */
	grow_to(line + (8 << 20));
	ml_check();
	tap_is(calls, 1, "dipped only 1/64 below: not called again");
	shrink_to(line - (32 << 20));
	grow_to(line + (8 << 20));
	ml_limits l = ML_LIMITS_INIT;
	ml_run(&l, nothing, NULL, NULL); /* a safe point */
	tap_is(calls, 2,
	       "fell below and crossed again: called again, at "
	       "the end of an ml_run");
	shrink_to(0);
	tap_is(ml_set_pressure_callback(0.5, NULL, NULL), ML_OK,
	       "NULL removes it");
	grow_to(line + (8 << 20));
	ml_check();
	tap_is(calls, 2, "removed: not called");
	shrink_to(0);
	ml_set_global_limit(ML_NO_LIMIT);
	return tap_done();
}
