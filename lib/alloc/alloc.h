/* Layer 3, the allocator underneath and the heap meter (docs/internals.md,
 * "Layers").  The allocator is the one after the library in the lookup
 * order: glibc's (through libc's own __libc_* entry points), jemalloc,
 * tcmalloc, mimalloc or another exporting the malloc family (struct
 * ml__real below); the meter only counts the bytes its blocks take.
 * Neither knows of samples or tasks.  Never installed. */
#ifndef ML_ALLOC_H
#define ML_ALLOC_H

#include "util/util.h"

#include <errno.h>
#include <string.h>

#pragma GCC visibility push(hidden)

/* ---- The upward hooks: one table (upcalls.c) --------------------------
 *
 * The five events of the layers below that a layer above acts on, each
 * set by that layer (an atomic store; NULL: none) and called through the
 * inline callers below, which skip NULL and keep errno (the malloc and
 * mmap families keep it unless they fail).  Declared here, in the lowest
 * layer that calls through it: lib/layers.txt lets nothing here name a
 * higher layer.  docs/internals.md, section 12, "The hook table", lists
 * for each entry who sets it, who calls it and the locks held then. */
struct ml__upcalls {
	/* The meter folded a delta into its total (meter.c: a thread's
	 * countdowns, ml__meter_mapped_on for mappings).  Set by lib/shared
	 * while the process is a member of a shared budget (it republishes
	 * the process's usage). */
	void (*_Atomic fold)(void);
	/* free or realloc met a block whose filter bucket is marked, before
	 * the allocator frees it (meter.c, ml__sampled_lost).  Set once by
	 * the tasks layer (tracking.c: ml__held_free), with a release store
	 * before the filter is switched on and any bit set; read with
	 * acquire. */
	void (*_Atomic sampled_free)(void *p);
	/* weight bytes of the held record `key` stop counting as the ranges
	 * give samples back (ranges.c's give_back).  Set by api/mmap.c at
	 * start (ml__held_drop). */
	void (*_Atomic mapped_drop)(uintptr_t key, uint64_t weight);
	/* A sampled block's weight was recorded (+) or its record went (-)
	 * (tasks/held.c), after the accounts have it.  Set by lib/shared
	 * (republish the largest task's estimate). */
	void (*_Atomic held_moved)(int64_t delta);
	/* A safe point (tasks.h, ml__pressure_check: outside any allocation
	 * of the program's).  Set by lib/shared (carry out a stop request
	 * that names this process). */
	void (*_Atomic safe_point)(void);
};
extern struct ml__upcalls ml__upcalls;

static inline void ml__upcall_fold(void)
{
	void (*fn)(void) =
	    atomic_load_explicit(&ml__upcalls.fold, memory_order_relaxed);
	if (ml__unlikely(fn != NULL)) {
		int e = errno; /* the hook may reach kill(2), /proc */
		fn();
		errno = e;
	}
}

static inline void ml__upcall_mapped_drop(uintptr_t key, uint64_t weight)
{
	void (*fn)(uintptr_t, uint64_t) = atomic_load_explicit(
	    &ml__upcalls.mapped_drop, memory_order_acquire);
	if (fn) {
		int e = errno;
		fn(key, weight);
		errno = e;
	}
}

static inline void ml__upcall_held_moved(int64_t delta)
{
	void (*fn)(int64_t) =
	    atomic_load_explicit(&ml__upcalls.held_moved, memory_order_relaxed);
	if (ml__unlikely(fn != NULL)) {
		int e = errno;
		fn(delta);
		errno = e;
	}
}

static inline void ml__upcall_safe_point(void)
{
	void (*fn)(void) =
	    atomic_load_explicit(&ml__upcalls.safe_point, memory_order_relaxed);
	if (ml__unlikely(fn != NULL)) {
		int e = errno;
		fn();
		errno = e;
	}
}

/* ---- The allocator underneath (underlying.c) --------------------------
 *
 * The allocator after the library in the lookup order (glibc's, jemalloc,
 * tcmalloc, mimalloc or another exporting the family), found at the first
 * call through this table, before anything is forwarded.  Every
 * allocating call into it goes through the table: its entry points, or in
 * a build configured with --enable-fault-injection the wrappers
 * MEMLIMITS_FAULT=libc:N swaps in (tests only). */
