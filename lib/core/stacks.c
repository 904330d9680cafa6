/* Call stacks, captured inside malloc and interned: a sampled allocation's
 * stack becomes a small number that held records (tasks/held.c) and run
 * mode's profile (run/report.c) keep instead of the frames.
 *
 * Two tables in our own mmap'd memory, made at the first stack, their
 * pages touched only as stacks arrive: the stacks themselves, given ids
 * 1..ML__NSTACKS in the order they arrive (so the pages in use are the
 * first ones, however the stacks hash), and an index from a stack's
 * 64-bit hash to its id, with twice as many slots as stacks so that
 * linear probing stays short until the last stack (at half load the
 * longest run of taken slots is far below MAX_PROBES; at three quarters,
 * where one table of slots used to stop, runs of over 64 occur).  Both
 * are claimed with compare-and-swap: no lock, so neither a fork nor a
 * signal can leave one held.  With at most ML__NSTACKS stacks a hash
 * collision is negligible (about 2^-37), so the hash alone identifies a
 * stack.  Stacks that find no room get id 0, which prints as
 * "[unknown]"; nothing is ever removed, since a held record or a profile
 * may name any id for as long as the process runs. */
#define _GNU_SOURCE
#include "core/core.h"

#include <errno.h>
#include <string.h>

#define CAPTURE 80 /* room for our own frames above the caller's */
#define MAX_PROBES 64
#define ID_WAIT 4096 /* reads of a claimed slot's id */

_Atomic unsigned ml__stacks_wanted;

/* The frame source (ml_set_frame_source): read inside malloc. */
ML__LOCK(static, source_lock, ML__RANK_GLOBAL)
static struct ml__fn_pair source;

/* Threads that capture their first stacks at once all find the same
 * range: relaxed atomics, no lock. */
static _Atomic uintptr_t self_start, self_end;
static _Atomic bool self_known;

/* Our own frames are the allocation path: skipped.  Linked into the
 * program itself (tests/api/test-core-alone), the object is the
 * program's, whose frames must stay: nothing is skipped then. */
static void find_self(void)
{
	struct ml__object o;
	if (ml__find_object((uintptr_t)&find_self, &o) == 0 && o.name[0]) {
		atomic_store_explicit(&self_start, o.start,
		                      memory_order_relaxed);
		atomic_store_explicit(&self_end, o.end, memory_order_relaxed);
	}
	atomic_store_explicit(&self_known, true, memory_order_release);
}

uint32_t ml__stack_capture(uintptr_t *ip)
{
	uintptr_t buf[CAPTURE];
	int n = ml__backtrace((void **)buf, CAPTURE);
	bool cut = n == CAPTURE; /* a full buffer may have been cut short */
	if (!atomic_load_explicit(&self_known, memory_order_acquire))
		find_self();
	uintptr_t lo = atomic_load_explicit(&self_start, memory_order_relaxed);
	uintptr_t hi = atomic_load_explicit(&self_end, memory_order_relaxed);
	int i = 0;
	while (i < n && buf[i] >= lo && buf[i] < hi)
		i++;
	/* The program's frames only go to the source: an interpreter's
	 * frames are its to name, ours are not. */
	void *arg;
	ml_frame_source_fn fn =
	    (ml_frame_source_fn)ml__fn_pair_get(&source, &arg);
	const uintptr_t *from = buf;
	uintptr_t work[CAPTURE];
	if (fn && i < n) {
		/* On a copy: a source that fails keeps the stack as captured,
		 * whatever it wrote before it failed. */
		memcpy(work + i, buf + i, (size_t)(n - i) * sizeof *buf);
		int m = fn(work + i, n - i, CAPTURE - i, arg);
		if (m >= 0 && m <= CAPTURE - i) {
			from = work;
			n = i + m;
			cut = cut || n == CAPTURE;
		}
	}
	uint32_t d = 0;
	for (; i < n && d < ML__STACK_DEPTH; i++)
		ip[d++] = from[i];
	if (i < n || cut)
		d |= ML__STACK_TRUNCATED;
	return d;
}

ML_EXPORT int ml_set_frame_source(ml_frame_source_fn fn, void *arg)
{
	ml__spin_lock(&source_lock);
	ml__fn_pair_set(&source, (ml__any_fn)fn, arg);
	ml__spin_unlock(&source_lock);
	return ML_OK;
}

