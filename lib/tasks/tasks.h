/* Layer 5, tasks (docs/internals.md, "Layers"): the task stack, tokens,
 * masks, cleanup handlers, deliveries, held memory and the global limit's
 * decision (which reads the meter below).  The per-thread state, the
 * allocation slow path and the hook table through which consumers above
 * (run mode) see its events are thread.h's, included here.  Never
 * installed. */
#ifndef ML_TASKS_H
#define ML_TASKS_H

#include "core/core.h"
#include "tasks/thread.h"

#include <sched.h>
#include <setjmp.h>

#pragma GCC visibility push(hidden)

struct ml__cleanup;

/* A cancellation token (token.c): one atomic flag.  Defined here so that
 * the task layer tests it inline: ml_run and ml_task_run poll it at every
 * call, and the exported ml_token_is_set is a call through the GOT. */
struct ml_token {
	_Atomic int set;
};
static inline bool ml__token_is_set(const ml_token *t)
{
	return t && atomic_load_explicit(&((ml_token *)t)->set,
	                                 memory_order_acquire);
}

/* A task: the shared record of one request's limits and counts (the public
 * ml_task).  Its slices, on any threads, point to it; it lives in our pool
 * (ml_task_new), in ml_run's stack frame, or in a consumer's memory (run
 * mode's root tasks).  Fields other than the atomics are set before any
 * slice runs and never change. */
struct ml_task {
	/* ML__TASK_*: ml_task_free changes it while slices may run on other
	 * threads, whose end reads it (relaxed: it orders nothing). */
	_Atomic uint32_t magic;
	bool global;          /* subject to the global limit            */
	bool internal;        /* a consumer's: ml_task_current skips it */
	bool shared_trip;     /* interrupted for a shared budget (lib/shared) */
	ml_delivery delivery; /* how an interruption reaches a slice    */
	ml_token *token;      /* borrowed: the caller owns it           */
	/* Samples that reach the allocation limit: 0 until the first sample
	 * computes it (credit.c, alloc_reached: the division is kept off
	 * ml_run's path); UINT64_MAX for none. */
	_Atomic uint64_t k;
	uint64_t held_limit;      /* bytes; 0 or ML_NO_LIMIT = none          */
	uint64_t alloc_limit;     /* bytes as given (k is what counts)       */
	uint64_t interval;        /* S at creation: allocated = samples x S  */
	_Atomic uint64_t samples; /* credited so far, all slices together */
	_Atomic int status;       /* ML_OK until interrupted; sticky after */
	/* The owner's reference (until ml_task_free) plus one per slice
	 * running now, on any thread. */
	_Atomic uint32_t refs;
	/* Its held memory (account.c), made at the first charge. */
	struct ml__account *_Atomic acct;
	/* The list of live global tasks (global.c), if global. */
	struct ml_task *gnext, *gprev;
	/* At the interruption (ml_task_describe): the estimates then, and
	 * the stack of the allocation that made it, when it was one of the
	 * task's own (core/stacks.c's id; 0: none).  The thread that sets
	 * the status writes the estimates, then sets trip_ready (release);
	 * readers acquire trip_ready before they read them. */
	uint64_t trip_allocated, trip_held;
	_Atomic bool trip_ready;
	_Atomic uint32_t trip_stack;
	/* Its own sample interval (ml_limits.interval), 0: the process's.
	 * While it runs the thread samples at the smallest interval on its
	 * stack and this task keeps each sample with probability
	 * thread's / its own (thread.c, credit.c). */
	uint64_t own_interval;
	/* An exact budget (exact.c): alloc_limit counted in bytes. */
	bool exact;
	/* exact or own_interval: its slices start and end through the
	 * out-of-line path (task.c, RUN_SLICE), so that the common slice
	 * tests one byte of the task there (0 in a consumer's memset task). */
	bool slow_slice;
	_Atomic uint64_t exact_left; /* not reserved by any slice yet */
	_Atomic uint64_t exact_used; /* bytes its slices allocated */
	/* Its slices from ml_task_enter on the stacks of all threads now
	 * (entered.c): 0 tells an enter that the task is not entered on
	 * its thread without a walk of that thread's stack, which made a
	 * nest of n enters cost n^2/2 steps. */
	_Atomic uint32_t entered_slices;
};