struct ml__real {
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*reallocarray)(void *, size_t, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	void *(*aligned_alloc)(size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void (*free)(void *);
	/* The block size query: NULL for glibc's (its chunk header). */
	size_t (*usable)(void *);
};
extern struct ml__real ml__real;
/* Find the allocator now (idempotent; allocates nothing). */
void ml__allocator_resolve(void);
/* "glibc", "jemalloc", "tcmalloc", "mimalloc" or "other". */
const char *ml__allocator_kind(void);
/* Its object's name and address range ([start, end): 0s for glibc's when
 * not found, e.g. static). */
const char *ml__allocator_object(uintptr_t *start, uintptr_t *end);
/* The allocator after ours lacks what forwarding needs (free, calloc,
 * realloc, an aligned allocation or a size query): glibc's is used. */
bool ml__allocator_unusable(void);
/* The bytes it says are in use (the meter's start), 0 if it cannot say. */
uint64_t ml__allocator_in_use(void);
/* ml__real.malloc as a plain function (a tail the meter can switch to). */
void *ml__malloc_plain(size_t n);
/* Every call into the allocator fails with probability 1/every. */
void ml__fault_libc(uint64_t every);
/* The bytes a block of ours takes: glibc's chunk size (the usable bytes
 * plus its header word), another allocator's usable size, or under
 * valgrind its usable size plus one word. */
size_t ml__chunk_bytes(const void *p);
/* glibc's chunk header: the size word just before the block, its low three
 * bits flags (bit 1: mmapped). */
static inline size_t ml__chunk_word(const void *p)
{
	return ((const size_t *)p)[-1];
}
/* The metered tails' size query (meter.c), set by ml__allocator_sizer:
 * member(self, p) (tcmalloc's own member, skipping its two wrappers),
 * else query(p) (the allocator's exported query), else neither (glibc's
 * header, or valgrind's pad: ml__chunk_bytes). */
struct ml__sizer {
	size_t (*query)(void *p);
	size_t (*member)(void *self, const void *p);
	void *self;
};
void ml__allocator_sizer(struct ml__sizer *s);
/* Where the allocator keeps per-thread cumulative counters of the bytes
 * each thread allocated and freed (jemalloc's): their offsets from the
 * thread pointer, the same in every thread; false where it keeps none or
 * they are not there.  Allocates (jemalloc's mallctl): call it outside
 * the allocator, on a live thread. */
bool ml__allocator_thread_counters(intptr_t *allocated, intptr_t *deallocated);
/* malloc_usable_size of a block of ours. */
size_t ml__usable_size(void *p);
/* Block sizes do not come from glibc's headers (another allocator, or
 * valgrind's replacement of glibc's, found with the allocator). */
bool ml__allocator_foreign(void);
/* The object whose malloc the program calls when it is not ours (no
 * allocation reaches the library, and the meter sees nothing), or NULL.
 * Found with the allocator, allocating nothing. */
const char *ml__malloc_in_front(void);
/* Would the allocator refuse a request of n bytes outright (its size)?
 * Tried on glibc itself; costs one mmap/munmap pair. */
bool ml__refused_anyway(size_t n);
/* Requests below this size are never refused for their size: at least
 * glibc's largest mmap threshold. */
#define ML__PROBE_MIN ((size_t)4 * 1024 * 1024 * sizeof(long))

/* ---- The meter (meter.c) ---------------------------------------------- */

/* Nonzero while the meter counts every allocation (a global limit is set).
 * malloc and free do not read it: they jump through the tails instead. */
extern _Atomic bool ml__meter_on_;
/* A relaxed load: a plain byte read on x86, and no data race for TSan. */
#define ML__METER_ON atomic_load_explicit(&ml__meter_on_, memory_order_relaxed)
extern _Atomic uint64_t ml__global_limit;
#define ML__METER_BATCH ((int64_t)32768)
/* Bytes this thread may still allocate / free before its delta
 * (= down - up) must be folded into the global total.  Two countdowns, so
 * that malloc and free each need one subtraction and one branch, like the
 * sampler.  Its own initial-exec TLS block: the meter knows no thread
 * state above it. */
struct ml__meter_local {
	uint64_t up, down;
	/* The old block's bytes while a realloc's slow path decides
	 * (api/interpose.c sets it, tasks/slow.c takes it): a limit checks
	 * the heap as it will be after the realloc, without the block that
	 * it replaces. */
	uint64_t resizing;
};
extern ML__TLS struct ml__meter_local ml__meter_self;
void ml__meter_add(int64_t bytes);
/* Fold this thread's delta into the total: at its exit (what it frees
 * later is then folded call by call where the allocator counts). */
void ml__meter_flush(void);
uint64_t ml__meter_usage(void);
/* The highest usage the meter has seen (with the meter on only). */
uint64_t ml__meter_peak(void);
/* Where malloc and free end: the allocator's own functions while the
 * meter is off, metered ones while it is on (ml__meter_switch). */
extern void *(*ml__malloc_tail)(size_t);
extern void (*ml__free_tail)(void *);
/* Set the global limit (ML_NO_LIMIT: none): the meter runs while one is
 * set. */
void ml__meter_set_limit(uint64_t bytes);
/* Issue 27, shared budgets (lib/shared): keep the meter running without
 * a limit (true) or no longer (false); the table's fold entry is called
 * after every fold, on the folding thread, inside malloc. */
void ml__meter_keep(bool keep);
/* Memory pressure: ml__pressure_bytes is the threshold (0: none); a fold
 * that takes usage to it sets ml__pressure_pending once per upward
 * crossing (damped: see meter.c).  The layer above calls the user's
 * function at its next safe point. */
extern _Atomic uint64_t ml__pressure_bytes;
extern _Atomic bool ml__pressure_pending;
void ml__pressure_rearm(void);
/* Route malloc and free through the metered tails, or not. */
void ml__meter_switch(bool on);
/* The allocator's per-thread counters count every block (jemalloc's,
 * meter.c): the family's members then only fold when a counter has
 * moved far enough (fresh: the block just allocated, or NULL). */
extern _Atomic bool ml__meter_counts;
#define ML__METER_COUNTS \
	atomic_load_explicit(&ml__meter_counts, memory_order_relaxed)
void ml__meter_poll(const void *fresh);
/* Count a block of ours (sign +1) or its release (-1); NULL is nothing. */
static inline void ml__meter_block(const void *p, int sign)
{
	if (ML__METER_COUNTS)
		ml__meter_poll(sign > 0 ? p : NULL);
	else if (p)
		ml__meter_add(sign * (int64_t)ml__chunk_bytes(p));
}
/* realloc: the old block's bytes before the call, and the settlement
 * after it (q: the new block; freed: realloc(p, 0) freed p). */
void ml__meter_prepare(void);
static inline int64_t ml__meter_resize_old(const void *p)
{
	if (ML__METER_COUNTS) {
		ml__meter_prepare();
		return 0;
	}
	return p ? (int64_t)ml__chunk_bytes(p) : 0;
}
static inline void ml__meter_resized(const void *q, int64_t old, bool freed)
{
	if (ML__METER_COUNTS)
		ml__meter_poll(q);
	else if (q)
		ml__meter_add((int64_t)ml__chunk_bytes(q) - old);
	else if (freed)
		ml__meter_add(-old);
}
extern struct ml__lock ml__meter_switch_lock;

/* ---- Sampled blocks (sampled.c) ---------------------------------------
 *
 * The layer above remembers the blocks that carried samples (held memory,
 * lib/tasks/held.c); free must recognise them without reading the block
 * or the allocator's header (a user's data must never forge a record, and
 * the allocator may not be glibc's).  A filter over block addresses says
 * "maybe recorded": one bit per bucket of addresses, set while some
 * recorded block starts in the bucket.  A bucket is 64 bytes (bits 6-27
 * of the address, so 2^22 buckets and a 512 KiB bitmap; addresses 256 MiB
 * apart share one): at most a block or two start in one, so an unsampled
 * block's free finds its bit set only when a sampled block is its
 * neighbour.  (Page-sized buckets sent 44 % of all frees to the lookup at
 * S = 4096 with 800-byte blocks: a page held a sampled block a third of
 * the time; issue 17.)  A set bit sends the free to the hook, which looks
 * the address up; a clear bit costs free five instructions
 * (docs/internals.md, §9). */
#define ML__SAMPLED_SHIFT 6
#define ML__SAMPLED_BUCKETS (1u << 22)
extern uint64_t ml__sampled_bits[ML__SAMPLED_BUCKETS / 64];
static inline uint32_t ml__sampled_bucket(const void *p)
{
	return (uint32_t)((uintptr_t)p >> ML__SAMPLED_SHIFT) &
	       (ML__SAMPLED_BUCKETS - 1);
}
static inline bool ml__sampled_maybe(const void *p)
{
	uint32_t b = ml__sampled_bucket(p);
	return (ml__sampled_bits[b / 64] >> (b % 64)) & 1;
}
/* A recorded block starts at p / no longer does (under the caller's
 * lock: counts per bucket keep the bit while others remain). */
void ml__sampled_mark(const void *p);
void ml__sampled_unmark(const void *p);
/* free and realloc call ml__upcalls.sampled_free (through
 * ml__sampled_lose) for a block whose bucket is marked, before the
 * allocator frees it: read with acquire, on the marked path only (a
 * plain load on x86).  The hook's way in: out of line. */
void ml__sampled_lost(void *p);
/* A block goes away (free, or realloc's old block): the one way a sampled
 * block's record is let go.  Five instructions on x86-64 (copy, shift,
 * mask, bit test against the bitmap, branch) unless the bucket is
 * marked; the caller tests that the filter is on (the free tails that
 * call this are chosen only then: meter.c; realloc tests ML__WATCH). */
static inline __attribute__((always_inline)) bool
ml__sampled_marked(const void *p)
{
#if defined(__x86_64__) && defined(HAVE_ASM_GOTO) && !defined(ML_NO_ASM) && \
    defined(__PIC__)
	__asm__ goto("movl %k0, %%eax\n\t"
	             "shrl %[shift], %%eax\n\t"
	             "andl %[mask], %%eax\n\t"
	             "btl %%eax, ml__sampled_bits(%%rip)\n\t"
	             "jc %l[hit]"
	             :
	             : "r"(p), [shift] "i"(ML__SAMPLED_SHIFT),
	               [mask] "i"(ML__SAMPLED_BUCKETS - 1)
	             : "rax", "cc", "memory"
	             : hit);
	return false;
hit:
	return true;
#else
	return ml__unlikely(ml__sampled_maybe(p));
#endif
}
static inline __attribute__((always_inline)) void ml__sampled_lose(void *p)
{
	if (ml__sampled_marked(p))
		ml__sampled_lost(p);
}
/* What realloc must take care of, in one byte it tests on its fast path:
 * ML__WATCH_METER (the metered tails are on), ML__WATCH_SAMPLED (the
 * filter is on). */
enum { ML__WATCH_METER = 1, ML__WATCH_SAMPLED = 2 };
extern _Atomic uint8_t ml__watch;
#define ML__WATCH atomic_load_explicit(&ml__watch, memory_order_relaxed)
/* Route free (and realloc's old block) through the filter, or no longer.
 * The caller holds ml__meter_switch_lock (after ml__allocator_resolve)
 * and switches it off only when no block is recorded and none can be
 * until it switches it on again (tasks/held.c says why that is safe
 * with frees in flight).  ml__sampled_on changes under that lock only. */
void ml__sampled_switch(bool on);
extern _Atomic bool ml__sampled_on;

/* ---- Mappings the program makes itself (ranges.c, mapped.c) -----------
 *
 * Private, anonymous mappings made through the interposed mmap family
 * (api/mmap.c), as per-range records (ranges.c): COUNTED while writable,
 * RESERVED while not (a reservation, counted once made writable).  Their
 * counted bytes are heap for the meter (ml__meter_mapped). */
enum { ML__RANGE_RESERVED = 1, ML__RANGE_COUNTED = 2 };
struct ml__range {
	uintptr_t start, end; /* page-aligned, start < end */
	uintptr_t key;        /* its samples' held record (tasks/held.c), 0 */
	uint64_t samples;     /* the samples its bytes carry */
	uint64_t unit;        /* bytes per sample (the interval then) */
	uint8_t state;        /* ML__RANGE_* */
	/* COUNTED, made not writable since (issue 41: it stays counted;
	 * MADV_DONTNEED or MADV_FREE then gives it back). */
	uint8_t ro;
	/* An unmap in flight claimed it (its ticket, 0: none): the unmap's
	 * settle removes only what it claimed (mapped.c). */
	uint32_t op;
};
/* The records lie in one array with free slots on both sides (a deque):
 * r is the first record in use, `front` slots free before it, `cap`
 * slots from it to the array's end.  A mapping above all others appends,
 * one below them all (the kernel's top-down placement) prepends: both
 * O(1), and so are their unmaps; elsewhere the shorter side moves. */
struct ml__ranges {
	struct ml__range *r; /* n records in use, sorted by start */
	size_t n, cap;       /* cap: slots from r on (n <= cap) */
	size_t front;        /* free slots before r */
	uint64_t counted;    /* bytes of COUNTED records */
	uint64_t lost;       /* pieces that found no record (full array) */
	uint64_t released;   /* samples given back, all told */
	uint64_t rng;        /* splitmix64 state for the cuts' binomials */
	/* Samples stop being held: weight = samples x unit. */
	void (*drop)(void *ctx, uintptr_t key, uint64_t weight);
	void *ctx;
};
/* [a, b) is now one record of `state` (0: nothing, an unmap), whatever
 * was tracked there before; a COUNTED one carries s samples of key.
 * false when nothing was recorded (state 0, or a full array: the caller
 * gives the samples back). */
bool ml__ranges_put(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                    unsigned state, uintptr_t key, uint64_t s, uint64_t unit);
/* mprotect: `state` COUNTED (writable): the RESERVED bytes of [a, b)
 * become COUNTED, sharing s samples of key by size, and COUNTED ones are
 * writable again; RESERVED (not writable): COUNTED bytes stay COUNTED,
 * marked `ro` (counted memory stays counted whatever its protection:
 * issue 41).  Returns the samples no piece took (all s when no byte
 * changed state). */
uint64_t ml__ranges_protect(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                            unsigned state, uintptr_t key, uint64_t s,
                            uint64_t unit);
/* An unmap in flight (mapped.c): the records of [a, b) are claimed with
 * ticket op (cut at a and b); ml__ranges_unclaim removes the records of
 * [a, b) still claimed with op (`drop`: the system call succeeded) or
 * clears their claim. */
void ml__ranges_claim(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                      uint32_t op);
void ml__ranges_unclaim(struct ml__ranges *R, uintptr_t a, uintptr_t b,
                        uint32_t op, bool drop);
/* MADV_DONTNEED, MADV_FREE: the COUNTED `ro` bytes of [a, b) are given
 * back (RESERVED, their samples dropped); writable ones stay COUNTED
 * (the program may fill them again, as RLIMIT_DATA counts them). */
void ml__ranges_advise(struct ml__ranges *R, uintptr_t a, uintptr_t b);
/* mremap's move: the records of [from, from + len) now lie at to. */
void ml__ranges_move(struct ml__ranges *R, uintptr_t from, uintptr_t len,
                     uintptr_t to);
/* Bytes of [a, b) in records of `state`; the state at x (0: untracked). */
uint64_t ml__ranges_bytes(const struct ml__ranges *R, uintptr_t a, uintptr_t b,
                          unsigned state);
unsigned ml__ranges_state_at(const struct ml__ranges *R, uintptr_t x);
/* Sorted, disjoint, states and the count consistent (tests, fuzzing). */
bool ml__ranges_check(const struct ml__ranges *R);
/* No free slot on either side. */
static inline bool ml__ranges_full(const struct ml__ranges *R)
{
	return R->n == R->cap && !R->front;
}
/* A free slot at index i (not full), the records before it or those from
 * it on moved, whichever are fewer: R->r + i (n counts it).  Records
 * [i, i + k) out, the same way.  At either end, with a free slot there,
 * inline and no record moves; the rest out of line (ranges.c). */
struct ml__range *ml__ranges_open_slow(struct ml__ranges *R, size_t i);
void ml__ranges_close_slow(struct ml__ranges *R, size_t i, size_t k);
static inline struct ml__range *ml__ranges_open(struct ml__ranges *R, size_t i)
{
	size_t n = R->n;
	if (i == n && n < R->cap) {
		R->n = n + 1;
		return R->r + i;
	}
	if (!i && n && R->front) {
		R->front--;
		R->cap++;
		R->n = n + 1;
		return --R->r;
	}
	return ml__ranges_open_slow(R, i);
}
static inline void ml__ranges_close(struct ml__ranges *R, size_t i, size_t k)
{
	if (i + k == R->n) {
		R->n = i;
	} else if (!i) {
		R->r += k;
		R->front += k;
		R->cap -= k;
		R->n -= k;
	} else {
		ml__ranges_close_slow(R, i, k);
	}
}

/* The first record of [lo, hi) (sorted) that ends after a; of them all. */
static inline size_t ml__ranges_find_in(const struct ml__ranges *R, size_t lo,
                                        size_t hi, uintptr_t a)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (R->r[mid].end <= a)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}
