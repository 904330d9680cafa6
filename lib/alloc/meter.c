/* The global memory meter: live heap bytes, counted as glibc chunk sizes
 * (the usable bytes plus glibc's header word), so that it agrees with
 * glibc's own mallinfo2() accounting and with the memory really taken.
 *
 * It only runs while a global limit is set: then every allocation and free
 * adds its chunk size to a per-thread delta, folded into one atomic total
 * when the thread has allocated or freed ML__METER_BATCH bytes since the last
 * fold, and when the thread exits.  Samples do not fold: a check reads the
 * total plus its own thread's delta (ml__meter_usage), so it is exact up to
 * ML__METER_BATCH per other thread.  A limit set late starts from mallinfo2()'s
 * count of bytes in use, which also holds the blocks parked in glibc's
 * per-thread caches; docs/statistics.md ("The global meter") gives the slack.
 */
#define _GNU_SOURCE
#include "alloc/alloc.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>

_Atomic bool ml__meter_on_;
_Atomic uint64_t ml__global_limit = ML_NO_LIMIT;
_Atomic uint64_t ml__map_floor = ML_NO_LIMIT;
static _Atomic int64_t total;
/* The highest total seen at a fold while the meter ran: as exact as the
 * total (ML__METER_BATCH per other thread), and it costs one comparison
 * per fold, nothing per allocation. */
static _Atomic int64_t peak;
/* Issue 34: the counted bytes of the program's own mappings (mapped.c),
 * exact (moved under the ranges' lock, not batched), part of the heap
 * whether the meter runs or not; and their part of the peak when it was
 * reached. */
_Atomic int64_t ml__meter_mapped_bytes;
#define mapped ml__meter_mapped_bytes
static _Atomic int64_t peak_mapped;
ML__LOCK(, ml__meter_switch_lock, ML__RANK_METER)

/* v: the heap (blocks and mappings), m: its mapped part. */
static void raise_peak(int64_t v, int64_t m)
{
	int64_t p = atomic_load_explicit(&peak, memory_order_relaxed);
	while (v > p)
		if (atomic_compare_exchange_weak_explicit(
		        &peak, &p, v, memory_order_relaxed,
		        memory_order_relaxed)) {
			atomic_store_explicit(&peak_mapped, m,
			                      memory_order_relaxed);
			break;
		}
}

ML__TLS struct ml__meter_local ml__meter_self;

/* Pressure (ml_set_pressure_callback, lib/tasks/global.c): armed while
 * usage is below the threshold; the fold that takes usage to it or beyond
 * sets ml__pressure_pending once, and it re-arms only when usage has
 * fallen below 31/32 of the threshold (so that a heap hovering at the line
 * does not call again at every fold). */
_Atomic uint64_t ml__pressure_bytes; /* 0: no callback */
_Atomic bool ml__pressure_pending;
static _Atomic bool pressure_above;

static void pressure_check(int64_t now)
{
	uint64_t th =
	    atomic_load_explicit(&ml__pressure_bytes, memory_order_relaxed);
	if (ml__likely(th == 0) || now < 0)
		return;
	if ((uint64_t)now >= th) {
		if (!atomic_exchange_explicit(&pressure_above, true,
		                              memory_order_relaxed))
			atomic_store_explicit(&ml__pressure_pending, true,
			                      memory_order_release);
	} else if ((uint64_t)now < th - th / 32) {
		atomic_store_explicit(&pressure_above, false,
		                      memory_order_relaxed);
	}
}

/* Add d to the total: every fold of every kind of thread delta. */
static void fold(int64_t d)
{
	if (!d)
		return;
	/* A sum that does not fit (absurd ml_note_* counts: a single note is
	 * at most INT64_MAX) saturates: a wrapped total would read as an
	 * empty heap.  A CAS costs a fold what the fetch-and-add did when
	 * uncontended. */
	int64_t now, old = atomic_load_explicit(&total, memory_order_relaxed);
	do {
		if (__builtin_add_overflow(old, d, &now))
			now = d > 0 ? INT64_MAX : INT64_MIN;
	} while (!atomic_compare_exchange_weak_explicit(
	    &total, &old, now, memory_order_relaxed, memory_order_relaxed));
	int64_t m = atomic_load_explicit(&mapped, memory_order_relaxed);
	if (d > 0)
		raise_peak(now + m, m);
	pressure_check(now + m);
	/* Issue 27: a shared budget's member publishes (lib/shared), at a
	 * fold of any kind (glibc's countdowns, jemalloc's counters, the
	 * size-query tails, notes). */
	ml__upcall_fold();
}

