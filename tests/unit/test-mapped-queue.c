/* The queue of a signal handler's mapping updates (lib/alloc/mapped.c,
 * issue 41 item 2): a handler whose thread holds the mapped table queues
 * its updates for that thread, and a full queue loses the update.  Under
 * valgrind every return from the handler of test-mapped-signal met the
 * next SIGALRM while its thread held the table, the queue's eight slots
 * filled with one handler's map, cut and unmap after another, and 60 KiB
 * stayed counted for good (CI stage d: "got 61440, want 0").  The queue
 * folds an unmap into the slots before it where that changes nothing:
 * here the handler's updates are made by hand, as the table's owner, and
 * the queue is read back.  Linked with the core's convenience library:
 * the test calls the library's internal functions.  No clock, no
 * signal: the order is the test's own. */
#include "alloc/alloc.h"
#include "../tap/tap.h"

#define KIB ((uintptr_t)1024)
/* Addresses the table never sees otherwise: far from this process's. */
#define X ((uintptr_t)0x7e0000000000)
#define Y (X + 1024 * KIB)

static struct ml__mapped_op put(uintptr_t a, uintptr_t b, uintptr_t key)
{
	return (struct ml__mapped_op){.kind = ML__OP_PUT,
	                              .state = ML__RANGE_COUNTED,
	                              .a = a,
	                              .b = b,
	                              .key = key,
	                              .s = key ? 1 : 0,
	                              .unit = 4096};
}

static struct ml__mapped_op unmap(uintptr_t a, uintptr_t b)
{
	return (struct ml__mapped_op){.kind = ML__OP_PUT, .a = a, .b = b};
}

/* test-mapped-signal's handler, at base: a 64 KiB mapping, its first
 * page unmapped, then the rest.  False if an update was lost. */
static bool handler_run(uintptr_t base)
{
	struct ml__mapped_op ops[3] = {put(base, base + 64 * KIB, 0),
	                               unmap(base, base + 4 * KIB),
	                               unmap(base + 4 * KIB, base + 64 * KIB)};
	bool all = true;
	for (int i = 0; i < 3; i++)
		all &= ml__mapped_defer(&ops[i]);
	return all;
}

static unsigned queued(void)
{
	return atomic_load_explicit(&ml__mapped_queued, memory_order_relaxed);
}

int main(void)
{
	struct ml__ranges *R = ml__mapped_ranges();
	if (!R)
		tap_bail("no mapped table");
	tap_ok(ml__mapped_take(), "the test's thread takes the table");
	uint64_t counted = R->counted;
	size_t records = R->n;

	/* Fifty runs at the same address (the kernel hands the unmapped
	 * pages out again): before, the ninth update was lost. */
	bool all = true;
	unsigned most = 0;
	for (int i = 0; i < 50; i++) {
		all &= handler_run(X);
		most = queued() > most ? queued() : most;
	}
	tap_ok(all, "50 handler runs at one address: no update lost");
	tap_ok(most == 1, "the queue held at most %u slot (want 1)", most);

	/* Runs at two addresses that do not touch: a slot each. */
	all = handler_run(X) & handler_run(Y) & handler_run(X);
	tap_ok(all && queued() == 3,
	       "runs at X, Y, X: %u slots (want 3: X's unmap, Y's, X's)",
	       queued());

	/* A sampled mapping keeps its slot: its samples are given back by
	 * the drain, which only its own update can say. */
	struct ml__mapped_op keyed = put(Y, Y + 64 * KIB, 0x1234);
	struct ml__mapped_op gone = unmap(Y, Y + 64 * KIB);
	unsigned before = queued();
	ml__mapped_defer(&keyed);
	ml__mapped_defer(&gone);
	tap_ok(queued() == before + 2,
	       "a sampled mapping and its unmap: two slots (%u -> %u)", before,
	       queued());

	/* A mapping that outlives the queue stays whole: the unmap of its
	 * first page folds into nothing before it. */
	struct ml__mapped_op kept = put(X, X + 64 * KIB, 0);
	struct ml__mapped_op cut = unmap(X, X + 4 * KIB);
	ml__mapped_defer(&kept);
	ml__mapped_defer(&cut);

	/* The drain, at the owner's let go, makes them all. */
	ml__mapped_give();
	tap_ok(queued() == 0, "the queue is empty after the drain");
	tap_ok(ml__mapped_take(), "taken again");
	tap_ok(R->n == records + 1 && R->counted == counted + 60 * KIB,
	       "the table: one record more, 60 KiB more counted (got %zu "
	       "records, +%lld bytes)",
	       R->n - records, (long long)(R->counted - counted));
	struct ml__mapped_op rest = unmap(X + 4 * KIB, X + 64 * KIB);
	ml__mapped_apply(R, &rest);
	tap_ok(R->n == records && R->counted == counted,
	       "and as before once that mapping is unmapped");
	ml__mapped_give();
	return tap_done();
}
