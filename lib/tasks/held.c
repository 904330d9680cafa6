/* Held memory's records: the blocks that carried samples, remembered
 * until they are freed, by whichever thread, so that each task knows an
 * unbiased estimate of the bytes it holds (docs/statistics.md, "Held
 * memory").
 *
 * A block that carried s samples at interval S stands for w = s * S bytes.
 * It is charged to the accounts (account.c) of the distinct tasks on the
 * allocating thread's stack (the allocator pays), up to ML__HELD_TASKS of
 * them, the innermost first.  The records live in open-addressing tables
 * in our own memory, keyed by the block's address, in SHARDS shards
 * chosen by the address, each under its own lock: threads that sample or
 * free at once meet on one lock only when their blocks hash to the same
 * shard (issue 17).  free finds them through the filter of the layer
 * below (alloc/sampled.c), so that a free of any other block costs five
 * instructions.  Nothing here reads a block or the allocator's header.
 * The last record's free switches the filter off when tracking is off
 * (ml__held_drain_check; when tracking runs is tracking.c's). */
#include "tasks/held.h"

#include <string.h>

#define SHARDS 64 /* a power of two */
#define FIRST_CAP 256

struct record {
	uintptr_t addr; /* 0: empty slot */
	uint64_t weight;
	struct ml__account *acct[ML__HELD_TASKS];
	uint32_t stack; /* core/stacks.c's id; 0: not captured */
};

/* One shard's table: cap a power of two, or 0. */
struct shard {
	struct record *table;
	size_t cap, used;
} __attribute__((aligned(64)));

ML__LOCKS(static, shard_lock, SHARDS, ML__RANK_HELD)
static struct shard shards[SHARDS];
/* Set and cleared by tracking.c, under the switch lock; here because the
 * records read them under their shard's lock. */
_Atomic bool ml__held_on;
_Atomic bool ml__held_draining;

/* Blocks are at least 16-byte aligned: mix the bits above. */
static uint64_t hash_of(uintptr_t a)
{
	return (uint64_t)(a >> 4) * 0x9e3779b97f4a7c15u;
}

/* By the filter's bucket (alloc/alloc.h): the blocks of one bucket are
 * in one shard, whose lock then guards the bucket's count. */
static unsigned shard_of(uintptr_t a)
{
	uint64_t b = ml__sampled_bucket((const void *)a);
	return (unsigned)((b * 0x9e3779b97f4a7c15u) >> 58) & (SHARDS - 1);
}

static size_t slot_of(const struct shard *sh, uintptr_t a)
{
	return (size_t)(hash_of(a) >> 32) & (sh->cap - 1);
}

/* Twice the room, or the first table: false when no memory. */
static bool grow(struct shard *sh)
{
	size_t ncap = sh->cap ? sh->cap * 2 : FIRST_CAP;
	struct record *nt = ml__raw_alloc(ncap * sizeof *nt);
	if (!nt)
		return false;
	struct record *old = sh->table;
	size_t ocap = sh->cap;
	sh->table = nt;
	sh->cap = ncap;
	for (size_t i = 0; i < ocap; i++)
		if (old[i].addr) {
			size_t j = slot_of(sh, old[i].addr);
			while (sh->table[j].addr)
				j = (j + 1) & (sh->cap - 1);
			sh->table[j] = old[i];
		}
	if (old)
		ml__raw_free(old, ocap * sizeof *old);
	return true;
}

static struct record *find(const struct shard *sh, uintptr_t a)
{
	if (!sh->cap)
		return NULL;
	for (size_t j = slot_of(sh, a);; j = (j + 1) & (sh->cap - 1)) {
		if (sh->table[j].addr == a)
			return &sh->table[j];
		if (!sh->table[j].addr)
			return NULL;
	}
}

/* Linear probing's deletion: shift back the records that probed past the
 * hole, so that no tombstone is needed. */
static void erase(struct shard *sh, struct record *r)
{
	struct record *table = sh->table;
	size_t mask = sh->cap - 1;
	size_t i = (size_t)(r - table);
	for (size_t j = (i + 1) & mask; table[j].addr; j = (j + 1) & mask) {
		size_t home = slot_of(sh, table[j].addr);
		/* Move j into the hole at i unless its home lies in (i, j]. */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			table[i] = table[j];
			i = j;
		}
	}
	table[i].addr = 0;
	sh->used--;
}