static inline size_t ml__ranges_find(const struct ml__ranges *R, uintptr_t a)
{
	return ml__ranges_find_in(R, 0, R->n, a);
}

/* The common case, inline in the mmap family (issue 34): a whole mapping
 * made, later unmapped whole.  ml__ranges_gap: where a counted [a, b)
 * goes if it lies in a gap and there is room (SIZE_MAX: not so);
 * ml__ranges_insert puts it there (one insertion).  ml__ranges_whole: for
 * an unmap of [a, b), R->n when nothing is tracked there, the record's
 * index when it is exactly one record holding no samples, else SIZE_MAX;
 * ml__ranges_delete removes that record.  ml__ranges_add and
 * ml__ranges_remove do what ml__ranges_put would, or return false having
 * changed nothing (a cut, an overlap, samples to give back, a full
 * array: ml__ranges_put's). */
static inline size_t ml__ranges_gap(const struct ml__ranges *R, uintptr_t a,
                                    uintptr_t b)
{
	size_t n = R->n, i = ml__ranges_find(R, a);
	if (ml__unlikely(a >= b || ml__ranges_full(R) ||
	                 (i < n && R->r[i].start < b)))
		return SIZE_MAX;
	return i;
}
static inline void ml__ranges_insert(struct ml__ranges *R, size_t i,
                                     uintptr_t a, uintptr_t b, uintptr_t key,
                                     uint64_t s, uint64_t unit)
{
	*ml__ranges_open(R, i) = (struct ml__range){.start = a,
	                                            .end = b,
	                                            .key = key,
	                                            .samples = s,
	                                            .unit = unit,
	                                            .state = ML__RANGE_COUNTED};
	R->counted += b - a;
}
static inline size_t ml__ranges_whole(const struct ml__ranges *R, uintptr_t a,
                                      uintptr_t b)
{
	size_t n = R->n, i = ml__ranges_find(R, a);
	const struct ml__range *r = R->r + i;
	if (i == n || r->start >= b)
		return n; /* nothing tracked in [a, b) */
	if (ml__unlikely(r->start != a || r->end != b || r->samples))
		return SIZE_MAX;
	return i;
}
static inline void ml__ranges_delete(struct ml__ranges *R, size_t i)
{
	struct ml__range *r = R->r + i;
	if (r->state == ML__RANGE_COUNTED)
		R->counted -= r->end - r->start;
	ml__ranges_close(R, i, 1);
}
static inline bool ml__ranges_add(struct ml__ranges *R, uintptr_t a,
                                  uintptr_t b, uintptr_t key, uint64_t s,
                                  uint64_t unit)
{
	size_t i = ml__ranges_gap(R, a, b);
	if (i == SIZE_MAX)
		return false;
	ml__ranges_insert(R, i, a, b, key, s, unit);
	return true;
}
static inline bool ml__ranges_remove(struct ml__ranges *R, uintptr_t a,
                                     uintptr_t b)
{
	size_t i = ml__ranges_whole(R, a, b);
	if (i == SIZE_MAX)
		return false;
	if (i < R->n)
		ml__ranges_delete(R, i);
	return true;
}