static void counted_flush(void);

/* Fold this thread's countdowns (glibc's blocks and the notes). */
static void local_flush(void)
{
	struct ml__meter_local *t = &ml__meter_self;
	int64_t d = (int64_t)(t->down - t->up);
	/* Reset before the fold: its hook reads ml__meter_usage, the total
	 * plus this thread's delta, which would count d twice (issue 27: a
	 * 250 MiB block read as 500 by a shared budget's member). */
	t->up = t->down = ML__METER_BATCH;
	fold(d);
}

static bool counted_exiting(void);

void ml__meter_flush(void)
{
	local_flush();
	counted_flush();
	counted_exiting();
}

/* ---- An allocator that counts for us (jemalloc) ------------------------
 *
 * jemalloc keeps two cumulative counters per thread, bytes allocated and
 * bytes freed by it (its usable sizes, what sallocx answers), updated on
 * its own fast paths; their place is found once (underlying.c).  The
 * metered tails then ask jemalloc nothing about the block: after the call
 * they compare one counter with the thread's next fold point (two loads,
 * a compare, a branch) and fold (allocated - freed) since the last fold
 * into the total once it has moved by ML__METER_BATCH either way.  The
 * same slack as glibc's countdowns (docs/statistics.md, "The global
 * meter"): per other thread less than B allocated and B freed unfolded.
 * A thread's counters hold frees of blocks other threads allocated: the
 * total is the sum over threads, exited ones folded at exit
 * (ml__meter_flush). */
static const uint64_t never; /* an unset thread's counters read this */
/* The counters' offsets from the thread pointer (underlying.c). */
static intptr_t off_a, off_d;
struct counted {
	const uint64_t *a, *d;   /* jemalloc's counters, or &never */
	uint64_t next_a, next_d; /* fold when *a or *d reaches these */
	uint64_t pub_a, pub_d;   /* their values at the last fold */
	uint32_t epoch;          /* the meter period pub_* belong to */
	bool exited;             /* past its exit fold: fold every call */
};
/* Not zero-initialised: an unset thread reads never (0) >= next (0) at
 * its first call, which goes to counted_fold and sets it up. */
static ML__TLS struct counted counted = {.a = &never, .d = &never};
/* Bumped each time the meter starts: a thread's pub_* from an earlier
 * period say nothing about the new start figure. */
static _Atomic uint32_t epoch;
_Atomic bool ml__meter_counts; /* the allocator's counters are used */

static void counted_locate(struct counted *c)
{
	uintptr_t tp;
#if defined(__x86_64__)
	__asm__("movq %%fs:0, %0" : "=r"(tp));
#else
	tp = 0; /* never chosen (underlying.c) */
#endif
	c->a = (const uint64_t *)(tp + (uintptr_t)off_a);
	c->d = (const uint64_t *)(tp + (uintptr_t)off_d);
}

/* Fold this thread's counters.  fresh: a block the call just allocated
 * (or NULL): at a thread's first fold in a period the counters are taken
 * as the start, less that block, which came after the start figure. */
static ML__COLD void counted_fold(const void *fresh)
{
	struct counted *c = &counted;
	if (c->a == &never)
		counted_locate(c);
	uint64_t a = *c->a, d = *c->d;
	uint32_t e = atomic_load_explicit(&epoch, memory_order_relaxed);
	if (c->epoch != e || a < c->pub_a || d < c->pub_d) {
		/* The first fold of this period on this thread (or jemalloc
		 * reset the counters of a thread it saw end) */
		c->pub_a = a - (fresh ? ml__chunk_bytes(fresh) : 0);
		c->pub_d = d;
		c->epoch = e;
	}
	int64_t delta = (int64_t)(a - c->pub_a) - (int64_t)(d - c->pub_d);
	/* Settled before the total moves: the fold hook reads
	 * ml__meter_usage (the total plus this thread's delta). */
	c->pub_a = a;
	c->pub_d = d;
	c->next_a = c->exited ? 0 : a + ML__METER_BATCH;
	c->next_d = c->exited ? 0 : d + ML__METER_BATCH;
	if (ML__METER_ON)
		fold(delta);
}