/* The record's charges go: its accounts hold w bytes less. */
static void release(const struct record *r)
{
	for (int i = 0; i < ML__HELD_TASKS && r->acct[i]; i++) {
		ml__account_charge(r->acct[i], -r->weight);
		if (!r->acct[i]->batch)
			ml__account_unref(r->acct[i]);
	}
}

static inline void held_moved(int64_t delta)
{
	ml__upcall_held_moved(delta);
}

void ml__held_free(void *p)
{
	struct record r = {0};
	bool drained = false;
	unsigned k = shard_of((uintptr_t)p);
	struct shard *sh = &shards[k];
	/* Busy under the shard's lock (issue 41): a signal handler's
	 * allocation on this thread meanwhile is not sampled, so it never
	 * waits for the lock its own thread holds. */
	struct ml__thread *t = &ml__self;
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__spin_lock(&shard_lock[k].lock);
	struct record *e = find(sh, (uintptr_t)p);
	if (e) {
		r = *e;
		erase(sh, e);
		ml__sampled_unmark(p);
		/* The shard's last record while no task needs tracking: maybe
		 * the process's last (read under the lock: tracking.c). */
		drained = !sh->used && !ML__HELD_ON;
	}
	ml__spin_unlock(&shard_lock[k].lock);
	t->busy = busy;
	if (r.addr) {
		release(&r);
		held_moved(-(int64_t)r.weight);
	}
	if (ml__unlikely(drained))
		ml__held_drain_check();
}

/* Issue 34: a mapping's record (keyed by api/mmap.c's odd key, never a
 * block's address) gives back `weight` of its bytes: part of the mapping
 * went (alloc/ranges.c draws which samples).  The record goes with its
 * last byte.  Called after the ranges' lock (alloc/mapped.c buffers the
 * calls), or under it when its buffer is full: it ranks before ours. */
void ml__held_drop(uintptr_t key, uint64_t weight)
{
	struct record r = {0};
	bool drained = false, part = false;
	unsigned k = shard_of(key);
	struct shard *sh = &shards[k];
	/* Busy: a signal handler's allocation on this thread meanwhile is
	 * not sampled, so takes no shard lock (issue 41). */
	struct ml__thread *t = &ml__self;
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__spin_lock(&shard_lock[k].lock);
	struct record *e = find(sh, key);
	if (e) {
		r = *e;
		if (weight < e->weight) {
			e->weight -= weight;
			r.weight = weight;
			part = true; /* the record stays */
		} else {
			erase(sh, e);
			ml__sampled_unmark((void *)key);
			drained = !sh->used && !ML__HELD_ON;
		}
	}
	ml__spin_unlock(&shard_lock[k].lock);
	if (part) {
		/* Part of the weight: the accounts keep their references. */
		for (int i = 0; i < ML__HELD_TASKS && r.acct[i]; i++)
			ml__account_charge(r.acct[i], -r.weight);
		held_moved(-(int64_t)r.weight);
	} else if (r.addr) {
		release(&r);
		held_moved(-(int64_t)r.weight);
	}
	t->busy = busy;
	if (ml__unlikely(drained))
		ml__held_drain_check();
}