/* The process's ranges (mapped.c), under their lock (ML__RANK_MAPPED,
 * taken with no other lock of ours held: nested ones rank after it).
 *
 * The lock is the owner word: 0, or the tag of the thread that holds the
 * table (the address of its ml__mapped_tag), taken by one compare and
 * swap, so that a signal handler on that thread tells for certain that
 * its own thread holds it and defers its update (ml__mapped_defer)
 * rather than spin for ever; the next holder makes the queued updates
 * before its own (ml__mapped_drain: the table stayed held from before
 * the handler's system call, so no other update came between).
 * ml__mapped_lock, the fork registry's, is taken inside it and held with
 * it: around fork nobody holds the table.  No system call and no hook is
 * made under it (the drop hook's calls wait in a buffer until the lock
 * is let go).  docs/internals.md, "The mapped ranges' lock". */
#define ML__MAPPED_CAP ((size_t)1 << 16)
extern struct ml__lock ml__mapped_lock;
extern _Atomic uintptr_t ml__mapped_owner;
/* A table update a signal handler could not make (its thread held the
 * table): made by the owner before it lets go. */
enum { ML__OP_PUT = 1, ML__OP_PROTECT, ML__OP_MOVE, ML__OP_ADVISE };
struct ml__mapped_op {
	uint8_t kind, state; /* ML__OP_*, ML__RANGE_* (0: an unmap) */
	uintptr_t a, b, to;  /* [a, b); MOVE: to */
	uintptr_t key;
	uint64_t s, unit;
};
/* A thread's tag is the address of its ml__mapped_tag.  The queue itself is one
 * for the process (mapped.c): only the handlers of the thread that holds the
 * table queue, and the next holder empties it. */