/* The family's other members (calloc, realloc, memalign...): their
 * blocks are in the counters already; a large one must fold now. */
void ml__meter_poll(const void *fresh)
{
	struct counted *c = &counted;
	if (*c->a >= c->next_a || *c->d >= c->next_d)
		counted_fold(fresh);
}

/* This thread's unfolded (allocated - freed), 0 outside a period. */
static int64_t counted_delta(void)
{
	struct counted *c = &counted;
	if (!ML__METER_COUNTS || c->a == &never ||
	    c->epoch != atomic_load_explicit(&epoch, memory_order_relaxed))
		return 0;
	return (int64_t)(*c->a - c->pub_a) - (int64_t)(*c->d - c->pub_d);
}

/* Thread exit and forced folds: what the thread did since its last fold. */
static void counted_flush(void)
{
	if (ML__METER_COUNTS && counted.a != &never &&
	    counted.epoch == atomic_load_explicit(&epoch, memory_order_relaxed))
		counted_fold(NULL);
}

/* At the thread's exit fold: what it frees later (the C library's and
 * other destructors' blocks) is folded at each call, not lost. */
static bool counted_exiting(void)
{
	struct counted *c = &counted;
	if (!ML__METER_COUNTS || c->a == &never)
		return false;
	c->exited = true;
	c->next_a = c->next_d = 0;
	return true;
}

/* Set this thread up at its counters now: the thread that starts the
 * meter (at the start figure), and a thread whose first call in a period
 * frees or resizes a block (before the allocator's call, so that the
 * block it gives back is counted). */
static ML__COLD void counted_begin(void)
{
	struct counted *c = &counted;
	uint32_t e = atomic_load_explicit(&epoch, memory_order_relaxed);
	if (c->exited && c->epoch == e) {
		counted_fold(NULL); /* set up already: next_* stay 0 */
		return;
	}
	if (c->a == &never)
		counted_locate(c);
	c->pub_a = *c->a;
	c->pub_d = *c->d;
	c->next_a = c->exited ? 0 : c->pub_a + ML__METER_BATCH;
	/* The first free folds at once, as glibc's zeroed countdowns do:
	 * a thread that only frees may never allocate through the library,
	 * which would have seen it exit. */
	c->next_d = c->pub_d;
	c->epoch = e;
}

/* realloc, before the call: a thread's first call sets it up. */
void ml__meter_prepare(void)
{
	if (counted.next_d == 0)
		counted_begin();
}

void ml__pressure_rearm(void)
{
	atomic_store_explicit(&pressure_above, false, memory_order_relaxed);
	atomic_store_explicit(&ml__pressure_pending, false,
	                      memory_order_relaxed);
}

void ml__meter_add(int64_t bytes)
{
	struct ml__meter_local *t = &ml__meter_self;
	uint64_t *c = bytes >= 0 ? &t->up : &t->down;
	uint64_t b = bytes >= 0 ? (uint64_t)bytes : -(uint64_t)bytes;
	if (__builtin_sub_overflow(*c, b, c)) {
		/* The delta (down - up, within +-BATCH before) plus a note
		 * near INT64_MAX would not fit an int64_t: fold the delta
		 * first, then the note alone. */
		if (ml__unlikely(b > (uint64_t)(INT64_MAX - ML__METER_BATCH))) {
			*c += b;
			local_flush();
			*c -= b;
		}
		local_flush();
	}
}

