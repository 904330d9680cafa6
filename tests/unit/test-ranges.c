/* The range table (lib/alloc/ranges.c) under the two placements of new
 * mappings (issue 34): top-down, the kernel's (each new mapping below all
 * the others), and bottom-up (the bench's under valgrind).  Either way a
 * mapping made and unmapped with many live must move no record, but for
 * an occasional recentring: the records moved, summed over every
 * operation, stay below the number of operations (a table that shifts
 * the records after an insertion moves n of them for each).  Counted by
 * where each record lies before and after each operation: no clock.
 * ranges.c is compiled in; the storage is a static array. */
#include "alloc/alloc.h"
#include "../tap/tap.h"

#include <string.h>

#define CAP 4096
#define LIVE 2000
#define PAIRS 2000
#define PAGE ((uintptr_t)4096)
#define TOP ((uintptr_t)1 << 40)

static struct ml__range store[CAP];
static struct ml__range *slot_of[CAP]; /* before an operation */
static uintptr_t start_of[CAP];
static struct ml__ranges R;
static uint64_t moved, ops;
static bool consistent;

static void before(void)
{
	for (size_t k = 0; k < R.n; k++) {
		start_of[k] = R.r[k].start;
		slot_of[k] = &R.r[k];
	}
}

/* Records that lie at another slot than before the operation (both lists
 * sorted by start). */
static void after(size_t was)
{
	size_t k = 0;
	for (size_t j = 0; j < R.n; j++) {
		while (k < was && start_of[k] < R.r[j].start)
			k++;
		if (k < was && start_of[k] == R.r[j].start &&
		    slot_of[k] != &R.r[j])
			moved++;
	}
	ops++;
	consistent &= ml__ranges_check(&R);
}

static void put(uintptr_t a, unsigned state)
{
	size_t was = R.n;
	before();
	ml__ranges_put(&R, a, a + PAGE, state, 0, 0, 1);
	after(was);
}

/* Mapping i of a placement: down, each below the one before. */
static uintptr_t at(bool down, uintptr_t i)
{
	return down ? TOP - (i + 1) * 2 * PAGE : TOP + i * 2 * PAGE;
}

static void run(bool down)
{
	memset(&R, 0, sizeof R);
	R.r = store;
	R.cap = CAP;
	moved = ops = 0;
	consistent = true;
	for (uintptr_t i = 0; i < LIVE; i++)
		put(at(down, i), ML__RANGE_COUNTED);
	/* The pairs: each mapping where the next one goes, then unmapped. */
	for (uintptr_t i = 0; i < PAIRS; i++) {
		put(at(down, LIVE), ML__RANGE_COUNTED);
		put(at(down, LIVE), 0);
	}
	bool all = R.n == LIVE && R.counted == LIVE * PAGE;
	/* The newest first. */
	for (uintptr_t i = LIVE; i-- > 0;)
		put(at(down, i), 0);
	const char *name = down ? "top-down" : "bottom-up";
	tap_ok(consistent, "%s: sorted and counted after every operation",
	       name);
	tap_ok(all && R.n == 0 && R.counted == 0,
	       "%s: %d live, then none after their unmaps", name, LIVE);
	tap_ok(moved < ops, "%s: %llu records moved in %llu operations", name,
	       (unsigned long long)moved, (unsigned long long)ops);
}

int main(void)
{
	tap_plan(6);
	run(true);
	run(false);
	return tap_done();
}