enum {
	ML__TASK_LIVE = 0x6d6c746b,  /* from ml_task_new, not freed       */
	ML__TASK_FREED = 0x66726565, /* ml_task_free called; slices may run */
	ML__TASK_FRAME = 0x6672616d, /* ml_run's, or a consumer's         */
};

/* One slice: a task running on this thread (an ml_run frame, an
 * ml_task_run, a root task).  Lives in its runner's stack frame; linked
 * into the thread's task stack while it runs. */
struct ml__slice {
	struct ml__slice *outer;
	struct ml_task *task;
	ml_status seen;      /* the task's status as this thread last saw it */
	unsigned mask_depth; /* thread's mask depth when the slice started  */
	struct ml__cleanup *cleanups; /* thread's cleanup stack at start    */
	uint32_t holes;               /* thread's cleanup_holes at start    */
	bool lost_cleanup;            /* a cleanup could not be registered  */
	bool owner;                   /* ml_run's own slice of its task     */
	/* ml_task_enter's: the record is ours (entered_pool), not in a
	 * runner's frame, and goes back when the slice leaves the stack. */
	bool entered;
	uint64_t pending_bytes; /* bytes allocated while a jump waited */
	uint64_t res;      /* an exact task's bytes reserved for this slice */
	uint64_t credited; /* samples its task got at the last sample */
	uintptr_t frame;   /* an address in the runner's frame   */
	sigjmp_buf jb;
};

/* ---- Tasks (task.c, credit.c) ----------------------------------------- */

/* Credit s samples of an allocation of n bytes to the thread's tasks and
 * decide, with the consumer's verdict `hook` (ML__HOOK_*): 0 = allocate,
 * -1 = fail.  May jump. */
int ml__tasks_sample(struct ml__thread *t, uint64_t s, uint64_t n,
                     unsigned hook);
/* Take back the last sample's credits from every task on the stack (each
 * slice what its task was credited: thinning makes them differ). */
void ml__tasks_unsample(struct ml__thread *t);
/* An allocation while an interruption is pending. */
int ml__tasks_pending(struct ml__thread *t, uint64_t n);
/* The consumer's verdict `hook` (ML__HOOK_*) on an allocation: true when
 * it is to fail (REFUSE, and the thread neither masked nor inside the
 * loader, which cannot survive a failure). */
bool ml__tasks_refused(struct ml__thread *t, unsigned hook);
/* May an interrupted task's allocation be refused now?  Asks the
 * embedder's refusal guard (guard.c; true without one).  Slow path only. */
bool ml__refusal_allowed(void);
/* Statuses changed outside a sample (fork, a consumer): recompute what is
 * pending. */
void ml__tasks_recheck(struct ml__thread *t);
/* Place a slice under every slice on t's stack (run mode's root task). */
void ml__tasks_push_bottom(struct ml__thread *t, struct ml__slice *slice);
/* Statuses of tasks changed outside a sample: this thread's slices see
 * them now. */
void ml__tasks_poll(struct ml__thread *t);
/* Would an allocation of n bytes take the heap over the global limit? */
bool ml__over_global(uint64_t n);
void ml__tasks_thread_exit(struct ml__thread *t);
/* ml_task_enter on a started thread (api/enter.c starts it; entered.c). */
int ml__task_enter(ml_task *task);

extern struct ml__pool ml__token_pool, ml__cleanup_pool;

/* The current versions of the public functions that have several
 * (include/memlimits.h declares them; lib/memlimits.map). */
ML__VERSIONED ml_status ml__run_0_2(const ml_limits *limits,
                                    void *(*fn)(void *), void *arg,
                                    ml_outcome *out);
ML__VERSIONED ml_status ml__limit_allocations_0_2(uint64_t bytes,
                                                  void *(*fn)(void *),
                                                  void *arg, ml_outcome *out);