uint64_t ml__meter_usage(void)
{
	int64_t m = atomic_load_explicit(&mapped, memory_order_relaxed);
	if (!ML__METER_ON)
		return ml__allocator_in_use() + (uint64_t)(m > 0 ? m : 0);
	int64_t v, d = (int64_t)(ml__meter_self.down - ml__meter_self.up) +
	               counted_delta() + m;
	/* Saturated, as the total is at a fold. */
	if (__builtin_add_overflow(
	        atomic_load_explicit(&total, memory_order_relaxed), d, &v))
		v = d > 0 ? INT64_MAX : INT64_MIN;
	return v < 0 ? 0 : (uint64_t)v;
}

uint64_t ml__meter_peak(void)
{
	uint64_t now = ml__meter_usage();
	int64_t p = atomic_load_explicit(&peak, memory_order_relaxed);
	return p > 0 && (uint64_t)p > now ? (uint64_t)p : now;
}

/* A forked child's heap starts as the parent's heap now, not at its
 * peak; its one thread's delta is folded first. */
static void atfork_child(void)
{
	local_flush();
	counted_flush();
	atomic_store(&peak, atomic_load(&total) + atomic_load(&mapped));
	atomic_store(&peak_mapped, atomic_load(&mapped));
}

__attribute__((constructor(102))) static void meter_init(void)
{
	ml__atfork(NULL, NULL, atfork_child,
	           "a forked child's peak heap starts at its parent's peak");
	/* Also when no heap limit is set: malloc_usable_size must know
	 * (the walk that answers allocates nothing: underlying.c). */
	ml__malloc_in_front();
}

/* ---- malloc and free: the hottest pair ---------------------------------
 *
 * Their last step goes through a pointer: glibc's own function while no
 * global limit is set, a metered one while it is.  An indirect jump costs
 * what the jump through the GOT to glibc would, so the meter costs nothing
 * until it is switched on (ml__meter_switch). */

/* Subtract v from one of the thread's meter countdowns; true on borrow.
 * Inline asm for the same reason as borrow(): one memory-operand
 * subtraction and a branch.  volatile: gcc may drop an asm goto with an
 * output otherwise.  Outputs in asm goto need GCC 11 or clang (configure
 * checks). */
#if defined(__x86_64__) && defined(HAVE_ASM_GOTO_OUTPUT) && \
    !defined(ML_NO_ASM) && defined(__PIC__)
#define METER_SUB(field, v)                                                 \
	({                                                                  \
		bool borrowed_ = false;                                     \
		uint64_t tls_;                                              \
		__asm__ volatile goto(                                      \
		    "movq ml__meter_self@gottpoff(%%rip), %[t]\n\t"         \
		    "subq %[val], %%fs:%c[off](%[t])\n\t"                   \
		    "jb %l[borrow]"                                         \
		    : [t] "=&r"(tls_)                                       \
		    : [val] "r"((uint64_t)(v)), [off] "i"(offsetof(         \
		                                    struct ml__meter_local, \
		                                    field))                 \
		    : "cc", "memory"                                        \
		    : borrow);                                              \
		(void)tls_;                                                 \
		if (0) {                                                    \
		borrow:                                                     \
			borrowed_ = true;                                   \
		}                                                           \
		borrowed_;                                                  \
	})
#else
#define METER_SUB(field, v)                                         \
	__builtin_sub_overflow(ml__meter_self.field, (uint64_t)(v), \
	                       &ml__meter_self.field)
#endif

static ML__COLD void meter_fold(void)
{
	local_flush();
}

static void *malloc_metered(size_t n)
{
	void *p = ml__real.malloc(n);
	if (ml__likely(p != NULL) &&
	    ml__unlikely(METER_SUB(up, ml__chunk_word(p) & ~(size_t)7)))
		meter_fold();
	return p;
}

/* The meter's count of a block freed: glibc's header read in place, or
 * another allocator's size query. */
static inline __attribute__((always_inline)) void uncount(void *p)
{
	if (ml__likely(p != NULL) &&
	    ml__unlikely(METER_SUB(down, ml__chunk_word(p) & ~(size_t)7)))
		meter_fold();
}

static inline __attribute__((always_inline)) void uncount_foreign(void *p)
{
	ml__meter_block(p, -1);
}