extern ML__TLS uint8_t ml__mapped_tag;
static inline uintptr_t ml__mapped_me(void)
{
	return (uintptr_t)&ml__mapped_tag;
}
/* Updates queued by a holder's signal handlers, not made yet: the next
 * holder that takes the table with ml__mapped_take makes them first
 * thing (ml__mapped_drain), before its own. */
extern _Atomic unsigned ml__mapped_queued;
void ml__mapped_drain(void);
/* Take the table if nobody holds it (true), never waiting: the fast
 * paths', which leave the queued updates to ml__mapped_take (they act
 * only on a gap, or on the last record whole: a queued update of the
 * same pages leaves a record there that sends them to the general way,
 * which drains first). */
static inline bool ml__mapped_try(void)
{
	uintptr_t z = 0;
	if (!atomic_compare_exchange_strong_explicit(
	        &ml__mapped_owner, &z, ml__mapped_me(), memory_order_acquire,
	        memory_order_relaxed))
		return false;
	/* Held by fork's prepare handler only. */
	ml__spin_lock(&ml__mapped_lock);
	return true;
}
/* Take the table, waiting for another thread; false (nothing taken):
 * this thread holds it already, a signal handler arrived inside. */
bool ml__mapped_take(void);
void ml__mapped_give_slow(void);
/* Let go, the fast paths' way (they leave no drops): the updates a
 * handler queued meanwhile wait for the next holder. */