ML__VERSIONED ml_status ml__limit_global_memory_0_2(void *(*fn)(void *),
                                                    void *arg, ml_outcome *out);
ML__VERSIONED ml_status ml__limit_with_token_0_2(ml_token *tok,
                                                 void *(*fn)(void *), void *arg,
                                                 ml_outcome *out);

/* ---- The global limit's choice (global.c) ---------------------------- */

void ml__global_register(struct ml_task *task);
/* ml_set_global_limit without starting held tracking: run mode's heap
 * limit, which refuses allocations and chooses no task. */
void ml__global_limit_set(uint64_t bytes);
void ml__global_unregister(struct ml_task *task);
/* How far an allocation of n bytes would take usage past the global
 * limit (*limitp): 0 when it stays within, or no limit is set. */
uint64_t ml__global_overshoot(uint64_t n, uint64_t *limitp);
/* An allocation of n bytes on t would take usage past the limit:
 * interrupt the live global task that holds the most (none while tasks
 * already interrupted for it still hold the overshoot). */
void ml__global_choose(struct ml__thread *t, uint64_t n);
/* The API's global limit is set (ml_set_global_limit, not run mode's). */
extern _Atomic bool ml__api_limit;
/* A program's task on t samples under it while tracking is off: the limit
 * needs tracking from now on.  Whether tracking is on. */
bool ml__global_held_need(struct ml__thread *t);

/* Issue 27, shared budgets (lib/shared): fn(task, arg) for every live
 * global task, under the list's lock (fn takes no lock, allocates
 * nothing); the pressure callback, its fraction in millionths. */
void ml__global_visit(void (*fn)(struct ml_task *task, void *arg), void *arg);
/* The same, async-signal-safe: false (nothing visited) when the list's
 * lock is taken. */
bool ml__global_try_visit(void (*fn)(struct ml_task *task, void *arg),
                          void *arg);
ml_pressure_fn ml__pressure_get(uint64_t *ppm, void **arg);
/* A consumer's work at every safe point (lib/shared's stop requests):
 * ml__upcalls.safe_point (alloc/alloc.h). */

/* A pressure crossing waits (alloc/alloc.h): call the user's function now
 * (at a safe point, never inside an allocation). */
void ml__pressure_poll(void);
static inline void ml__pressure_check(void)
{
	if (ml__unlikely(atomic_load_explicit(&ml__pressure_pending,
	                                      memory_order_relaxed)))
		ml__pressure_poll();
	ml__upcall_safe_point();
}

/* ---- Held memory (held.c, account.c, tracking.c) ---------------------- */

struct ml__account;
/* Held tracking is on: samples are recorded (tracking.c, "When held
 * tracking runs"). */
extern _Atomic bool ml__held_on;
#define ML__HELD_ON atomic_load_explicit(&ml__held_on, memory_order_relaxed)
/* Tracking went off with the filter left on (tracking.c): a sample not
 * recorded ticks towards switching the filter off. */
extern _Atomic bool ml__held_draining;
void ml__held_drain_tick(void);
/* Something needs held tracking from now on / no longer (paired): a live
 * task object, global task or held-limited ml_run, run mode, the API's
 * global limit (global.c).  Tracking is on when ml__held_need returns. */
void ml__held_need(void);
void ml__held_unneed(void);
/* Tests: whether tracking is on, and (*filtered) whether free goes
 * through the sampled-block filter. */
bool ml__held_tracking_test(bool *filtered);
/* The block p, just allocated on t's slow path with s samples, is held
 * by the tasks on t's stack. */
void ml__held_note(struct ml__thread *t, void *p, uint64_t s);
/* A mapping's held record (api/mmap.c's key) holds weight bytes fewer;
 * the record goes when nothing is left. */
void ml__held_drop(uintptr_t key, uint64_t weight);
/* A sampled block's weight recorded (+weight) or freed (-weight) goes to
 * ml__upcalls.held_moved (alloc/alloc.h), after the accounts have it, on
 * the slow path and in the sampled free only. */