static uint64_t hash_stack(const uintptr_t *ip, uint32_t depth)
{
	uint64_t h = 0x9e3779b97f4a7c15u ^ depth;
	for (uint32_t i = 0; i < (depth & ~ML__STACK_TRUNCATED); i++) {
		h = (h ^ ip[i]) * 0xff51afd7ed558ccdu;
		h ^= h >> 32;
	}
	return h | 1;
}

/* The index's slots: a stack's hash (0: free) and its id (0: not yet
 * given, or no room). */
#define NSLOTS (2 * ML__NSTACKS)
struct slot {
	_Atomic uint64_t key;
	_Atomic uint32_t id;
};

static struct tables {
	struct slot slot[NSLOTS];
	_Atomic uint32_t ids; /* ids given so far, up to ML__NSTACKS */
	struct ml__stack stack[ML__NSTACKS]; /* stack[id - 1] */
} * _Atomic tables;

static struct tables *table(void)
{
	return ml__raw_once((void *_Atomic *)&tables, sizeof(struct tables));
}

uint32_t ml__stack_intern(const uintptr_t *ip, uint32_t depth)
{
	struct tables *t = table();
	uint64_t h = hash_stack(ip, depth);
	for (unsigned p = 0; t && p < MAX_PROBES; p++) {
		struct slot *e = &t->slot[(h + p) & (NSLOTS - 1)];
		uint64_t k =
		    atomic_load_explicit(&e->key, memory_order_acquire);
		if (k == 0 && atomic_compare_exchange_strong(&e->key, &k, h)) {
			/* The slot is ours: the stack gets the next id, if
			 * there is one (a full table keeps the slot, id 0, so
			 * that the stack's later samples stop here too). */
			uint32_t id = atomic_fetch_add_explicit(
			                  &t->ids, 1, memory_order_relaxed) +
			              1;
			if (id > ML__NSTACKS) {
				atomic_store_explicit(&t->ids, ML__NSTACKS,
				                      memory_order_relaxed);
				return 0;
			}
			struct ml__stack *st = &t->stack[id - 1];
			st->depth = depth;
			memcpy(st->ip, ip,
			       (depth & ~ML__STACK_TRUNCATED) * sizeof *ip);
			atomic_store_explicit(&st->ready, 1,
			                      memory_order_release);
			atomic_store_explicit(&e->id, id, memory_order_release);
			return id;
		}
		/* Another thread that claimed the slot may not have given
		 * its id yet (it is copying the frames, a few hundred
		 * instructions): a bounded wait for it, no lock, since the
		 * claimer may be this very thread, interrupted by the signal
		 * handler that runs now.  Still none: this sample's stack is
		 * [unknown], its later ones are not. */
		if (k == h) {
			uint32_t id = 0;
			for (unsigned w = 0; w < ID_WAIT && !id; w++)
				id = atomic_load_explicit(&e->id,
				                          memory_order_acquire);
			return id;
		}
	}
	return 0;
}

uint32_t ml__stack_here(void)
{
	uintptr_t ip[ML__STACK_DEPTH];
	uint32_t depth = ml__stack_capture(ip);
	return ml__stack_intern(ip, depth);
}

const struct ml__stack *ml__stack_get(uint32_t id)
{
	struct tables *t = atomic_load_explicit(&tables, memory_order_acquire);
	if (!t || id == 0 || id > ML__NSTACKS)
		return NULL;
	const struct ml__stack *e = &t->stack[id - 1];
	return atomic_load_explicit(&e->ready, memory_order_acquire) ? e : NULL;
}

ML_EXPORT int ml_set_stack_capture(bool on)
{
	void *ip[4];
	/* No unwinder (ml_capabilities() without ML_CAP_STACKS): nothing
	 * to turn on. */
	if (on && ml__backtrace(ip, 4) <= 0) {
		errno = ENOTSUP;
		return ML_EINVAL;
	}
	if (on)
		atomic_fetch_or(&ml__stacks_wanted, ML__STACKS_API);
	else
		atomic_fetch_and(&ml__stacks_wanted, ~ML__STACKS_API);
	return 0;
}