static inline void ml__mapped_give_fast(void)
{
	ml__spin_unlock(&ml__mapped_lock);
	atomic_store_explicit(&ml__mapped_owner, 0, memory_order_release);
}
/* Let go: the buffered drops and the queued updates out of line, the
 * meter told of the queued updates' bytes, errno kept. */
extern unsigned ml__mapped_ndrops;
extern int64_t ml__mapped_pending;
static inline void ml__mapped_give(void)
{
	if (ml__unlikely(ml__mapped_ndrops || ml__mapped_pending ||
	                 atomic_load_explicit(&ml__mapped_queued,
	                                      memory_order_relaxed))) {
		ml__mapped_give_slow();
		return;
	}
	ml__mapped_give_fast();
}
/* Queue op for the owner (this thread, interrupted): false when the
 * queue is full (the update is lost: docs/internals.md). */
bool ml__mapped_defer(const struct ml__mapped_op *op);
/* Apply op to the table (held).  Results for the caller's settle:
 * `recorded` (a counted PUT found a record), `left` (PROTECT: samples no
 * piece took). */
struct ml__mapped_done {
	bool recorded;
	uint64_t left;
};
struct ml__mapped_done ml__mapped_apply(struct ml__ranges *R,
                                        const struct ml__mapped_op *op);