/* A task's held estimate and its peak, in bytes. */
uint64_t ml__held_bytes(const struct ml_task *task);
uint64_t ml__held_peak(const struct ml_task *task);
/* The task's held estimate once the allocation t is deciding, of weight
 * w (its samples times the interval), is made: the estimate plus w, less
 * the weight of realloc's old block (t->replacing) where the task holds
 * it, since that block goes as the new one comes.  For the held limits'
 * checks (credit.c, run mode). */
uint64_t ml__held_after(const struct ml__thread *t, const struct ml_task *task,
                        uint64_t w);
/* The task ends: it gives up its account (its records keep it alive). */
void ml__held_task_end(struct ml_task *task);
/* `to` holds its blocks in from's account (made now if need be): run
 * mode's root tasks share one.  false when no memory. */
bool ml__held_share(struct ml_task *to, struct ml_task *from);
/* Make task's account batched: each thread keeps its own change to it
 * until the change reaches `batch` bytes either way, so that an account
 * every thread charges costs no shared write per sample.  Its estimate
 * is then exact up to batch per other thread.  The account is never
 * freed from then on (run mode's process account).  false when no
 * memory. */
bool ml__held_batch(struct ml_task *task, uint64_t batch);
/* The thread's own change to a batched account goes in (thread exit);
 * later changes go straight in. */
void ml__held_thread_exit(void);
/* sums[id] += the weights of the live records of each stack id (0 ..
 * ML__NSTACKS) charged to task (NULL: every record, once); the total. */
uint64_t ml__held_by_stack(const struct ml_task *task, uint64_t *sums);
/* A task pointer from the program: one of ml_task_new, not freed, or an
 * ml_run's (FRAME) while it runs; anything else is refused where it can
 * be told.  Inline: ml_task_enter and ml_task_run start with it (the
 * first is entered.c's, the second task.c's). */
static inline bool ml__task_valid(const struct ml_task *task)
{
	if (!task)
		return false;
	uint32_t magic =
	    atomic_load_explicit(&task->magic, memory_order_relaxed);
	return magic == ML__TASK_LIVE ||
	       (magic == ML__TASK_FRAME && !task->internal);
}

/* Interrupt task for `why`, unless it was already: its status is then
 * the first reason.  The estimates of the moment are kept
 * (ml_task_describe). */
static inline ml_status ml__task_trip(struct ml_task *task, ml_status why)
{
	int expect = ML_OK;
	if (!atomic_compare_exchange_strong(&task->status, &expect, (int)why))
		return (ml_status)expect;
	ml__metrics_tripped(why);
	task->trip_allocated =
	    task->exact
	        ? atomic_load_explicit(&task->exact_used, memory_order_relaxed)
	        : atomic_load_explicit(&task->samples, memory_order_relaxed) *
	              task->interval;
	task->trip_held = ml__held_bytes(task);
	atomic_store_explicit(&task->trip_ready, true, memory_order_release);
	return why;
}

/* The same, from an allocation of the task's own: where it tripped is
 * kept too (one stack walk per task, at most). */
static inline void ml__task_trip_here(struct ml_task *task, ml_status why)
{
	if (ml__task_trip(task, why) != why ||
	    atomic_load_explicit(&task->trip_stack, memory_order_relaxed))
		return;
	uint32_t id = ml__stack_here(), none = 0;
	atomic_compare_exchange_strong(&task->trip_stack, &none, id);
}

/* A set token interrupts its task at once, seen from any call.  Inline:
 * every ml_task_run and ml_task_enter starts with one. */
static inline __attribute__((always_inline)) ml_status
ml__task_poll(struct ml_task *task)
{
	int st = atomic_load_explicit(&task->status, memory_order_relaxed);
	if (st == ML_OK && task->token && ml__token_is_set(task->token))
		st = ml__task_trip(task, ML_CANCELLED);
	return (ml_status)st;
}

/* ---- Slices (slice.c), delivery (deliver.c), cleanups (cleanup.c) ----- */