void ml__held_note(struct ml__thread *t, void *p, uint64_t s)
{
	struct record r = {.addr = (uintptr_t)p,
	                   .weight = s * (uint64_t)t->sampler.interval,
	                   .stack = t->stack};
	int n = 0;
	for (struct ml__slice *k = t->top; k && n < ML__HELD_TASKS;
	     k = k->outer) {
		struct ml__account *a = ml__account_of(k->task);
		bool dup = false;
		for (int i = 0; i < n; i++)
			dup |= r.acct[i] == a;
		if (a && !dup)
			r.acct[n++] = a;
	}
	if (!n)
		return; /* no task holds it */
	for (int i = 0; i < n; i++) {
		if (!r.acct[i]->batch)
			atomic_fetch_add_explicit(&r.acct[i]->refs, 1,
			                          memory_order_relaxed);
		ml__account_charge(r.acct[i], r.weight);
	}
	struct record stale = {0};
	bool kept = false;
	unsigned k = shard_of(r.addr);
	struct shard *sh = &shards[k];
	/* Busy under the lock, as in ml__held_free. */
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__spin_lock(&shard_lock[k].lock);
	/* A block freed behind our back (the allocator's own free called
	 * directly) whose address came back: its old record goes.  No record
	 * is made once tracking is off: tested under the shard's lock, which
	 * is what lets the last record switch the filter off (tracking.c). */
	bool on = atomic_load_explicit(&ml__held_on, memory_order_acquire);
	struct record *e = on ? find(sh, r.addr) : NULL;
	if (!on) {
		/* Off since the caller looked: not recorded. */
	} else if (e) {
		stale = *e;
		*e = r;
		kept = true;
	} else if ((sh->used + 1) * 2 <= sh->cap || grow(sh)) {
		size_t j = slot_of(sh, r.addr);
		while (sh->table[j].addr)
			j = (j + 1) & (sh->cap - 1);
		sh->table[j] = r;
		sh->used++;
		ml__sampled_mark(p);
		kept = true;
	}
	ml__spin_unlock(&shard_lock[k].lock);
	t->busy = busy;
	if (stale.addr)
		release(&stale);
	if (!kept)
		release(&r); /* no memory for the table: not tracked */
	else
		held_moved((int64_t)r.weight);
}

/* The weight of p's record where the account a is charged with it; 0
 * when p carries none (the filter says so in five instructions) or a
 * is not among its accounts. */
static uint64_t weight_in(const void *p, const struct ml__account *a)
{
	if (!ml__sampled_marked(p))
		return 0;
	uint64_t w = 0;
	unsigned k = shard_of((uintptr_t)p);
	ml__spin_lock(&shard_lock[k].lock);
	const struct record *r = find(&shards[k], (uintptr_t)p);
	for (int i = 0; r && i < ML__HELD_TASKS && r->acct[i]; i++)
		if (r->acct[i] == a)
			w = r->weight;
	ml__spin_unlock(&shard_lock[k].lock);
	return w;
}

uint64_t ml__held_after(const struct ml__thread *t, const struct ml_task *task,
                        uint64_t w)
{
	uint64_t h = ml__held_bytes(task) + w;
	if (ml__likely(!t->replacing))
		return h;
	const struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	uint64_t old = a ? weight_in(t->replacing, a) : 0;
	return h > old ? h - old : 0;
}

uint64_t ml__held_by_stack(const struct ml_task *task, uint64_t *sums)
{
	const struct ml__account *a =
	    task ? atomic_load_explicit(&task->acct, memory_order_acquire)
	         : NULL;
	if (task && !a)
		return 0; /* it never held anything */
	uint64_t total = 0;
	/* One pass, a shard at a time under its lock: frees of sampled
	 * blocks there wait meanwhile, no other allocation does. */
	for (unsigned k = 0; k < SHARDS; k++) {
		const struct shard *sh = &shards[k];
		ml__spin_lock(&shard_lock[k].lock);
		for (size_t i = 0; i < sh->cap; i++) {
			const struct record *r = &sh->table[i];
			bool mine = r->addr && !a;
			for (int j = 0; r->addr && a && j < ML__HELD_TASKS; j++)
				mine |= r->acct[j] == a;
			if (!mine)
				continue;
			sums[r->stack <= ML__NSTACKS ? r->stack : 0] +=
			    r->weight;
			total += r->weight;
		}
		ml__spin_unlock(&shard_lock[k].lock);
	}
	return total;
}

/* Some shard holds a record (each read under its lock: tracking.c). */
static bool records_remain(void)
{
	for (unsigned k = 0; k < SHARDS; k++) {
		ml__spin_lock(&shard_lock[k].lock);
		bool some = shards[k].used != 0;
		ml__spin_unlock(&shard_lock[k].lock);
		if (some)
			return true;
	}
	return false;
}

ML__COLD void ml__held_drain_check(void)
{
	ml__allocator_resolve();
	ml__spin_lock(&ml__meter_switch_lock);
	if (!ML__HELD_ON && !records_remain()) {
		ml__sampled_switch(false);
		atomic_store_explicit(&ml__held_draining, false,
		                      memory_order_relaxed);
	}
	ml__spin_unlock(&ml__meter_switch_lock);
}
