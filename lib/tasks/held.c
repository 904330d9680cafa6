/* Held memory: the blocks that carried samples, remembered until they are
 * freed, by whichever thread, so that each task knows an unbiased estimate
 * of the bytes it holds (docs/statistics.md, "Held memory").
 *
 * A block that carried s samples at interval S stands for w = s * S bytes.
 * It is charged to the accounts of the distinct tasks on the allocating
 * thread's stack (the allocator pays), up to ML__HELD_TASKS of them, the
 * innermost first.  The records live in open-addressing tables in our own
 * memory, keyed by the block's address, in SHARDS shards chosen by the
 * address, each under its own lock: threads that sample or free at once
 * meet on one lock only when their blocks hash to the same shard
 * (issue 17).  free finds them through the filter of the layer below
 * (alloc/sampled.c), so that a free of any other block costs five
 * instructions.  Nothing here reads a block or the allocator's header.
 *
 * An account shared by every thread (run mode's process account) would
 * have every thread write its line at every sample and every free of a
 * sampled block: such an account is batched (ml__held_batch), each thread
 * keeping its own change to it until the change reaches the batch. */
#include "tasks/tasks.h"

#include <string.h>

#define ML__HELD_TASKS 4
#define SHARDS 64 /* a power of two */
#define FIRST_CAP 256

struct ml__account {
	_Atomic uint64_t held; /* bytes: the weights of its live records */
	_Atomic uint64_t peak;
	/* The task's own reference (until it ends) plus one per record;
	 * a batched account is never freed and counts no records. */
	_Atomic uint32_t refs;
	/* 0, or the change a thread keeps to itself (bytes, either way)
	 * before adding it to `held`. */
	uint64_t batch;
};

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

ML__POOL(static, account_pool, sizeof(struct ml__account))
ML__LOCKS(static, shard_lock, SHARDS, ML__RANK_HELD)
static struct shard shards[SHARDS];
_Atomic bool ml__held_on;

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

static void account_unref(struct ml__account *a)
{
	if (atomic_fetch_sub_explicit(&a->refs, 1, memory_order_acq_rel) == 1)
		ml__pool_put(&account_pool, a);
}

/* w bytes more (or, modulo 2^64, fewer) in a's estimate, now. */
static inline __attribute__((always_inline)) void
account_add(struct ml__account *a, uint64_t w)
{
	uint64_t h =
	    atomic_fetch_add_explicit(&a->held, w, memory_order_relaxed) + w;
	if ((int64_t)w <= 0)
		return;
	uint64_t pk = atomic_load_explicit(&a->peak, memory_order_relaxed);
	while (h > pk && !atomic_compare_exchange_weak_explicit(
	                     &a->peak, &pk, h, memory_order_relaxed,
	                     memory_order_relaxed))
		;
}

/* This thread's change to one batched account; `done` once the thread
 * has flushed at its exit (what it adds after that goes straight in). */
static ML__TLS struct {
	struct ml__account *acct;
	int64_t delta;
	bool done;
} own;

static void flush(void)
{
	if (own.acct && own.delta)
		account_add(own.acct, (uint64_t)own.delta);
	own.acct = NULL;
	own.delta = 0;
}

void ml__held_thread_exit(void)
{
	flush();
	own.done = true;
}

/* w bytes more (or, modulo 2^64, fewer) held in a: into the thread's own
 * change for a batched account. */
static inline __attribute__((always_inline)) void charge(struct ml__account *a,
                                                         uint64_t w)
{
	if (!a->batch || own.done) {
		account_add(a, w);
		return;
	}
	if (own.acct != a) {
		flush();
		own.acct = a;
	}
	own.delta += (int64_t)w;
	if ((uint64_t)(own.delta < 0 ? -own.delta : own.delta) >= a->batch)
		flush();
}

/* The record's charges go: its accounts hold w bytes less. */
static void release(const struct record *r)
{
	for (int i = 0; i < ML__HELD_TASKS && r->acct[i]; i++) {
		charge(r->acct[i], -r->weight);
		if (!r->acct[i]->batch)
			account_unref(r->acct[i]);
	}
}

static void drain_check(void);

void (*_Atomic ml__held_moved_hook)(int64_t delta);

static inline void held_moved(int64_t delta)
{
	void (*hook)(int64_t) =
	    atomic_load_explicit(&ml__held_moved_hook, memory_order_relaxed);
	if (ml__unlikely(hook != NULL))
		hook(delta);
}

