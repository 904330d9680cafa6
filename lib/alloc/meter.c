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

#include <malloc.h>
#include <pthread.h>
#include <string.h>

_Atomic bool ml__meter_on_;
_Atomic uint64_t ml__global_limit = ML_NO_LIMIT;
static _Atomic int64_t total;
/* The highest total seen at a fold while the meter ran: as exact as the
 * total (ML__METER_BATCH per other thread), and it costs one comparison
 * per fold, nothing per allocation. */
static _Atomic int64_t peak;
ML__LOCK(, ml__meter_switch_lock, ML__RANK_METER)

static void raise_peak(int64_t v)
{
	int64_t p = atomic_load_explicit(&peak, memory_order_relaxed);
	while (v > p &&
	       !atomic_compare_exchange_weak_explicit(
	           &peak, &p, v, memory_order_relaxed, memory_order_relaxed))
		;
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

void ml__meter_flush(void)
{
	struct ml__meter_local *t = &ml__meter_self;
	int64_t d = (int64_t)(t->down - t->up), now;
	if (d) {
		/* A sum that does not fit (absurd ml_note_* counts: a single
		 * note is at most INT64_MAX) saturates: a wrapped total would
		 * read as an empty heap.  A CAS costs a fold what the
		 * fetch-and-add did when uncontended. */
		int64_t old =
		    atomic_load_explicit(&total, memory_order_relaxed);
		do {
			if (__builtin_add_overflow(old, d, &now))
				now = d > 0 ? INT64_MAX : INT64_MIN;
		} while (!atomic_compare_exchange_weak_explicit(
		    &total, &old, now, memory_order_relaxed,
		    memory_order_relaxed));
		if (d > 0)
			raise_peak(now);
		pressure_check(now);
	}
	t->up = t->down = ML__METER_BATCH;
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
			ml__meter_flush();
			*c -= b;
		}
		ml__meter_flush();
	}
}

uint64_t ml__meter_usage(void)
{
	if (!ML__METER_ON)
		return ml__allocator_in_use();
	int64_t v, d = (int64_t)(ml__meter_self.down - ml__meter_self.up);
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
	ml__meter_flush();
	atomic_store(&peak, atomic_load(&total));
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
	ml__meter_flush();
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

/* ---- free through the sampled-block filter ---------------------------
 *
 * Once blocks are recorded (ml__sampled_switch_on), free tests the filter
 * before the allocator's free (ml__sampled_lose, alloc.h). */

/* A marked bit was set after the hook was stored, but nothing orders
 * this thread's read of the bit before its read of the hook (the bits
 * are relaxed, and the threads that mark blocks read ml__held_on
 * relaxed): on a weakly ordered CPU the hook can still read NULL here.
 * The store is already made, so it shows up: wait for it rather than
 * call NULL or skip the record. */
ML__COLD void ml__sampled_lost(void *p)
{
	void (*hook)(void *);
	while (!(hook = atomic_load_explicit(&ml__sampled_free_hook,
	                                     memory_order_acquire)))
		;
	hook(p);
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
	if (meter_tails) {
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

void ml__meter_set_limit(uint64_t bytes)
{
	ml__spin_lock(&ml__meter_switch_lock);
	atomic_store(&ml__global_limit, bytes);
	if (bytes == ML_NO_LIMIT) {
		ml__meter_switch(false);
		atomic_store_explicit(&ml__meter_on_, false,
		                      memory_order_relaxed);
	} else if (!ML__METER_ON) {
		/* Count from now on, starting from glibc's own figure.  Our
		 * own delta is stale from an earlier period: drop it. */
		ml__meter_self.up = ml__meter_self.down = ML__METER_BATCH;
		atomic_store_explicit(&ml__meter_on_, true,
		                      memory_order_relaxed);
		ml__meter_switch(true);
		atomic_store(&total, (int64_t)ml__allocator_in_use());
		raise_peak(atomic_load(&total));
	}
	ml__spin_unlock(&ml__meter_switch_lock);
}

ML_EXPORT uint64_t ml_global_memory_usage(void)
{
	return ml__meter_usage();
}
