/* When held tracking runs (issue 26): the count of what needs it, and
 * switching it on and off.  The records are held.c's, the accounts
 * account.c's.
 *
 * Tracking costs every free the filter (alloc.h), so it runs only while
 * something needs it: a needer is a live task object, a live global task,
 * an ml_run with a held limit, the API's global limit once a program's
 * task has sampled under it (global.c), run mode's held limit or report.
 * `needers` counts them; samples are recorded while it is above 0
 * (ml__held_on).  The free tail stays filtered while tracking is on AND
 * while any record remains: a block recorded while it was on is still
 * found when it is freed later, and the free of the process's last record
 * switches the tail back to the allocator's own free.  A long-lived
 * recorded block keeps every free filtered until it is freed.
 *
 * When the last needer goes and nothing is recorded, the filter is not
 * switched off at once but after DRAIN_SAMPLES samples of one thread
 * (ml__held_drain_tick; about 5 MiB of allocation at the default
 * interval): switching off reads all 64 shards under their locks, and a
 * server that makes one task object per request, one at a time, would pay
 * that (about 2000 instructions) at every request while free gained
 * nothing between two requests.
 *
 * Why a free can never miss a record (frees run with no lock; each loads
 * the tail with a relaxed load and calls it):
 *  - ml__held_on, ml__sampled_on and the tails change only under
 *    ml__meter_switch_lock.  Switching on stores the tail, then ml__held_on
 *    (release); switching off stores ml__held_on = false, then, only if
 *    every shard, each read under its lock, holds no record, the plain
 *    tail (ml__held_drain_check, held.c).
 *  - A record is made under its shard's lock only after reading
 *    ml__held_on true there (ml__held_note).  Say the true it read was
 *    stored by switch-on E: E's tail store happens before the record.
 *    A later plain-tail store P follows an off-store F after E (P reads
 *    false under the switch lock) and reads the shard under its lock
 *    after F.  Had P read the shard before the record was made, the
 *    record's critical section would come after F and could not read
 *    E's true, older than F: so P reads the shard after the record was
 *    made, and sees it unless it is already erased.
 *  - The free of a recorded block p happens after p's malloc returned
 *    (whoever frees p got it from there), so after the record and after
 *    E's tail store: its load of the tail reads that filtered tail or a
 *    later store, never an earlier plain one; a later plain store comes
 *    only after p's record is erased, which this free's own lookup does
 *    after its load.  realloc's ml__watch is stored with the tail, the
 *    same way.
 *  - A free that loaded the filtered tail just before it is switched off
 *    still runs the filter: its bit is clear (no record) or saturated, and
 *    the lookup finds nothing.  Harmless.
 *  - The last record's free reads ml__held_on under its shard's lock:
 *    a switch-off that read that shard before the erase stored false
 *    before, so the free sees false and calls ml__held_drain_check; one
 *    that read it after sees no record there.  Either way the last one
 *    out turns the filter off.
 * needers goes from 0 to 1 and from 1 to 0 under the switch lock only,
 * so that ml__held_on is true whenever a need is held: a task never runs
 * while tracking is off for a moment under it. */
#include "tasks/held.h"

static _Atomic uint32_t needers;
#define DRAIN_SAMPLES 64
static ML__TLS uint32_t drain_ticks;

/* Under the switch lock: tracking off; the filter later, once nothing
 * is recorded (the ticks, or the last record's free:
 * ml__held_drain_check). */
static void needs_off(void)
{
	atomic_store_explicit(&ml__held_on, false, memory_order_relaxed);
	atomic_store_explicit(&ml__held_draining, true, memory_order_relaxed);
}

void ml__held_drain_tick(void)
{
	if (++drain_ticks % DRAIN_SAMPLES == 0)
		ml__held_drain_check();
}

void ml__held_need(void)
{
	uint32_t n = atomic_load_explicit(&needers, memory_order_relaxed);
	/* 1 or more to one more: tracking is on and stays on. */
	while (n)
		if (atomic_compare_exchange_weak_explicit(&needers, &n, n + 1,
		                                          memory_order_acquire,
		                                          memory_order_relaxed))
			return;
	ml__allocator_resolve();
	ml__spin_lock(&ml__meter_switch_lock);
	if (!atomic_load_explicit(&ml__held_on, memory_order_relaxed)) {
		atomic_store_explicit(&ml__upcalls.sampled_free, ml__held_free,
		                      memory_order_release);
		/* Still on if it was draining: nothing to switch. */
		if (!atomic_load_explicit(&ml__held_draining,
		                          memory_order_relaxed))
			ml__sampled_switch(true);
		atomic_store_explicit(&ml__held_draining, false,
		                      memory_order_relaxed);
		atomic_store_explicit(&ml__held_on, true, memory_order_release);
	}
	atomic_fetch_add_explicit(&needers, 1, memory_order_release);
	ml__spin_unlock(&ml__meter_switch_lock);
}

void ml__held_unneed(void)
{
	uint32_t n = atomic_load_explicit(&needers, memory_order_relaxed);
	/* 2 or more to one fewer: someone still needs it. */
	while (n > 1)
		if (atomic_compare_exchange_weak_explicit(&needers, &n, n - 1,
		                                          memory_order_release,
		                                          memory_order_relaxed))
			return;
	ml__allocator_resolve();
	ml__spin_lock(&ml__meter_switch_lock);
	if (atomic_fetch_sub_explicit(&needers, 1, memory_order_relaxed) == 1)
		needs_off();
	ml__spin_unlock(&ml__meter_switch_lock);
}

bool ml__held_tracking_test(bool *filtered)
{
	*filtered = atomic_load(&ml__sampled_on);
	return atomic_load(&ml__held_on);
}