/* The free hook (alloc/alloc.h): p's bucket is marked. */
static void held_free(void *p)
{
	struct record r = {0};
	bool drained = false;
	unsigned k = shard_of((uintptr_t)p);
	struct shard *sh = &shards[k];
	ml__spin_lock(&shard_lock[k].lock);
	struct record *e = find(sh, (uintptr_t)p);
	if (e) {
		r = *e;
		erase(sh, e);
		ml__sampled_unmark(p);
		/* The shard's last record while no task needs tracking: maybe
		 * the process's last (read under the lock: see needs_off). */
		drained = !sh->used && !ML__HELD_ON;
	}
	ml__spin_unlock(&shard_lock[k].lock);
	if (r.addr) {
		release(&r);
		held_moved(-(int64_t)r.weight);
	}
	if (ml__unlikely(drained))
		drain_check();
}

/* Issue 34: a mapping's record (keyed by api/mmap.c's odd key, never a
 * block's address) gives back `weight` of its bytes: part of the mapping
 * went (alloc/ranges.c draws which samples).  The record goes with its
 * last byte.  Called under the ranges' lock, which ranks before ours. */
void ml__held_drop(uintptr_t key, uint64_t weight)
{
	struct record r = {0};
	bool drained = false, part = false;
	unsigned k = shard_of(key);
	struct shard *sh = &shards[k];
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
			charge(r.acct[i], -r.weight);
		held_moved(-(int64_t)r.weight);
	} else if (r.addr) {
		release(&r);
		held_moved(-(int64_t)r.weight);
	}
	if (ml__unlikely(drained))
		drain_check();
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
	n->batch = 0;
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
		if (!r.acct[i]->batch)
			atomic_fetch_add_explicit(&r.acct[i]->refs, 1,
			                          memory_order_relaxed);
		charge(r.acct[i], r.weight);
	}
	struct record stale = {0};
	bool kept = false;
	unsigned k = shard_of(r.addr);
	struct shard *sh = &shards[k];
	ml__spin_lock(&shard_lock[k].lock);
	/* A block freed behind our back (the allocator's own free called
	 * directly) whose address came back: its old record goes.  No record
	 * is made once tracking is off: tested under the shard's lock, which
	 * is what lets the last record switch the filter off (needs_off). */
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
	if (stale.addr)
		release(&stale);
	if (!kept)
		release(&r); /* no memory for the table: not tracked */
	else
		held_moved((int64_t)r.weight);
}

uint64_t ml__held_bytes(const struct ml_task *task)
{
	const struct ml__account *a =
	    atomic_load_explicit(&task->acct, memory_order_acquire);
	if (!a)
		return 0;
	uint64_t h = atomic_load_explicit(&a->held, memory_order_relaxed);
	/* A batched account: this thread's own change too (the others' are
	 * the documented slack). */
	if (own.acct == a)
		h += (uint64_t)own.delta;
	return (int64_t)h < 0 ? 0 : h;
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

bool ml__held_batch(struct ml_task *task, uint64_t batch)
{
	struct ml__account *a = account_of(task);
	if (!a)
		return false;
	a->batch = batch;
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

/* ---- When held tracking runs (issue 26) --------------------------------
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
 *    tail (drain_check).
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
 *    before, so the free sees false and calls drain_check; one that read
 *    it after sees no record there.  Either way the last one out turns
 *    the filter off.
 * needers goes from 0 to 1 and from 1 to 0 under the switch lock only,
 * so that ml__held_on is true whenever a need is held: a task never runs
 * while tracking is off for a moment under it. */
static _Atomic uint32_t needers;
/* Tracking is off, the filter still on: drain_check at the next ticks. */
_Atomic bool ml__held_draining;
#define DRAIN_SAMPLES 64
static ML__TLS uint32_t drain_ticks;

/* Some shard holds a record (each read under its lock: see above). */
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

/* Under the switch lock: tracking off; the filter later, once nothing
 * is recorded (the ticks, or the last record's free: drain_check). */
static void needs_off(void)
{
	atomic_store_explicit(&ml__held_on, false, memory_order_relaxed);
	atomic_store_explicit(&ml__held_draining, true, memory_order_relaxed);
}

static ML__COLD void drain_check(void)
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

void ml__held_drain_tick(void)
{
	if (++drain_ticks % DRAIN_SAMPLES == 0)
		drain_check();
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
		atomic_store_explicit(&ml__sampled_free_hook, held_free,
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
