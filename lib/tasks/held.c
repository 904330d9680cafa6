/* Held memory: the blocks that carried samples, remembered until they are
 * freed, by whichever thread, so that each task knows an unbiased estimate
 * of the bytes it holds (docs/statistics.md, "Held memory").
 *
 * A block that carried s samples at interval S stands for w = s * S bytes.
 * It is charged to the accounts of the distinct tasks on the allocating
 * thread's stack (the allocator pays), up to ML__HELD_TASKS of them, the
 * innermost first.  The records live in one open-addressing table in our
 * own memory, keyed by the block's address, under one lock; free finds
 * them through the filter of the layer below (alloc/sampled.c), so that
 * a free of any other block costs four instructions.  Nothing here reads
 * a block or the allocator's header. */
#include "tasks/tasks.h"

#include <string.h>

#define ML__HELD_TASKS 4

struct ml__account {
	_Atomic uint64_t held; /* bytes: the weights of its live records */
	_Atomic uint64_t peak;
	/* The task's own reference (until it ends) plus one per record. */
	_Atomic uint32_t refs;
};

struct record {
	uintptr_t addr; /* 0: empty slot */
	uint64_t weight;
	struct ml__account *acct[ML__HELD_TASKS];
	uint32_t stack; /* core/stacks.c's id; 0: not captured */
};

ML__POOL(static, account_pool, sizeof(struct ml__account))
ML__LOCK(static, table_lock, ML__RANK_HELD)
static struct record *table;
static size_t cap, used; /* cap: a power of two, or 0 */
_Atomic bool ml__held_on;

static size_t slot_of(uintptr_t a)
{
	/* Blocks are at least 16-byte aligned: mix the bits above. */
	uint64_t h = (uint64_t)(a >> 4) * 0x9e3779b97f4a7c15u;
	return (size_t)(h >> 32) & (cap - 1);
}

/* Twice the room, or the first table: false when no memory. */
static bool grow(void)
{
	size_t ncap = cap ? cap * 2 : 4096;
	struct record *nt = ml__raw_alloc(ncap * sizeof *nt);
	if (!nt)
		return false;
	struct record *old = table;
	size_t ocap = cap;
	table = nt;
	cap = ncap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].addr) {
			size_t j = slot_of(old[i].addr);
			while (table[j].addr)
				j = (j + 1) & (cap - 1);
			table[j] = old[i];
		}
	if (old)
		ml__raw_free(old, ocap * sizeof *old);
	return true;
}

static struct record *find(uintptr_t a)
{
	if (!cap)
		return NULL;
	for (size_t j = slot_of(a);; j = (j + 1) & (cap - 1)) {
		if (table[j].addr == a)
			return &table[j];
		if (!table[j].addr)
			return NULL;
	}
}

/* Linear probing's deletion: shift back the records that probed past the
 * hole, so that no tombstone is needed. */
static void erase(struct record *r)
{
	size_t i = (size_t)(r - table);
	for (size_t j = (i + 1) & (cap - 1); table[j].addr;
	     j = (j + 1) & (cap - 1)) {
		size_t home = slot_of(table[j].addr);
		/* Move j into the hole at i unless its home lies in (i, j]. */
		if (((j - home) & (cap - 1)) >= ((j - i) & (cap - 1))) {
			table[i] = table[j];
			i = j;
		}
	}
	table[i].addr = 0;
	used--;
}

static void account_unref(struct ml__account *a)
{
	if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
		ml__pool_put(&account_pool, a);
}

/* The record's charges go: its accounts hold w bytes less. */
static void release(const struct record *r)
{
	for (int i = 0; i < ML__HELD_TASKS && r->acct[i]; i++) {
		atomic_fetch_sub_explicit(&r->acct[i]->held, r->weight,
		                          memory_order_relaxed);
		account_unref(r->acct[i]);
	}
}

/* The free hook (alloc/alloc.h): p's bucket is marked. */
static void held_free(void *p)
{
	struct record r = {0};
	ml__spin_lock(&table_lock);
	struct record *e = find((uintptr_t)p);
	if (e) {
		r = *e;
		erase(e);
		ml__sampled_unmark(p);
	}
	ml__spin_unlock(&table_lock);
	if (r.addr)
		release(&r);
}

void ml__held_forget(void *p)
{
	if (ml__sampled_maybe(p))
		held_free(p);
}