/* The ranges, their storage mapped at the first call; NULL if it cannot
 * be (nothing is counted then).  Under the lock. */
extern struct ml__ranges ml__mapped_table;
struct ml__ranges *ml__mapped_ranges_make(void);
static inline struct ml__ranges *ml__mapped_ranges(void)
{
	if (ml__likely(ml__mapped_table.r != NULL))
		return &ml__mapped_table;
	return ml__mapped_ranges_make();
}
/* Some piece found no record (ranges.lost > 0): read without the lock. */
#define ml__mapped_full \
	(__atomic_load_n(&ml__mapped_table.lost, __ATOMIC_RELAXED) != 0)
/* Counting runs (MEMLIMITS_MAPPED, read at start: core/settings.c). */
extern _Atomic bool ml__mapped_on;
#define ML__MAPPED_ON atomic_load_explicit(&ml__mapped_on, memory_order_relaxed)
/* Stop counting: every range forgotten, the meter told (once, at start). */
void ml__mapped_disable(void);
/* pc lies in the allocator underneath's object (jemalloc, tcmalloc,
 * mimalloc: the mappings it makes, inside our calls of its members, from
 * its own threads or its constructor, hold blocks counted as blocks, and
 * are never counted again); glibc's allocator maps through its internal
 * entry points and never reaches the interposed mmap.  The
 * span is set when the allocator is found (underlying.c). */