static void free_metered(void *p)
{
	uncount(p);
	ml__real.free(p);
}

static void *boot_malloc(size_t n);
static void boot_free(void *p);
/* Until the allocator is known: stubs that find it (underlying.c) and set
 * the tails. */
void *(*ml__malloc_tail)(size_t) = boot_malloc;
void (*ml__free_tail)(void *) = boot_free;

static void *malloc_metered_foreign(size_t n)
{
	void *p = ml__real.malloc(n);
	ml__meter_block(p, 1);
	return p;
}

static void free_metered_foreign(void *p)
{
	uncount_foreign(p);
	ml__real.free(p);
}

/* jemalloc: its counters (above).  The check comes after the call, so
 * that a block's bytes, whatever their size, are folded by the call that
 * moved the counter past the point. */
static void *malloc_counted(size_t n)
{
	void *p = ml__real.malloc(n);
	if (ml__unlikely(*counted.a >= counted.next_a))
		counted_fold(p);
	return p;
}

static inline __attribute__((always_inline)) void recount(void)
{
	if (ml__unlikely(*counted.d >= counted.next_d))
		counted_fold(NULL);
}

/* A thread's first free (next_d still 0) sets it up before jemalloc
 * counts the block, which is then counted: the one test a free adds
 * before the call. */
static ML__COLD void free_counted_first(void *p)
{
	counted_begin();
	ml__real.free(p);
	recount();
}

static void free_counted(void *p)
{
	if (ml__unlikely(counted.next_d == 0)) {
		free_counted_first(p); /* p is not kept across the call */
		return;
	}
	ml__real.free(p);
	recount();
}

/* tcmalloc, mimalloc and others: one size query per block, the
 * allocator's own function called directly (ml__allocator_sizer), the
 * countdowns as glibc's.  The query is what these tails cost: neither
 * keeps per-thread counters (docs/performance.md). */
static struct ml__sizer sizer;

#define SIZED_TAILS(suffix, size)                                         \
	static void *malloc_##suffix(size_t n)                            \
	{                                                                 \
		void *p = ml__real.malloc(n);                             \
		if (ml__likely(p != NULL) &&                              \
		    ml__unlikely(METER_SUB(up, size(p))))                 \
			meter_fold();                                     \
		return p;                                                 \
	}                                                                 \
	static inline                                                     \
	    __attribute__((always_inline)) void uncount_##suffix(void *p) \
	{                                                                 \
		if (ml__likely(p != NULL) &&                              \
		    ml__unlikely(METER_SUB(down, size(p))))               \
			meter_fold();                                     \
	}                                                                 \
	static void free_##suffix(void *p)                                \
	{                                                                 \
		uncount_##suffix(p);                                      \
		ml__real.free(p);                                         \
	}
#define MEMBER_SIZE(p) sizer.member(sizer.self, (p))
#define QUERY_SIZE(p) sizer.query(p)
SIZED_TAILS(member, MEMBER_SIZE)
SIZED_TAILS(query, QUERY_SIZE)

/* ---- free through the sampled-block filter ---------------------------
 *
 * While blocks are recorded (ml__sampled_switch), free tests the filter
 * before the allocator's free (ml__sampled_lose, alloc.h). */

/* A marked bit was set after the hook was stored, but nothing orders
 * this thread's read of the bit before its read of the hook (the bits
 * are relaxed, and the threads that mark blocks read ml__held_on
 * relaxed): on a weakly ordered CPU the hook can still read NULL here.
 * The store is already made, so it shows up: wait for it rather than
 * call NULL or skip the record. */
ML__COLD void ml__sampled_lost(void *p)
{
	/* free(NULL) tests bucket 0, which a recorded block at an address
	 * whose bits 6 to 27 are 0 marks (tcmalloc's spans start at such
	 * addresses): the hook would look for a record of address 0, find an
	 * empty slot (0 is what marks one) and erase it, a record count one
	 * short and the probe sequences around it broken. */
	if (ml__unlikely(p == NULL))
		return;
	void (*hook)(void *);
	while (!(hook = atomic_load_explicit(&ml__upcalls.sampled_free,
	                                     memory_order_acquire)))
		;
	/* Inside free, which never changes errno. */
	int e = errno;
	hook(p);
	errno = e;
}

