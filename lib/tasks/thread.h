/* The per-thread state of layer 5 (tasks), included by tasks.h: the TLS
 * block every allocation's slow path works in (struct ml__thread,
 * thread.c), the metrics counts each thread keeps in it (metrics.c), the
 * hook table through which a consumer above sees the slow path's events,
 * and the slow path's entry points (slow.c).  Tasks, slices and what acts
 * on them are tasks.h's. */
#ifndef ML_TASKS_THREAD_H
#define ML_TASKS_THREAD_H

#include "core/core.h"

#pragma GCC visibility push(hidden)

struct ml__slice;
struct ml__cleanup;

/* ---- Metrics (metrics.c) ----------------------------------------------
 *
 * Counts for ml_write_metrics, each thread counting in its own TLS record
 * (struct ml__thread's `metrics`): a task start or a sample writes no
 * cache line that another thread writes (issue 26).  Only the owner
 * writes its record, with relaxed atomic stores; a reader sums the live
 * threads' records and the exited threads' total under a lock. */
enum {
	ML__M_STARTED,     /* ml_run calls and task objects      */
	ML__M_SAMPLES,     /* samples the slow path took          */
	ML__M_PRESSURE,    /* pressure callbacks called           */
	ML__M_INTERRUPTED, /* + ML_ALLOC_LIMIT - 1 ... ML_HELD_LIMIT - 1 */
	ML__M_N = ML__M_INTERRUPTED + 4
};
struct ml__metrics {
	uint64_t c[ML__M_N];
	struct ml__metrics *next; /* the live list, while listed */
};
#define ML__MLOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ML__MBUMP(x, v) \
	__atomic_store_n(&(x), ML__MLOAD(x) + (v), __ATOMIC_RELAXED)

/* ---- Per-thread state (thread.c) ---------------------------------------
 *
 * Everything the allocation path touches lives in one initial-exec TLS
 * block, zero-initialised: a zero countdown sends the first allocation of
 * a thread to the slow path, which initialises the rest.  Kept small: when
 * the library is dlopen'ed its TLS must fit glibc's static TLS surplus.
 * (The meter keeps its own countdowns: alloc/alloc.h.) */
struct ml__thread {
	/* The fast path's countdown is the sampler's (ml__countdown,
	 * sampler.h): the gap plus one unless `forced`, when it is 0 and
	 * the gap plus one waits here. */
	uint64_t saved;
	struct ml__sampler sampler;
	struct ml__slice *top;             /* innermost slice, NULL if none  */
	struct ml__cleanup *cleanups;      /* innermost cleanup handler      */
	struct ml__cleanup *cleanup_spare; /* kept for reuse (cleanup.c) */
	uint32_t cleanup_nspare;
	/* The hook consumer's own per-thread records (run mode: its root
	 * task and statistics), NULL until it makes them. */
	void *hook_local[2];
	unsigned mask_depth;
	/* Cleanup pushes that found no memory, above the top record: they
	 * pop as no-ops, so push/pop stay paired (cleanup.c). */
	uint32_t cleanup_holes;
	uint32_t index;          /* creation order, 0 = first      */
	uint32_t seed_epoch;     /* ml__seed_epoch last applied    */
	uint32_t interval_epoch; /* ml__interval_epoch last applied */
	uint8_t state;           /* ML__T_*                        */
	uint8_t busy;            /* inside the library: no sampling */
	uint8_t forced;          /* countdown forced to 0          */
	uint8_t pending;         /* an interruption waits delivery */
	/* The last slow path let its allocation through and charged it
	 * (charged_samples samples): taken back if the allocator fails it. */
	uint8_t charged;
	/* The allocation being decided is a mapping (api/mmap.c): run
	 * mode's heap limits refuse mappings before blocks (runmode.c). */
	uint8_t mapping;
	/* The allocation being decided is realloc's new block for this old
	 * one (ml__alloc_begin's `replacing`): held checks count the old
	 * block's record as gone (ml__held_after).  NULL otherwise. */
	const void *replacing;
	uint64_t charged_samples;
	/* The allocation being decided is a realloc of a block of this many
	 * bytes (0: not one): the global limit's check leaves them out
	 * (global.c).  Set at each slow path's start, read only inside it. */
	uint64_t resize_old;
	/* The interned call stack of the last sample (core/stacks.c), when
	 * stacks are wanted; else 0. */
	uint32_t stack;
	/* Exact budgets on the stack (exact.c): the countdown is clipped to
	 * the smallest reservation; armed: what it was set to; cut: what the
	 * clip hid of the sampler's gap. */
	uint8_t exact;
	uint64_t armed, cut;
	/* A task with an interval of its own is on the stack (thread.c). */
	uint8_t own_interval;
	/* ml_task_enter's slice records kept for reuse (slice.c). */
	struct ml__slice *entered_spare;
	/* Its counts for ml_write_metrics (metrics.c). */
	struct ml__metrics metrics;
};

