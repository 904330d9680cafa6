/* The hooks of a shared budget's member (docs/internals.md, "Shared
 * budgets"): joining a mapped table, publishing and choosing from the
 * meter's folds, the held hook and safe points, and the fork child. */
#define _GNU_SOURCE
#include "shared/shared.h"

#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* A fold found the total over: the choice waits for this thread's held
 * hook (its allocation's block recorded), or its next fold. */
static __thread bool choice_due __attribute__((tls_model("initial-exec")));

bool ml__shared_ensure_slot(struct ml__shared_table *t)
{
	if (ml__shared_my_lineage == ml__lineage && ml__shared_slot_ours(t))
		return true;
	if (ml__shared_my_lineage != ml__lineage || ml__shared_claim_failed)
		return false; /* a fork child before its handler ran */
	if (ml__shared_claim(t, ml__shared_wake_signal()) != ML_OK) {
		ml__shared_claim_failed = true;
		ml__diag("shared budget %s: no free slot of %u: this process "
		         "is not counted",
		         ml__shared_name[0] ? ml__shared_name : "(unnamed)",
		         (unsigned)ml__shared_nslots);
		return false;
	}
	return true;
}

static uint64_t publish_batch(struct ml__shared_table *t)
{
	uint64_t b =
	    atomic_load_explicit(&t->head.limit, memory_order_relaxed) / 8192;
	return b > ML__SHARED_MIN_BATCH ? b : ML__SHARED_MIN_BATCH;
}

static uint64_t magnitude(int64_t m)
{
	return m < 0 ? -(uint64_t)m : (uint64_t)m;
}

/* What each hook does first, under the slot lock: obey a stop request
 * posted to this process, else, when `due`, publish and make the choice
 * (one a fold deferred, or the safe point's).  True when it did either. */
static bool obey_or_choose(struct ml__shared_table *t, bool due)
{
	if (atomic_load(&t->slot[ml__shared_my_slot].request)) {
		ml__shared_obey_request(t, true);
		return true;
	}
	if (!due)
		return false;
	choice_due = false;
	ml__shared_publish(t);
	ml__shared_choose(t, false);
	return true;
}

/* The meter's fold hook: inside malloc, atomics, a few system calls, no
 * lock waited on. */
static void on_fold(void)
{
	if (!atomic_load_explicit(&ml__shared_joined, memory_order_relaxed) ||
	    !ml__spin_trylock(&ml__shared_slot_lock))
		return;
	struct ml__shared_table *t = ml__shared_table_in_use();
	if (t && ml__shared_my_lineage == ml__lineage &&
	    ml__shared_ensure_slot(t)) {
		uint64_t heap = ml__shared_heap_now();
		uint64_t moved = heap > ml__shared_summed_heap
		                     ? heap - ml__shared_summed_heap
		                     : ml__shared_summed_heap - heap;
		ml__shared_trip_deferred(t);
		/* A choice still due: no held hook since the fold that
		 * found us over (an allocation not sampled). */
		if (!obey_or_choose(t, choice_due) &&
		    (moved >= publish_batch(t) || ml__shared_last_stopping)) {
			struct ml__shared_totals v;
			ml__shared_publish(t);
			ml__shared_sum_table(
			    t,
			    ml__shared_sums_done % ML__SHARED_FULL_EVERY == 0,
			    -1, false, &v);
			/* Over: this fold runs inside an allocation whose
			 * block is not yet its task's; the choice waits
			 * for the held hook that records it. */
			if (ml__shared_over_limit(&v)) {
				choice_due = true;
			} else {
				ml__shared_pressure_note(&v);
				ml__shared_drop_requests(t, &v);
			}
		}
		/* A wake that came while this hook held the lock. */
		ml__shared_trip_deferred(t);
	}
	ml__spin_unlock(&ml__shared_slot_lock);
}

/* The held hook: a sampled block recorded or freed.  A fold runs inside
 * the allocation, before its block is recorded: a choice it deferred is
 * made here, with the block in its task's estimate (issue 35: a 250 MiB
 * body buffer crossing the limit got a 60 MiB bystander stopped).
 * Otherwise the estimates are republished once they have moved by a
 * batch, net, as the heap is (a member that goes quiet after a large
 * block would leave its old figure in the table); publication only, no
 * sum: the folds sum and choose (summing here cost pgbench -S about 6 %
 * of its transactions per second). */
static void on_held_moved(int64_t d)
{
	if (!atomic_load_explicit(&ml__shared_joined, memory_order_relaxed))
		return;
	int64_t m = atomic_fetch_add_explicit(&ml__shared_held_moved, d,
	                                      memory_order_relaxed) +
	            d;
	if ((!choice_due && magnitude(m) < ML__SHARED_MIN_BATCH) ||
	    !ml__spin_trylock(&ml__shared_slot_lock))
		return;
	struct ml__shared_table *t = ml__shared_table_in_use();
	m = atomic_load_explicit(&ml__shared_held_moved, memory_order_relaxed);
	if (t && ml__shared_my_lineage == ml__lineage &&
	    ml__shared_slot_ours(t)) {
		if (!obey_or_choose(t, choice_due) &&
		    magnitude(m) >= publish_batch(t))
			ml__shared_publish(t);
		ml__shared_trip_deferred(t);
	}
	ml__spin_unlock(&ml__shared_slot_lock);
}

/* At every safe point (ml_check, ml_is_interrupted, the end of ml_run
 * and of a slice): a request the wake handler left, a stop request, a
 * deferred choice, stopping tasks to republish; the pressure callback
 * with the shared limit. */
static void on_safe_point(void)
{
	if (!atomic_load_explicit(&ml__shared_joined, memory_order_relaxed))
		return;
	/* The table is read only under the slot lock: a leave unmaps it. */
	if (ml__spin_trylock(&ml__shared_slot_lock)) {
		struct ml__shared_table *t = ml__shared_table_in_use();
		ml__shared_trip_deferred(t);
		if (t && ml__shared_ensure_slot(t))
			obey_or_choose(t,
			               ml__shared_last_stopping || choice_due);
		ml__shared_trip_deferred(t);
		ml__spin_unlock(&ml__shared_slot_lock);
	}
	if (atomic_load_explicit(&ml__shared_pressure_due,
	                         memory_order_relaxed) &&
	    atomic_exchange(&ml__shared_pressure_due, false)) {
		uint64_t ppm;
		void *arg;
		ml_pressure_fn fn = ml__pressure_get(&ppm, &arg);
		uint64_t limit = ml__shared_limit();
		if (fn && limit)
			fn(atomic_load(&ml__shared_pressure_total), limit, arg);
	}
}

/* A fork child: a member with a slot of its own (claimed at its first
 * fold or safe point); the heap it inherited is its parent's. */
static void atfork_child(void)
{
	if (!atomic_load(&ml__shared_joined))
		return;
	ml__shared_my_slot = -1;
	ml__shared_my_pid = 0;
	ml__shared_know_self();
	ml__shared_inherited = ml__meter_usage();
	ml__shared_summed_heap = 0;
	ml__shared_claim_failed = false;
	atomic_store(&ml__shared_held_moved, 0);
	atomic_store(&ml__shared_wake_deferred, 0);
	ml__shared_last_stopping = ml__shared_stopping_since = 0;
	choice_due = false;
	atomic_store(&ml__shared_pressure_above, false);
	atomic_store(&ml__shared_pressure_due, false);
}

__attribute__((constructor(103))) static void shared_init(void)
{
	ml__atfork(NULL, NULL, atfork_child,
	           "a forked child is not a member of its parent's shared "
	           "budget");
}

/* Join the table t of n slots (the join lock held): ML_OK, or ML_ENOMEM (no
 * free slot) with t unmapped. */
int ml__shared_join_table(struct ml__shared_table *t, uint32_t n,
                          const char *name, bool by_name)
{
	if (!ml__shared_id_key) {
		uint64_t x = (uint64_t)(uintptr_t)&ml__shared_id_key ^
		             ((uint64_t)getpid() << 32) ^ (uint64_t)t ^
		             ml__shared_now_ns();
		ml__shared_id_key = ml__splitmix64(&x);
	}
	ml__shared_my_pid = 0;
	ml__shared_know_self();
	ml__shared_inherited = 0;
	ml__shared_nslots = n;
	ml__shared_claim_failed = false;
	choice_due = false;
	atomic_store(&ml__shared_wake_deferred, 0);
	atomic_store(&ml__shared_map_lost, false);
	if (by_name)
		ml__shared_sigbus_guard();
	ml__shared_wake_install(ml__shared_wake_asked);
	/* The meter runs from now on, limit or not.  The choice reads the
	 * held estimates of global tasks, which need held tracking from
	 * their registration on (tasks/tracking.c). */
	ml__meter_keep(true);
	ml__spin_lock(&ml__shared_slot_lock);
	int rc = ml__shared_claim(t, ml__shared_wake_signal());
	if (rc == ML_OK) {
		strcpy(ml__shared_name, name);
		ml__shared_publish(t);
		atomic_store(&ml__shared_map_len, ml__shared_table_bytes(n));
		atomic_store(&ml__shared_map_base, (void *)t);
		atomic_store(&ml__shared_joined, t);
		atomic_store(&ml__upcalls.fold, on_fold);
		atomic_store(&ml__upcalls.held_moved, on_held_moved);
		atomic_store(&ml__upcalls.safe_point, on_safe_point);
		ml__shared_choose(t, true);
	}
	ml__spin_unlock(&ml__shared_slot_lock);
	if (rc != ML_OK) {
		ml__meter_keep(false);
		ml__sys_munmap(t, ml__shared_table_bytes(n));
	}
	return rc;
}