/* The task's account, made at its first charge. */
static struct ml__account *account_of(struct ml_task *task)
{
	struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	if (a)
		return a;
	struct ml__account *n = ml__pool_get(&account_pool);
	if (!n)
		return NULL;
	atomic_init(&n->held, 0);
	atomic_init(&n->peak, 0);
	atomic_init(&n->refs, 1);
	if (atomic_compare_exchange_strong(&task->acct, &a, n))
		return n;
	ml__pool_put(&account_pool, n); /* another thread made it first */
	return a;
}

void ml__held_note(struct ml__thread *t, void *p, uint64_t s)
{
	struct record r = {.addr = (uintptr_t)p,
	                   .weight = s * (uint64_t)t->sampler.interval,
	                   .stack = t->stack};
	int n = 0;
	for (struct ml__slice *k = t->top; k && n < ML__HELD_TASKS;
	     k = k->outer) {
		struct ml__account *a = account_of(k->task);
		bool dup = false;
		for (int i = 0; i < n; i++)
			dup |= r.acct[i] == a;
		if (a && !dup)
			r.acct[n++] = a;
	}
	if (!n)
		return; /* no task holds it */
	for (int i = 0; i < n; i++) {
		struct ml__account *a = r.acct[i];
		atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
		uint64_t h = atomic_fetch_add_explicit(&a->held, r.weight,
		                                       memory_order_relaxed) +
		             r.weight;
		uint64_t pk =
		    atomic_load_explicit(&a->peak, memory_order_relaxed);
		while (h > pk && !atomic_compare_exchange_weak_explicit(
		                     &a->peak, &pk, h, memory_order_relaxed,
		                     memory_order_relaxed))
			;
	}
	struct record stale = {0};
	bool kept = false;
	ml__spin_lock(&table_lock);
	/* A block freed behind our back (the allocator's own free called
	 * directly) whose address came back: its old record goes. */
	struct record *e = find(r.addr);
	if (e) {
		stale = *e;
		*e = r;
		kept = true;
	} else if ((used + 1) * 2 <= cap || grow()) {
		size_t j = slot_of(r.addr);
		while (table[j].addr)
			j = (j + 1) & (cap - 1);
		table[j] = r;
		used++;
		ml__sampled_mark(p);
		kept = true;
	}
	ml__spin_unlock(&table_lock);
	if (stale.addr)
		release(&stale);
	if (!kept)
		release(&r); /* no memory for the table: not tracked */
}

uint64_t ml__held_bytes(const struct ml_task *task)
{
	const struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	return a ? atomic_load_explicit(&a->held, memory_order_relaxed) : 0;
}

uint64_t ml__held_peak(const struct ml_task *task)
{
	const struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	return a ? atomic_load_explicit(&a->peak, memory_order_relaxed) : 0;
}

void ml__held_task_end(struct ml_task *task)
{
	struct ml__account *a =
	    atomic_exchange_explicit(&task->acct, NULL, memory_order_acq_rel);
	if (a)
		account_unref(a);
}

bool ml__held_share(struct ml_task *to, struct ml_task *from)
{
	struct ml__account *a = account_of(from);
	if (!a)
		return false;
	atomic_fetch_add_explicit(&a->refs, 1, memory_order_relaxed);
	atomic_store_explicit(&to->acct, a, memory_order_release);
	return true;
}

uint64_t ml__held_by_stack(const struct ml_task *task, uint64_t *sums)
{
	const struct ml__account *a =
	    task ? atomic_load_explicit(&task->acct, memory_order_acquire)
	         : NULL;
	if (task && !a)
		return 0; /* it never held anything */
	uint64_t total = 0;
	/* One pass under the lock: frees of sampled blocks wait meanwhile,
	 * no other allocation does. */
	ml__spin_lock(&table_lock);
	for (size_t i = 0; i < cap; i++) {
		const struct record *r = &table[i];
		bool mine = r->addr && !a;
		for (int j = 0; r->addr && a && j < ML__HELD_TASKS; j++)
			mine |= r->acct[j] == a;
		if (!mine)
			continue;
		sums[r->stack <= ML__NSTACKS ? r->stack : 0] += r->weight;
		total += r->weight;
	}
	ml__spin_unlock(&table_lock);
	return total;
}

void ml__held_start(void)
{
	if (atomic_load_explicit(&ml__held_on, memory_order_acquire))
		return;
	ml__sampled_free_hook = held_free;
	ml__sampled_switch_on();
	atomic_store_explicit(&ml__held_on, true, memory_order_release);
}