/* The meter counts the block freed first, then its record goes, then
 * the allocator gets it back: the global limit's choice reads held
 * estimates before usage (tasks/global.c), so usage must never lag a
 * victim's freeing; and a record must go before its address can be
 * handed out again.
 *
 * Every call out of the hot path is a tail call (a marked bucket, a meter
 * fold), so that the filtered tails set up no stack frame: with the fold
 * merging back into the filter, gcc gave free_sampled_metered a frame,
 * two instructions on every free (issue 26). */
static ML__COLD void free_lost(void *p)
{
	ml__sampled_lost(p);
	ml__real.free(p);
}

static inline __attribute__((always_inline)) void free_filtered(void *p)
{
	if (ml__sampled_marked(p)) {
		free_lost(p);
		return;
	}
	ml__real.free(p);
}

static void free_sampled(void *p)
{
	free_filtered(p);
}

static ML__COLD void free_sampled_folded(void *p)
{
	meter_fold();
	free_filtered(p);
}

static void free_sampled_metered(void *p)
{
	if (ml__likely(p != NULL) &&
	    ml__unlikely(METER_SUB(down, ml__chunk_word(p) & ~(size_t)7))) {
		free_sampled_folded(p);
		return;
	}
	free_filtered(p);
}

static void free_sampled_metered_foreign(void *p)
{
	uncount_foreign(p);
	free_filtered(p);
}

static void free_sampled_member(void *p)
{
	uncount_member(p);
	free_filtered(p);
}

static void free_sampled_query(void *p)
{
	uncount_query(p);
	free_filtered(p);
}

/* The counters move inside the allocator's free: counted after it. */
static void free_sampled_counted(void *p)
{
	if (ml__unlikely(counted.next_d == 0))
		counted_begin();
	ml__sampled_lose(p);
	ml__real.free(p);
	recount();
}

static bool meter_tails; /* the metered tails are chosen */
_Atomic uint8_t ml__watch;

/* Point the tails at the functions the meter's and the filter's states
 * call for. */
static void tails_update(void)
{
#ifdef ML_FAULT_INJECTION
	/* MEMLIMITS_FAULT may wrap the allocator's functions later. */
	void *(*plain)(size_t) = ml__malloc_plain;
#else
	void *(*plain)(size_t) = ml__real.malloc;
#endif
	bool foreign = ml__allocator_foreign();
	bool s = atomic_load_explicit(&ml__sampled_on, memory_order_relaxed);
	void *(*m)(size_t) = plain;
	void (*f)(void *) = s ? free_sampled : ml__real.free;
	if (meter_tails && ML__METER_COUNTS) {
		m = malloc_counted;
		f = s ? free_sampled_counted : free_counted;
	} else if (meter_tails && foreign && sizer.member) {
		m = malloc_member;
		f = s ? free_sampled_member : free_member;
	} else if (meter_tails && foreign && sizer.query) {
		m = malloc_query;
		f = s ? free_sampled_query : free_query;
	} else if (meter_tails) {
		m = foreign ? malloc_metered_foreign : malloc_metered;
		if (foreign)
			f = s ? free_sampled_metered_foreign
			      : free_metered_foreign;
		else
			f = s ? free_sampled_metered : free_metered;
	}
	__atomic_store_n(&ml__malloc_tail, m, __ATOMIC_RELEASE);
	__atomic_store_n(&ml__free_tail, f, __ATOMIC_RELEASE);
	atomic_store_explicit(&ml__watch,
	                      (uint8_t)((meter_tails ? ML__WATCH_METER : 0) |
	                                (s ? ML__WATCH_SAMPLED : 0)),
	                      memory_order_relaxed);
}

void ml__meter_switch(bool on)
{
	ml__allocator_resolve();
	meter_tails = on;
	tails_update();
}

static void boot_tails(void)
{
	ml__allocator_resolve();
	ml__spin_lock(&ml__meter_switch_lock);
	tails_update();
	ml__spin_unlock(&ml__meter_switch_lock);
}