enum { ML__T_NEW = 0, ML__T_LIVE = 1, ML__T_EXITING = 2 };

extern ML__TLS struct ml__thread ml__self;

/* Force every allocation of t to the slow path, or stop doing so (unless
 * t is busy, has an interruption pending, or a consumer sees every
 * allocation). */
void ml__force_slow(struct ml__thread *t);
void ml__unforce(struct ml__thread *t);
/* Apply the current seed and interval to t: its stream is (seed,
 * lineage, index).  ml__thread_refresh draws a fresh gap now. */
void ml__thread_reseed(struct ml__thread *t);
uint64_t ml__thread_regap(struct ml__thread *t);
void ml__thread_refresh(struct ml__thread *t);
/* Set the sampler's gap to c (countdown c + 1; in `saved` while forced), exact
 * budgets kept. */
void ml__thread_set_gap(struct ml__thread *t, uint64_t c);
/* The interval t samples at: the smallest of its stack's tasks' (the
 * process's for a task without one of its own, and with none). */
double ml__thread_interval(const struct ml__thread *t);
/* The stack changed under a task with an interval of its own: sample at
 * the new smallest interval from here (a fresh gap: memorylessness). */
void ml__thread_reinterval(struct ml__thread *t);
/* Which process of a fork tree this is (slow.c advances it in a child). */
extern uint32_t ml__lineage;

/* Metrics (metrics.c, above).  Count v events of kind i (ML__M_*) on t: in its
 * own record once it is listed (a live thread), else straight into the
 * exited threads' total (a thread that never allocated, or exiting). */
void ml__metrics_unlisted(unsigned i, uint64_t v);
static inline void ml__metrics_add(struct ml__thread *t, unsigned i, uint64_t v)
{
	if (ml__likely(t->state == ML__T_LIVE))
		ML__MBUMP(t->metrics.c[i], v);
	else
		ml__metrics_unlisted(i, v);
}
/* The calling thread set a task's status to why. */
void ml__metrics_tripped(ml_status why);
void ml__metrics_thread_start(struct ml__thread *t); /* listed */
void ml__metrics_thread_exit(struct ml__thread *t);  /* folded in */
void ml__metrics_fork_child(struct ml__thread *t);   /* only t, emptied */
/* The process's counts: every live thread's and the exited ones'. */
void ml__metrics_sum(uint64_t sum[ML__M_N]);

/* ---- Hooks: the events a consumer above sees ---------------------------
 *
 * The core calls these and names nothing above it; run mode installs one
 * table at start (run/runmode.c).  Each is called on the allocating
 * thread with t->busy set, so its own allocations pass through
 * unsampled; NULL members are skipped. */