extern struct ml__pool ml__task_pool, ml__entered_pool;
/* Recompute whether anything on t's stack waits delivery (t->pending). */
void ml__update_pending(struct ml__thread *t);
/* Give back what a slice owns on its thread, as at its start (cleanup.c):
 * its cleanup records (not run), the holes above them, the mask depth. */
void ml__slice_release(struct ml__thread *t, const struct ml__slice *slice);
/* A slice is off the stack, however it left. */
void ml__slice_end(struct ml__slice *slice);
/* t's innermost slice leaves its stack without its runner's return (a
 * jump passes it, or it was entered and abandoned): its exact budget
 * settled, then ml__slice_end. */
void ml__slice_pop(struct ml__thread *t);
/* Entered slices above stop, left without ml_task_leave, leave now. */
void ml__entered_abandon(struct ml__thread *t, struct ml__slice *stop);
/* The pthread cleanup handler of a runner's frame (RUN_SLICE, task.c). */
void ml__slice_unwound(void *arg);
void ml__slice_exact_end(struct ml__thread *t, struct ml__slice *slice);
/* Enter and leave out of the common path (task->slow_slice, or exact
 * budgets or own intervals on the thread's stack). */
void ml__slice_enter_slow(struct ml__thread *t, struct ml__slice *slice);
void ml__slice_leave_slow(struct ml__thread *t, struct ml__slice *slice);
/* The last reference to a task from ml_task_new went. */
void ml__task_gone(struct ml_task *task);
/* Drop a reference to a task from ml_task_new: the last one gives the
 * record back.  Inline: every ml_task_run ends with one. */
static inline __attribute__((always_inline)) void
ml__task_unref(struct ml_task *task)
{
	if (atomic_fetch_sub_explicit(&task->refs, 1, memory_order_acq_rel) ==
	    1)
		ml__task_gone(task);
}
/* Slices of an ml_run's task handed to other threads (ml_task_current)
 * end before the record goes with the ml_run's frame. */
static inline void ml__wait_for_other_slices(struct ml_task *task)
{
	while (atomic_load_explicit(&task->refs, memory_order_acquire) > 1)
		sched_yield();
}
/* A held limit is set: neither 0 nor ML_NO_LIMIT (one comparison). */
static inline bool ml__held_limited(uint64_t held_limit)
{
	return held_limit - 1 < ML_NO_LIMIT - 1;
}
/* The frames check with t busy (the unwinder may allocate). */
enum ml__frames ml__tasks_frames_check(struct ml__thread *t, uintptr_t stop);
/* Act on the interruptions on t's stack: 0 = go on, -1 = fail; may jump. */
int ml__deliver(struct ml__thread *t, uint64_t n, bool alloc);
/* Each slice's view of its task's status brought up to date: true when
 * one newly sees an interruption. */
bool ml__refresh_seen(struct ml__thread *t);
/* Run t's cleanup handlers down to stop (a jump's target's). */
void ml__cleanup_run_to(struct ml__thread *t, struct ml__cleanup *stop);
/* Thread exit: the records go back, handlers not run. */
void ml__cleanup_thread_exit(struct ml__thread *t);

/* ---- Exact budgets (exact.c) ------------------------------------------ */

/* Charge the bytes the fast path allocated since the countdown was last
 * set to the exact slices on t's stack (before the stack changes). */
void ml__exact_settle(struct ml__thread *t);
/* Charge `bytes` (the slow path's own reckoning of the fast path's). */
void ml__exact_spent(struct ml__thread *t, uint64_t bytes);
/* Clip the countdown to the smallest reservation on the stack. */
void ml__exact_clip(struct ml__thread *t);
/* An allocation of n bytes: refill reservations or interrupt the exact
 * tasks it would take to their budget; true when a task it does not fit
 * is interrupted (now, or before on another thread): the slice must see
 * it. */
bool ml__exact_check(struct ml__thread *t, uint64_t n);
/* A slice leaves the stack: its unused reservation goes back. */
void ml__exact_release(struct ml__slice *k);

#pragma GCC visibility pop

#endif
