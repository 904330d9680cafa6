/* The process's mapped ranges (ranges.c's structure): its storage, its
 * lock, whether counting runs, and the guard that keeps the allocator
 * underneath's own mappings out.  The interposed mmap family
 * (api/mmap.c) holds the table for its updates only, never across its
 * system calls (issue 41): an unmap claims its records before the call
 * and removes what it claimed after, a new mapping replaces whatever
 * records lie at its addresses.  A signal handler whose thread holds the
 * table queues its update for that thread (docs/internals.md, "The
 * ranges' lock").
 *
 * The storage, ML__MAPPED_CAP records (3 MiB of address space), is mapped
 * with the kernel directly at the first use and touched where records
 * come to lie (ranges.c moves them to its middle when one end runs out of
 * slots); it is never given back.  A fork child inherits it with the mappings
 * it describes (the lock is in the fork registry). */
#define _GNU_SOURCE
#include "alloc/alloc.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>

ML__LOCK(, ml__mapped_lock, ML__RANK_MAPPED)
_Atomic uintptr_t ml__mapped_owner;
ML__TLS uint8_t ml__mapped_tag;
/* The updates the holder's signal handlers queued (ml__mapped_defer). */
static struct ml__mapped_op queue[8];
_Atomic unsigned ml__mapped_queued;
#define queued ml__mapped_queued
_Atomic bool ml__mapped_on = true;

struct ml__ranges ml__mapped_table;
#define ranges ml__mapped_table
static bool failed;

/* The drop hook's calls made under the table (samples given back) wait
 * here, under the table too, and are made once it is let go: the hook
 * takes the held table's locks and may reach the shared budget's hooks
 * (which read /proc), none of which may run under the table.  A full
 * buffer calls the hook at once (a rare unmap of many sampled pieces):
 * the owner word keeps even that safe from a handler on this thread. */
#define DROPS 16
static struct {
	uintptr_t key;
	uint64_t weight;
} drops[DROPS];
unsigned ml__mapped_ndrops;
/* Counted bytes the drained updates changed, for the meter after the
 * lock (under the table). */
int64_t ml__mapped_pending;
#define pending_delta ml__mapped_pending

static void call_drop(uintptr_t key, uint64_t weight)
{
	ml__upcall_mapped_drop(key, weight);
}

static void drop(void *ctx, uintptr_t key, uint64_t weight)
{
	(void)ctx;
	for (unsigned i = 0; i < ml__mapped_ndrops; i++)
		if (drops[i].key == key) {
			drops[i].weight += weight;
			return;
		}
	if (ml__mapped_ndrops == DROPS) {
		call_drop(key, weight);
		return;
	}
	drops[ml__mapped_ndrops].key = key;
	drops[ml__mapped_ndrops++].weight = weight;
}

bool ml__mapped_take(void)
{
	uintptr_t me = ml__mapped_me();
	for (;;) {
		uintptr_t z = 0;
		if (atomic_compare_exchange_weak_explicit(
		        &ml__mapped_owner, &z, me, memory_order_acquire,
		        memory_order_relaxed))
			break;
		if (z == me)
			return false; /* a handler: its thread holds it */
		if (z)
			sched_yield();
	}
	ml__spin_lock(&ml__mapped_lock);
	if (atomic_load_explicit(&queued, memory_order_relaxed))
		ml__mapped_drain();
	return true;
}

/* Set while the holder drains the queue: a handler that interrupts the
 * drain appends only (the drain may have read the last slot already). */
static _Atomic bool draining;

static bool unmap_op(const struct ml__mapped_op *o)
{
	return o->kind == ML__OP_PUT && o->state == 0 && !o->key && !o->s;
}

/* An unmap folded into the queue's last slots instead of taking one of
 * its own, when that changes nothing the drain will do: unmaps of ranges
 * that touch are one unmap of their hull (removal is idempotent), and a
 * new mapping without samples wholly inside a later unmap is that unmap.
 * A handler that maps, uses and unmaps scratch memory then leaves one
 * slot, or none beyond an earlier run's when the kernel hands out the
 * same addresses again, so that a thread whose every return from a
 * handler meets the next signal (as under valgrind) fills no queue.  Only
 * the holder's handlers, on its thread, run here. */
static bool fold(unsigned n, const struct ml__mapped_op *op)
{
	if (!n || !unmap_op(op) ||
	    atomic_load_explicit(&draining, memory_order_relaxed))
		return false;
	struct ml__mapped_op *l = &queue[n - 1];
	if (!unmap_op(l) || op->a > l->b || op->b < l->a)
		return false;
	l->a = l->a < op->a ? l->a : op->a;
	l->b = l->b > op->b ? l->b : op->b;
	while (n >= 2) {
		struct ml__mapped_op *p = &queue[n - 2];
		l = &queue[n - 1];
		if (unmap_op(p) && p->a <= l->b && l->a <= p->b) {
			p->a = p->a < l->a ? p->a : l->a;
			p->b = p->b > l->b ? p->b : l->b;
		} else if (p->kind == ML__OP_PUT && !p->key && !p->s &&
		           l->a <= p->a && p->b <= l->b) {
			*p = *l;
		} else {
			break;
		}
		n--;
	}
	atomic_signal_fence(memory_order_seq_cst);
	atomic_store_explicit(&queued, n, memory_order_relaxed);
	return true;
}