struct ml__allocator_span {
	_Atomic bool known;
	uintptr_t start, end; /* 0s: glibc's */
};
extern struct ml__allocator_span ml__allocator_span;
bool ml__allocator_holds_slow(uintptr_t pc);
/* Once the span is known (mmap.c's fast path checks that first). */
static inline bool ml__allocator_holds_known(uintptr_t pc)
{
	return pc - ml__allocator_span.start <
	       ml__allocator_span.end - ml__allocator_span.start;
}
static inline bool ml__allocator_holds(uintptr_t pc)
{
	if (ml__unlikely(!atomic_load_explicit(&ml__allocator_span.known,
	                                       memory_order_acquire)))
		return ml__allocator_holds_slow(pc);
	return ml__allocator_holds_known(pc);
}

/* The meter's part for mappings (meter.c): counted bytes move by d; the
 * counted bytes now; the peak's split (blocks, mapped) when it was
 * reached. */
extern _Atomic int64_t ml__meter_mapped_bytes;
void ml__meter_mapped_on(int64_t m, int64_t d); /* m: mapped bytes now */
/* Inline (issue 34: the mmap pair's cost): the mapped bytes move by d
 * (ml__meter_mapped_add returns them after); what the meter does while it
 * runs (the peak, pressure, the fold hook) is ml__meter_mapped_on's. */
static inline int64_t ml__meter_mapped_add(int64_t d)
{
	return atomic_fetch_add_explicit(&ml__meter_mapped_bytes, d,
	                                 memory_order_relaxed) +
	       d;
}
static inline void ml__meter_mapped(int64_t d)
{
	int64_t m = ml__meter_mapped_add(d);
	if (ML__METER_ON)
		ml__meter_mapped_on(m, d);
}
uint64_t ml__meter_mapped_now(void);
/* Once run mode has refused a mapping for its heap limit: a mapping that
 * would take the heap past this many bytes is refused whether or not it
 * carries a sample (api/mmap.c's decide); ML_NO_LIMIT: none.  A runtime
 * that retries a refused mapping after collecting garbage (Ruby) got one
 * in two of its 64 KiB pages on the retry, which carries no sample with
 * probability e^-0.8, and collected for ever instead of failing. */
extern _Atomic uint64_t ml__map_floor;
void ml__meter_peak_split(uint64_t *blocks, uint64_t *mapped);

#pragma GCC visibility pop

#endif