static void *boot_malloc(size_t n)
{
	boot_tails();
	return ml__malloc_tail(n);
}

static void boot_free(void *p)
{
	boot_tails();
	ml__free_tail(p);
}

void ml__sampled_switch(bool on)
{
	if (atomic_load_explicit(&ml__sampled_on, memory_order_relaxed) == on)
		return;
	atomic_store_explicit(&ml__sampled_on, on, memory_order_relaxed);
	tails_update();
}

/* How the metered tails will count, chosen once, before the first limit
 * takes the lock (mallctl and tcmalloc's instance() may allocate). */
static void meter_choose(void)
{
	static _Atomic bool chosen;
	if (atomic_load(&chosen))
		return;
	ml__allocator_resolve();
	ml__allocator_sizer(&sizer);
	if (ml__allocator_thread_counters(&off_a, &off_d))
		atomic_store(&ml__meter_counts, true);
	atomic_store(&chosen, true);
}

/* Issue 27: the meter also runs, without a limit, while a shared
 * budget's member keeps it (ml__meter_keep; under the switch lock). */
static bool meter_kept;
static void meter_run(bool on);

void ml__meter_set_limit(uint64_t bytes)
{
	if (bytes != ML_NO_LIMIT)
		meter_choose();
	ml__spin_lock(&ml__meter_switch_lock);
	atomic_store(&ml__global_limit, bytes);
	meter_run(bytes != ML_NO_LIMIT || meter_kept);
	ml__spin_unlock(&ml__meter_switch_lock);
}

void ml__meter_keep(bool keep)
{
	ml__spin_lock(&ml__meter_switch_lock);
	meter_kept = keep;
	meter_run(keep || atomic_load(&ml__global_limit) != ML_NO_LIMIT);
	ml__spin_unlock(&ml__meter_switch_lock);
}

static void meter_run(bool on)
{
	if (!on) {
		ml__meter_switch(false);
		atomic_store_explicit(&ml__meter_on_, false,
		                      memory_order_relaxed);
	} else if (!ML__METER_ON) {
		/* Count from now on, starting from glibc's own figure.  Our
		 * own delta is stale from an earlier period: drop it. */
		ml__meter_self.up = ml__meter_self.down = ML__METER_BATCH;
		atomic_fetch_add(&epoch, 1);
		atomic_store_explicit(&ml__meter_on_, true,
		                      memory_order_relaxed);
		ml__meter_switch(true);
		atomic_store(&total, (int64_t)ml__allocator_in_use());
		if (ML__METER_COUNTS) {
			counted_begin();
			counted.next_d += ML__METER_BATCH;
		}
		raise_peak(atomic_load(&total) + atomic_load(&mapped),
		           atomic_load(&mapped));
	}
}

void ml__meter_mapped_on(int64_t m, int64_t d)
{
	/* What a fold does, for bytes that never pass a countdown. */
	int64_t now = atomic_load_explicit(&total, memory_order_relaxed) + m;
	if (d > 0)
		raise_peak(now, m);
	pressure_check(now);
	ml__upcall_fold(); /* mmap's caller sees the system call's errno */
}

uint64_t ml__meter_mapped_now(void)
{
	int64_t m = atomic_load_explicit(&mapped, memory_order_relaxed);
	return m > 0 ? (uint64_t)m : 0;
}

void ml__meter_peak_split(uint64_t *blocks, uint64_t *mapped_part)
{
	uint64_t p = ml__meter_peak();
	int64_t pk = atomic_load_explicit(&peak, memory_order_relaxed);
	int64_t m =
	    (uint64_t)(pk > 0 ? pk : 0) == p
	        ? atomic_load_explicit(&peak_mapped, memory_order_relaxed)
	        : (int64_t)ml__meter_mapped_now();
	uint64_t mm = m > 0 ? (uint64_t)m : 0;
	if (mm > p)
		mm = p;
	*mapped_part = mm;
	*blocks = p - mm;
}

ML_EXPORT uint64_t ml_global_memory_usage(void)
{
	return ml__meter_usage();
}