enum {
	ML__HOOK_REFUSE = 1,  /* fail this allocation (unless masked, loader) */
	ML__HOOK_TRIPPED = 2, /* a task's status changed: recompute pending  */
};
struct ml__hooks {
	/* Every allocation that reaches the slow path, s samples (0 or
	 * more), before any task is credited. */
	void (*alloc)(struct ml__thread *t, uint64_t n, uint64_t s);
	/* An allocation of n bytes carried s >= 1 samples: ML__HOOK_*. */
	unsigned (*sample)(struct ml__thread *t, uint64_t s, uint64_t n);
	/* The s samples of an allocation refused, or failed by the
	 * allocator, are taken back. */
	void (*unsample)(struct ml__thread *t, uint64_t s);
	/* An allocation the slow path let through failed in the allocator. */
	void (*failed)(struct ml__thread *t, uint64_t n, uint64_t s);
	/* An allocation that carried samples was made: the meter counts it
	 * now (at sample, before the allocation, it did not). */
	void (*granted)(struct ml__thread *t);
	void (*thread_start)(struct ml__thread *t);
	void (*thread_exit)(struct ml__thread *t);
	/* In a forked child, on its one thread, after the core's reset. */
	void (*fork_child)(struct ml__thread *t);
	/* While ml__refusing is set (the consumer set it when it refused
	 * an allocation), every allocation of every thread that reaches
	 * the slow path, sampled or not, masked or not, n bytes: ML__HOOK_*
	 * (REFUSE: fail it, unless masked or the loader's).  The consumer
	 * clears ml__refusing here once the heap is back under its limits.
	 * Called after the sample's verdict, only when that let it
	 * through. */
	unsigned (*recheck)(struct ml__thread *t, uint64_t n);
	/* The consumer must see every allocation (alloc above). */
	bool every_alloc;
};
/* Set by the consumer when it refused an allocation for a limit that a
 * retry would pass by missing a sample (run mode's heap, tree and held
 * limits): every thread that reaches the slow path while it is set keeps
 * its countdown forced (ml__unforce), so that each of its allocations is
 * shown to the recheck hook, not only those that carry a sample.  The
 * fast path is unchanged: a thread learns of it at its next slow path
 * (at its next sample, at the latest). */
extern _Atomic bool ml__refusing;
extern const struct ml__hooks *_Atomic ml__hooks;
/* Install h (static storage; once, at start). */
void ml__hooks_install(const struct ml__hooks *h);
static inline const struct ml__hooks *ml__hooks_get(void)
{
	return atomic_load_explicit(&ml__hooks, memory_order_acquire);
}

/* ---- The slow path (slow.c) ------------------------------------------- */

void ml__global_init(void);
void ml__thread_init(struct ml__thread *t);
/* The pair around a real allocation that the slow path makes, called
 * when the countdown sent an allocation of n bytes there
 * (ml__countdown_take): the malloc family's through ml__alloc_slow below,
 * the mmap family's and the notes' directly.
 * ml__alloc_begin decides: samples, credits the thread's tasks, delivers
 * their interruptions; 0 = allocate, -1 = fail with ENOMEM; may not
 * return (JUMP delivery).  `replacing`: realloc's old block, whose record
 * the held checks count as gone (t->replacing), or NULL.
 * ml__alloc_end settles with the allocator's answer p: a block that
 * carried samples is held by the tasks that were charged (held.c); a
 * failure (p NULL) takes back what the allocation was charged.  Returns
 * p; leaves errno alone. */
int ml__alloc_begin(uint64_t n, const void *replacing);
/* The malloc family's slow path around the allocator's call (kind: an
 * enum ml__call_kind of alloc/family.h, with its arguments a, b and
 * realloc's old block; n the bytes sampled): ml__alloc_begin, the call,
 * ml__alloc_end.  May not return (JUMP delivery); errno as the allocator
 * leaves it, or ENOMEM for a refusal.  posix_memalign's: its answer, and
 * errno left alone. */
void *ml__alloc_slow(int kind, size_t n, size_t a, size_t b, void *old);
int ml__alloc_slow_posix(void **out, size_t align, size_t n);
void *ml__alloc_end(void *p, uint64_t n);
/* The allocation ml__alloc_begin let through was made and the meter
 * counts it: tells the granted hook if it carried samples (ml__alloc_end
 * calls it; ml_note_alloc, which has no block to settle, too). */
void ml__alloc_granted(void);

#pragma GCC visibility pop

#endif