bool ml__mapped_defer(const struct ml__mapped_op *op)
{
	unsigned n = atomic_load_explicit(&queued, memory_order_relaxed);
	if (fold(n, op))
		return true;
	if (n == sizeof queue / sizeof queue[0]) {
		/* Handlers that each queued while the thread held the table
		 * (it was preempted there, and a signal came at each
		 * return): this update is lost, said once. */
		static _Atomic bool said;
		if (!atomic_exchange(&said, true))
			ml__diag("a signal handler's mapping was not counted "
			         "(its thread was inside the mmap family)");
		return false;
	}
	queue[n] = *op;
	/* The owner is this thread, suspended under us: a signal fence
	 * orders the slot before its count. */
	atomic_signal_fence(memory_order_seq_cst);
	atomic_store_explicit(&queued, n + 1, memory_order_relaxed);
	return true;
}

struct ml__mapped_done ml__mapped_apply(struct ml__ranges *R,
                                        const struct ml__mapped_op *op)
{
	struct ml__mapped_done d = {.recorded = false, .left = op->s};
	switch (op->kind) {
	case ML__OP_PUT:
		d.recorded = ml__ranges_put(R, op->a, op->b, op->state, op->key,
		                            op->s, op->unit);
		if (d.recorded)
			d.left = 0;
		break;
	case ML__OP_PROTECT:
		d.left = ml__ranges_protect(R, op->a, op->b, op->state, op->key,
		                            op->s, op->unit);
		d.recorded = true;
		break;
	case ML__OP_ADVISE:
		ml__ranges_advise(R, op->a, op->b);
		d.recorded = true;
		d.left = 0;
		break;
	case ML__OP_MOVE:
		ml__ranges_move(R, op->a, op->b - op->a, op->to);
		d.recorded = true;
		d.left = 0;
		break;
	default:
		break;
	}
	return d;
}

/* The updates a holder's handlers queued while it held the table, made
 * now by the next holder (perhaps the same thread, perhaps not), before
 * its own: the table stayed held from before their system calls to
 * here, so no other thread's update of the same pages came between.
 * Samples no record took go back (the handler settled as recorded). */
void ml__mapped_drain(void)
{
	struct ml__ranges *R = ml__mapped_ranges();
	uint64_t before = R ? R->counted : 0;
	atomic_store_explicit(&draining, true, memory_order_relaxed);
	atomic_signal_fence(memory_order_seq_cst);
	for (unsigned i = 0;;) {
		unsigned k =
		    atomic_load_explicit(&queued, memory_order_relaxed);
		if (i < k) {
			struct ml__mapped_op op = queue[i++];
			if (!R)
				continue;
			struct ml__mapped_done d = ml__mapped_apply(R, &op);
			if (op.key && d.left)
				drop(NULL, op.key, d.left * op.unit);
			continue;
		}
		if (atomic_compare_exchange_strong_explicit(
		        &queued, &k, 0, memory_order_relaxed,
		        memory_order_relaxed))
			break;
	}
	atomic_signal_fence(memory_order_seq_cst);
	atomic_store_explicit(&draining, false, memory_order_relaxed);
	if (R)
		pending_delta += (int64_t)(R->counted - before);
}

void ml__mapped_give_slow(void)
{
	int e = errno;
	if (atomic_load_explicit(&queued, memory_order_relaxed))
		ml__mapped_drain();
	int64_t delta = pending_delta;
	pending_delta = 0;
	unsigned n = ml__mapped_ndrops;
	uintptr_t key[DROPS];
	uint64_t weight[DROPS];
	for (unsigned i = 0; i < n; i++) {
		key[i] = drops[i].key;
		weight[i] = drops[i].weight;
	}
	ml__mapped_ndrops = 0;
	ml__mapped_give_fast();
	/* The drained updates' bytes and the drops after the lock (the
	 * hooks take others).  A handler that queued after the drain
	 * leaves its update to the next holder. */
	if (delta)
		ml__meter_mapped(delta);
	for (unsigned i = 0; i < n; i++)
		call_drop(key[i], weight[i]);
	errno = e;
}

/* The child of a fork: its one thread holds nothing.  A thread that had
 * taken the owner word and was waiting for the inner lock (held by the
 * fork registry's prepare handler) does not exist here. */
static void mapped_child(void)
{
	atomic_store_explicit(&ml__mapped_owner, 0, memory_order_relaxed);
	atomic_store_explicit(&queued, 0, memory_order_relaxed);
}

__attribute__((constructor(101))) static void mapped_init(void)
{
	ml__atfork(NULL, NULL, mapped_child,
	           "a fork child may wait for ever to map memory");
}

struct ml__ranges *ml__mapped_ranges_make(void)
{
	if (failed)
		return NULL;
	size_t bytes = ML__MAPPED_CAP * sizeof(struct ml__range);
	void *p =
	    ml__sys_mmap(NULL, bytes, PROT_READ | PROT_WRITE,
	                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		failed = true;
		ml__diag("no memory for the table of mapped ranges: memory "
		         "the program maps itself is not counted");
		return NULL;
	}
	ranges.r = p;
	ranges.cap = ML__MAPPED_CAP;
	ranges.rng = 0x6d6170706564; /* fixed: the cuts repeat run to run */
	ranges.drop = drop;
	return &ranges;
}

void ml__mapped_disable(void)
{
	if (!ml__mapped_take())
		return; /* at start, never inside a mapping */
	atomic_store_explicit(&ml__mapped_on, false, memory_order_relaxed);
	int64_t was = (int64_t)ranges.counted;
	if (ranges.r)
		ml__ranges_put(&ranges, 0, UINTPTR_MAX, 0, 0, 0, 0);
	ml__mapped_give();
	if (was)
		ml__meter_mapped(-was);
}
