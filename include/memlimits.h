/* memlimits — memory limits for tasks inside a process.
 *
 * Allocations are sampled as a Poisson process over allocated bytes (mean
 * gap S bytes, the sample interval).  Each sample is credited to every task
 * running on the allocating thread; a task whose allocation limit, the global
 * memory limit or its cancellation token is reached is interrupted.  See
 * memlimits(3) and docs/statistics.md for the guarantees. */
#ifndef MEMLIMITS_H
#define MEMLIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// clang-format off
/* The formatter is kept off the public header so that it reads like a man
 * page: each item's comment stands above it, and enum lines are not broken. */

#if defined(MEMLIMITS_BUILDING) && defined(__GNUC__)
#define ML_EXPORT __attribute__((visibility("default")))
#else
#define ML_EXPORT
#endif

/* The version of this header; ml_version() gives the library's.  Literal
 * (so that -Iinclude works from a checkout): configure.ac's AC_INIT is the
 * one source, tests/api/test-version.sh holds these to it. */
#define ML_VERSION_MAJOR 0
#define ML_VERSION_MINOR 5
#define ML_VERSION_PATCH 0
#define ML_VERSION_STRING "0.5.0"

/* How a task ended (ml_run's result), or why a call was refused. */
typedef enum ml_status {
	/* The task ran to its end, no limit reached. */
	ML_OK = 0,
	/* Interrupted: its allocation limit was reached. */
	ML_ALLOC_LIMIT = 1,
	/* Interrupted: the global memory limit was exceeded. */
	ML_GLOBAL_LIMIT = 2,
	/* Interrupted: its token was set. */
	ML_CANCELLED = 3,
	/* Interrupted: the memory it holds reached its held limit. */
	ML_HELD_LIMIT = 4,
	/* Bad argument: nothing ran, nothing changed. */
	ML_EINVAL = -1,
	/* The library could not get memory it needed. */
	ML_ENOMEM = -2,
} ml_status;

/* How an interruption reaches the task. */
typedef enum ml_delivery {
	/* longjmp back to ml_run (the default). */
	ML_DELIVER_JUMP = 0,
	/* The task's further allocations fail: NULL with errno ENOMEM. */
	ML_DELIVER_FAIL = 1,
	/* Only the flag: the task polls ml_is_interrupted(). */
	ML_DELIVER_FLAG = 2,
} ml_delivery;

/* A cancellation token (opaque); see ml_token_new(). */
typedef struct ml_token ml_token;

/* How ml_limits and ml_outcome grow (memlimits(3), "ABI"): fields are only
 * added at the end; every field added after 0.1 means "none" when zero, and
 * ML_LIMITS_INIT sets it to none too, so source that starts from
 * ML_LIMITS_INIT (or zero) and assigns fields by name keeps compiling and
 * keeps its meaning.  A release that grows either struct moves the entry
 * points that take it to a new symbol version and keeps the old version
 * with the old layout: a binary built against an older header keeps the
 * layout it was built with (symbol versioning, as glibc does; chosen over
 * a size field, which every caller would have to fill in right, and over
 * opaque setters, which would break every program written against 0.1). */

/* The limits of one task.  Start from ML_LIMITS_INIT and assign fields by
 * name: a zero-initialised struct means an allocation limit of 0 bytes. */
typedef struct ml_limits {
	/* Allocation limit in bytes; ML_NO_LIMIT = none. */
	uint64_t alloc_bytes;
	/* Subject to the global memory limit. */
	bool global;
	/* Interrupt when set; NULL = none. */
	ml_token *token;
	/* How the interruption is delivered. */
	ml_delivery delivery;
	/* Since 0.2.  Limit on the memory the task holds (allocated and not
	 * freed yet); ML_NO_LIMIT or 0 = none. */
	uint64_t held_bytes;
	/* Since 0.2.  Count alloc_bytes exactly, every byte requested, instead
	 * of by samples: interrupted at the allocation that would bring its
	 * bytes (all slices) to alloc_bytes (ml_run(3), "Exact budgets"). */
	bool exact_alloc;
	/* Since 0.2.  This task's sample interval in bytes; 0 = the
	 * process's (ml_set_sample_interval). */
	uint64_t interval;
} ml_limits;

/* No limit, for ml_limits.alloc_bytes and ml_set_global_limit(). */
#define ML_NO_LIMIT UINT64_MAX

/* No limits, not global, no token, jump delivery. */
#define ML_LIMITS_INIT                                                   \
	{ ML_NO_LIMIT, false, NULL, ML_DELIVER_JUMP, ML_NO_LIMIT, false, 0 }

/* What ml_run reports about a task. */
typedef struct ml_outcome {
	/* The same value ml_run returns. */
	ml_status status;
	/* fn's return value; NULL unless fn returned. */
	void *ret;
	/* Estimated bytes allocated by the task (samples x interval). */
	uint64_t allocated;
	/* Since 0.2.  Estimated bytes the task allocated and had not freed
	 * when the call ended, counting the blocks allocated while held
	 * memory is tracked (only while something needs it: see
	 * ml_task_held(3) and ml_capabilities(3)), and the largest such
	 * estimate so far. */
	uint64_t held;
	uint64_t held_peak;
} ml_outcome;

/* ==== The functions, by kind ============================================
 *
 * The API grew over two releases; its functions are grouped here by kind,
 * and each kind has one convention, stated where its section opens.  A
 * function that departs from its kind's convention says so at its
 * declaration ("Exception:").  memlimits(3) presents the same kinds.
 *
 *   Running a task         ml_run and its shorthands: an ml_status, the
 *                          task's outcome or why nothing ran.
 *   Task objects           ml_task_*: take the task first; NULL or a dead
 *                          task is ML_EINVAL, 0 or a no-op.
 *   Inside a task          the calling thread's checks, masks and cleanup
 *                          handlers: they cannot fail.
 *   Tokens                 ml_token_*: NULL is harmless; cannot fail.
 *   Process-wide settings  ml_set_X / ml_X: setters return ML_OK or
 *                          ML_EINVAL (and then change nothing), getters the
 *                          value in force.
 *   Custom allocators      ml_note_alloc / ml_note_free, called as malloc
 *                          and free would be.
 *   Reports                text about a task, metrics: >= 0, or a negative
 *                          ml_status with errno set, as write(2).
 *   Documented bounds      ml_bound_*: pure functions, no error codes.
 *   Version and capabilities
 *                          facts about the library and the process.
 *   Aliases                the 0.1 names of ml_set_global_limit and
 *                          ml_global_limit: same functions.
 *
 * Throughout: a function that returns a pointer returns NULL when it has
 * nothing to give; one that returns int returns ML_OK (0) or more on
 * success and a negative ml_status when it refused; none aborts the
 * process on bad input. */

/* ---- Running a task ------------------------------------------------------
 *
 * Convention: run fn(arg) as a task on the calling thread and return an
 * ml_status: ML_OK (fn returned, no limit reached); the interruption
 * (ML_ALLOC_LIMIT, ML_HELD_LIMIT, ML_GLOBAL_LIMIT, ML_CANCELLED; a task
 * whose token is already set does not run and returns ML_CANCELLED);
 * ML_ENOMEM (a cleanup handler of the task could not be registered); or
 * ML_EINVAL (a bad argument: nothing ran, *out not written).  out may be
 * NULL.  ml_task_run (task objects, below) follows it too. */

/* Run fn(arg) as a task under *limits.  See ml_run(3). */
ML_EXPORT ml_status ml_run(const ml_limits *limits, void *(*fn)(void *),
                           void *arg, ml_outcome *out);

/* memprof-limits shorthands: ml_run with one limit, the delivery the
 * process default (ml_set_default_delivery).  They run a task: none of
 * them sets anything. */

/* A task with an allocation limit of `bytes`. */
ML_EXPORT ml_status ml_limit_allocations(uint64_t bytes, void *(*fn)(void *),
                                         void *arg, ml_outcome *out);
/* A task subject to the global memory limit.  A shorthand that runs a
 * task, not a setter: the limit is set with ml_set_global_limit. */
ML_EXPORT ml_status ml_limit_global_memory(void *(*fn)(void *), void *arg,
                                           ml_outcome *out);
/* A task interrupted when token t is set (t must not be NULL). */
ML_EXPORT ml_status ml_limit_with_token(ml_token *t, void *(*fn)(void *),
                                        void *arg, ml_outcome *out);

/* ---- Task objects: one request across callbacks and threads -------------
 *
 * Convention: each takes the task first.  For a NULL or dead task, those
 * returning an ml_status return ML_EINVAL, the estimates 0, and
 * ml_task_free does nothing.  ml_task_run runs a slice as ml_run runs a
 * task (the convention above).  Exception: ml_task_new, below. */

/* One request, job or unit of work (opaque).  Its limits hold for all its
 * slices together, whichever threads they run on.  See ml_task_new(3). */
typedef struct ml_task ml_task;

/* A new task under *limits.  Exception: it returns a pointer, so it fails
 * as malloc does, not with an ml_status: NULL with errno EINVAL (bad
 * limits, where ml_run returns ML_EINVAL) or ENOMEM.  Never allocates
 * through malloc. */
ML_EXPORT ml_task *ml_task_new(const ml_limits *limits);
/* Free the task; NULL is a no-op.  While slices of it still run, the
 * record is reclaimed when the last of them ends. */
ML_EXPORT void ml_task_free(ml_task *t);
/* Run fn(arg) as one slice of t on this thread.  ML_OK when t is not
 * interrupted at the end of the slice, else t's status; a slice of an
 * interrupted task does not run.  out may be NULL.  See ml_task_run(3). */
ML_EXPORT ml_status ml_task_run(ml_task *t, void *(*fn)(void *), void *arg,
                                ml_outcome *out);
/* ML_OK until t is interrupted, then why (sticky); ML_EINVAL for NULL. */
ML_EXPORT ml_status ml_task_status(const ml_task *t);
/* Estimated bytes allocated by all of t's slices so far; 0 for NULL. */
ML_EXPORT uint64_t ml_task_allocated(const ml_task *t);
/* Estimated bytes t allocated that are not freed yet; 0 for NULL. */
ML_EXPORT uint64_t ml_task_held(const ml_task *t);
/* The task of the innermost slice (or ml_run) on this thread, or NULL
 * when there is none (not an error).  Takes no task. */
ML_EXPORT ml_task *ml_task_current(void);
/* Make t the innermost task of this thread until ml_task_leave(t) on
 * this thread: a slice with no function, for work that is not one C call
 * (a Python `with` block, the steps of a coroutine).  FAIL and FLAG
 * delivery only.  ML_OK; t's status (a positive ml_status) when t is
 * interrupted already, and nothing is entered; ML_EINVAL for a NULL or
 * dead task, a JUMP task, or one this thread entered and has not left
 * (other threads may enter it at the same time: each is a slice);
 * ML_ENOMEM.  Thread-safe; never allocates through malloc.  See
 * ml_task_enter(3). */
ML_EXPORT int ml_task_enter(ml_task *t);
/* End the slice ml_task_enter(t) began on this thread: ML_EINVAL unless
 * it is this thread's innermost slice.  Returns t's status then (ML_OK
 * while it runs, ML_ENOMEM as ml_task_run does).  Thread-safe; never
 * allocates.  See ml_task_leave(3). */
ML_EXPORT int ml_task_leave(ml_task *t);

/* ---- Inside a task: checks, masks, cleanup -------------------------------
 *
 * Convention: they act on the calling thread's stack of tasks and cannot
 * fail: a question returns a bool, the others nothing.  Outside any task,
 * or out of turn (ml_unmask without ml_mask, ml_cleanup_pop without a
 * push), they are harmless no-ops.  ml_check and the last ml_unmask are
 * safe points: with JUMP delivery they may not return. */

/* A task on this thread's stack is interrupted. */
ML_EXPORT bool ml_is_interrupted(void);
/* A safe point: deliver a pending interruption now. */
ML_EXPORT void ml_check(void);
/* Nestable: no interruption is delivered until the matching ml_unmask(). */
ML_EXPORT void ml_mask(void);
/* Undo one ml_mask(); a safe point when the last mask goes. */
ML_EXPORT void ml_unmask(void);
/* This thread is masked. */
ML_EXPORT bool ml_is_masked(void);
/* Run fn(arg) on JUMP delivery, innermost first, masked.  Exception: it
 * can fail but returns nothing; a record it could not get makes the
 * innermost task's ml_run (or ml_task_run) return ML_ENOMEM. */
ML_EXPORT void ml_cleanup_push(void (*fn)(void *), void *arg);
/* Drop the innermost cleanup handler, running it first if execute. */
ML_EXPORT void ml_cleanup_pop(bool execute);

/* ---- Tokens ---------------------------------------------------------------
 *
 * Convention: ml_token_new returns the token, or NULL when the library has
 * no memory for it; the others cannot fail and take NULL harmlessly
 * (ml_token_set and ml_token_free do nothing, ml_token_is_set is false). */

/* A new, unset token; NULL when out of memory. */
ML_EXPORT ml_token *ml_token_new(void);
/* Set the token: from any thread; async-signal-safe. */
ML_EXPORT void ml_token_set(ml_token *t);
/* The token has been set. */
ML_EXPORT bool ml_token_is_set(const ml_token *t);
/* Free the token; NULL is a no-op. */
ML_EXPORT void ml_token_free(ml_token *t);

/* ---- Process-wide settings -----------------------------------------------
 *
 * Convention: a setter ml_set_X sets X for the whole process, from any
 * thread, and returns int: ML_OK (0), or ML_EINVAL for a value outside X's
 * domain, and then changes nothing.  A getter ml_X returns the value in
 * force and cannot fail.  Exceptions, said at each: ml_set_seed returns
 * nothing; ml_set_stack_capture's ML_EINVAL comes with errno ENOTSUP;
 * ml_set_global_limit and ml_set_refusal_guard accept every value (always
 * ML_OK). */

/* Mean bytes between samples, >= 1.  ML_OK, or ML_EINVAL for 0. */
ML_EXPORT int ml_set_sample_interval(uint64_t bytes);
/* The sample interval in force. */
ML_EXPORT uint64_t ml_sample_interval(void);
/* Seed the samplers, for reproducible runs.  Exception: returns nothing,
 * as in 0.1 (kept for programs built against it); every seed is valid,
 * so there is nothing to refuse.  No getter. */
ML_EXPORT void ml_set_seed(uint64_t seed);

/* The delivery the shorthands use: ML_DELIVER_JUMP unless changed here or by
 * MEMLIMITS_DELIVERY=jump|fail|flag.  ML_OK, or ML_EINVAL outside the
 * enum. */
ML_EXPORT int ml_set_default_delivery(ml_delivery d);
ML_EXPORT ml_delivery ml_default_delivery(void);

/* Set the global memory limit: ML_NO_LIMIT = none (the default), 0 = always
 * exceeded.  Every value is valid: always ML_OK.  The name to use (0.1's,
 * ml_set_global_memory_limit, is an alias: see the end of this header). */
ML_EXPORT int ml_set_global_limit(uint64_t bytes);
/* The global memory limit in force.  The name to use (0.1's:
 * ml_global_memory_limit). */
ML_EXPORT uint64_t ml_global_limit(void);
/* Live heap bytes as the library measures them (see memlimits(3)): a
 * reading with no setter. */
ML_EXPORT uint64_t ml_global_memory_usage(void);

/* Called once each time usage rises to fraction x the global limit (after
 * having been below 31/32 of that), at the next safe point of any thread:
 * the end of an ml_run or a slice, ml_check(), ml_is_interrupted().  It
 * may allocate and call any ml_ function.  Since 0.2. */
typedef void (*ml_pressure_fn)(uint64_t usage, uint64_t limit, void *arg);
/* fraction in (0, 1]; fn NULL removes it.  ML_OK or ML_EINVAL.  No
 * getter. */
ML_EXPORT int ml_set_pressure_callback(double fraction, ml_pressure_fn fn,
                                       void *arg);

/* Capture the call stack at each sample from now on (on) or stop.  On
 * by itself under MEMLIMITS_PROFILE or MEMLIMITS_REPORT.  ML_OK.
 * Exception: ML_EINVAL with errno ENOTSUP where no stack can be captured
 * (ml_capabilities() lacks ML_CAP_STACKS): every value is valid, the
 * process cannot, and errno says so.  No getter.  Since 0.2. */
ML_EXPORT int ml_set_stack_capture(bool on);

/* Asked, on the slow path, before an allocation of an interrupted task is
 * refused (FAIL delivery, or a JUMP that cannot be delivered), on the
 * allocating thread: true lets the refusal happen, false lets this one
 * allocation through (the task stays interrupted and its next allocation
 * is asked again).  For regions where a failed allocation is fatal
 * (PostgreSQL's critical sections).  It runs inside malloc: it must not
 * allocate, take locks malloc may hold, or call ml_ functions.  Since 0.3. */
typedef bool (*ml_refusal_guard_fn)(void *arg);
/* fn NULL removes it.  Every value is valid: always ML_OK.  No getter. */
ML_EXPORT int ml_set_refusal_guard(ml_refusal_guard_fn fn, void *arg);

/* Frames the unwinder cannot see.  An interpreter runs its own functions
 * inside one C function (CPython's _PyEval_EvalFrameDefault), and a stack
 * captured at a sample names that C function only.  A frame source
 * rewrites each stack as it is captured (only at samples, only while
 * stack capture is on): it gets the stack's frames, innermost first, n of
 * them in an array of max, and returns how many it left there, each a
 * return address as given or a value of ml_frame_name.  It runs inside
 * the allocation being sampled, on the allocating thread: it must not
 * allocate through malloc, take locks malloc may hold, make system calls
 * or call ml_ functions but ml_frame_name.  A result outside 0..max keeps
 * the frames as captured.  One source at a time; fn NULL removes it.
 * Every value is valid: always ML_OK.  Thread-safe.  No getter.  See
 * ml_set_frame_source(3).  Since 0.5. */
typedef int (*ml_frame_source_fn)(uintptr_t *frames, int n, int max,
                                  void *arg);
ML_EXPORT int ml_set_frame_source(ml_frame_source_fn fn, void *arg);
/* A frame that prints as the len bytes at name (cut to 255; ';' and
 * newlines are written as ':' and blanks in profiles), for a frame source
 * to put in a stack.  The same text gives the same value.  0 when the
 * library's table of names (16384 names, 1 MiB of text) is full: leave
 * the frame out then.  Never allocates through malloc, takes no lock:
 * callable inside an allocation.  Since 0.5. */
ML_EXPORT uintptr_t ml_frame_name(const char *name, size_t len);

/* ---- Custom allocators ---------------------------------------------------
 *
 * Convention: an allocator that does not go through malloc calls them at
 * each of its allocations and frees, as malloc and free would be called;
 * they cannot fail.  ml_note_alloc answers whether the allocation may go
 * ahead, and with JUMP delivery may not return (as malloc in a task). */

/* Feed the sampler and the meter with an allocation of `bytes` made by a
 * custom allocator.  false: this allocation should fail (FAIL delivery). */
ML_EXPORT bool ml_note_alloc(size_t bytes);
/* Tell the meter that a custom allocator freed `bytes`. */
ML_EXPORT void ml_note_free(size_t bytes);
/* The same for a block of a custom allocator, noted after it is made:
 * counted as ml_note_alloc counts, and when it carries samples held by
 * the calling thread's tasks (ml_task_held) until ml_note_free_block(p,
 * bytes), by any thread.  false (p NULL, or an allocation to refuse, as
 * ml_note_alloc): nothing was counted; the caller frees the block and
 * fails.  Thread-safe; never allocates through malloc.  Since 0.4.  See
 * ml_note_alloc_block(3). */
ML_EXPORT bool ml_note_alloc_block(void *p, size_t bytes);
/* The block p of bytes bytes, noted with ml_note_alloc_block, is freed:
 * it is no longer held, and leaves the global memory usage. */
ML_EXPORT void ml_note_free_block(void *p, size_t bytes);

/* ---- Reports: what a task holds, why it stopped, the metrics ----------------
 *
 * Convention: write text about a task (or the process's metrics) and
 * return an int as write(2) and snprintf(3) do: >= 0 on success, else a
 * negative ml_status (ML_EINVAL: not a task, a bad descriptor or buffer;
 * ML_ENOMEM) with errno set.
 * They may call malloc, on the library's own behalf, to name frames. */

/* Write what t holds (t NULL: every task together) by call stack to fd,
 * collapsed-stack format: "outer;...;inner bytes" per line, the lines
 * summing to ml_task_held(t).  Frames are known for blocks sampled while
 * stack capture was on; the others print as [unknown].  0, or ML_EINVAL
 * (bad task or descriptor) / ML_ENOMEM with errno set.  Since 0.2. */
ML_EXPORT int ml_write_held_profile(const ml_task *t, int fd);
/* One line for a log: why t was interrupted (its status), the limit, the
 * estimates of what it had allocated and held then, and where (the
 * innermost frames of the allocation that tripped it, when it was t's
 * own); for a task not interrupted, its estimates now.  Written to buf
 * (NUL-terminated, cut to len - 1 bytes); returns the length of the whole
 * line, as snprintf, or ML_EINVAL (not a task; buf NULL with len > 0).
 * See ml_task_describe(3).  Since 0.2. */
ML_EXPORT int ml_task_describe(const ml_task *t, char *buf, size_t len);
/* Write this process's metrics in the Prometheus text format (0.0.4) to
 * fd: heap, global limit, shared usage, samples, tasks started, tasks
 * interrupted by reason, pressure callbacks.  0, or ML_EINVAL (bad
 * descriptor, errno EBADF; a write error, its errno).  Never allocates.
 * See ml_write_metrics(3).  Since 0.3. */
ML_EXPORT int ml_write_metrics(int fd);

/* ---- Documented bounds: pure functions -----------------------------------
 *
 * Convention: no state, no lock, no error code: a probability (double) or
 * a byte count (uint64_t) computed from the arguments alone.  An interval
 * of 0 gives NaN (double) or 0 (count); the other edge cases are values,
 * listed in ml_bound_alloc(3). */

/* 1 - exp(-n/interval): the least probability that a global task allocating
 * n bytes over the limit has been interrupted. */
ML_EXPORT double ml_bound_global(uint64_t n, uint64_t interval);
/* The probability that a task with this limit is interrupted before it has
 * allocated n bytes. */
ML_EXPORT double ml_bound_alloc(uint64_t n, uint64_t limit, uint64_t interval);
/* Since 0.2.  A held limit: the probability that a task holding at most
 * n bytes at any time, its held set renewed `renewals` times (>= 1), is
 * stopped by a held limit of `limit` bytes: at most renewals x
 * ml_bound_alloc(n, limit, interval), capped at 1. */
ML_EXPORT double ml_bound_held(uint64_t n, uint64_t renewals, uint64_t limit,
                               uint64_t interval);
/* A sample interval at which an allocation limit of `limit` bytes fires
 * between (1 - accuracy) and (1 + accuracy) x limit except with
 * probability at most t (both tails together): limit / k for the fewest
 * samples k that do; 0 when accuracy or t is not in (0, 1), or not even
 * 1 byte will do.  For ml_limits.interval.  Since 0.2. */
ML_EXPORT uint64_t ml_bound_interval_for(uint64_t limit, double accuracy,
                                         double t);
/* The largest n with ml_bound_alloc(n, limit, interval) <= t. */
ML_EXPORT uint64_t ml_bound_safe_bytes(uint64_t limit, double t,
                                       uint64_t interval);
/* The smallest limit (a multiple of interval) whose safe bytes at t reach
 * `safe`. */
ML_EXPORT uint64_t ml_bound_limit_for(uint64_t safe, double t,
                                      uint64_t interval);

/* ---- Budgets shared by processes (since 0.3) ----------------------------
 *
 * Convention: as the process-wide settings: ML_OK, or ML_EINVAL (or
 * ML_ENOMEM) and nothing changes; the getters cannot fail and return 0
 * when this process is not a member. */

/* Join this process to the shared budget `name` (1 to 64 characters of
 * [A-Za-z0-9._-], per user): the heap of all its members together is
 * bounded by the budget's limit, and when their total exceeds it the
 * global task holding the most, in any member, is interrupted with
 * ML_GLOBAL_LIMIT.  limit > 0 creates the budget or sets its limit for
 * every member; limit == 0 joins with the limit in force.  A child made
 * by fork() is a member too.  Returns ML_OK, ML_EINVAL (bad name, already
 * a member of another budget, limit 0 and no such budget, or an object
 * of that name that is not this user's, or not a budget's table) or
 * ML_ENOMEM (no memory, or the budget's table is full: its slots, 4096
 * unless MEMLIMITS_SHARED_SLOTS said otherwise when it was made).  See
 * ml_shared_join(3).  Since 0.3. */
ML_EXPORT int ml_shared_join(const char *name, uint64_t limit);
/* Leave it: this process's heap no longer counts.  ML_OK or ML_EINVAL
 * (not a member).  Since 0.3. */
ML_EXPORT int ml_shared_leave(void);
/* The members' total heap as last published by each live member (the
 * dead skipped, this process's own heap as of now); 0 when this process
 * is not a member.  Reads only (since 0.4): one scan of the table, no
 * publication, no stop request.  Since 0.3. */
ML_EXPORT uint64_t ml_shared_usage(void);
/* The budget's limit; 0 when this process is not a member.  Since 0.3. */
ML_EXPORT uint64_t ml_shared_limit(void);

/* Since 0.4: budgets with no name, the wake, the members.  Thread-safe,
 * not async-signal-safe (they may wait for a publisher of the moment);
 * the wake callback runs in a signal handler. */

/* Slots of a table made without a count: members at once. */
#define ML_SHARED_DEFAULT_SLOTS 4096u
/* A target that has not obeyed this long after it was asked (or, once
 * stopped, has not run its hooks with its stopped tasks not growing:
 * blocked, or growing) counts as memory again, and the next largest
 * holder is chosen.  One second: a PostgreSQL statement's abort on a
 * loaded machine took longer than 250 ms, and a waiting bystander was
 * stopped for it. */
#define ML_SHARED_DEADLINE_MS 1000
/* Make a new budget with no name and join it: its table is shared with
 * the children this process forks from now on (members from their first
 * allocation), and with no other process; nothing another user can
 * squat, nothing left behind.  For a server's master before it forks
 * (nginx, PostgreSQL's postmaster).  slots: members at once, 1 to 65536,
 * 0 for ML_SHARED_DEFAULT_SLOTS.  ML_OK, ML_EINVAL (limit 0, slots out of
 * range, already a member) or ML_ENOMEM.  Since 0.4. */
ML_EXPORT int ml_shared_create(uint64_t limit, uint32_t slots);

/* Called from the wake signal's handler, after the task the budget
 * chose was interrupted: must be async-signal-safe (set a flag, a latch,
 * write to a pipe or an eventfd). */
typedef void (*ml_wake_fn)(void *arg);
/* ml_shared_set_wake's signo: keep the signal, change the callback. */
#define ML_WAKE_KEEP (-1)
/* The default wake signal (since 0.5; SIGCONT before, which resumed a
 * member that job control or an operator had stopped): a real-time
 * signal that glibc, PostgreSQL and nginx do not use.  Not a constant
 * (glibc's SIGRTMIN is a function call); needs <signal.h>. */
#define ML_WAKE_DEFAULT (SIGRTMIN + 9)
/* How a member is woken when the budget asks it to stop a task: by
 * default with ML_WAKE_DEFAULT, installed at the join unless the program
 * has a handler of its own on it, and sent only to a member whose slot
 * says the library's handler is on it (a stopped member stays stopped:
 * the signal waits until it is continued).  signo: another signal (the
 * library's handler replaces the program's), 0 never woken (the request
 * waits for the next allocation or safe point), ML_WAKE_KEEP.  fn, arg:
 * called from the handler once the task is interrupted (or NULL).
 * Callable before or after the join; fork children inherit it.  ML_OK,
 * or ML_EINVAL (a signal that cannot be caught, or a synchronous one).
 * Since 0.4. */
ML_EXPORT int ml_shared_set_wake(int signo, ml_wake_fn fn, void *arg);

/* One member as the table has it (ml_shared_members). */
typedef struct ml_shared_member {
	int32_t pid;
	uint32_t flags;    /* ML_SHARED_SELF, _ASKED, _WAKEABLE */
	uint64_t heap;     /* its heap, as last published (late by less
	                      than one batch; this process's: now) */
	uint64_t held;     /* its largest running global task's estimate */
	uint64_t stopping; /* what its stopped tasks still hold */
} ml_shared_member;
#define ML_SHARED_SELF 1u     /* this process */
#define ML_SHARED_ASKED 2u    /* a stop request is pending */
#define ML_SHARED_WAKEABLE 4u /* it has a wake signal */
/* Copy up to n members into out (live ones, in slot order); returns how
 * many there are (more than n: call again with more room).  Reads only:
 * publishes nothing, stops nothing.  0 when not a member.  Since 0.4. */
ML_EXPORT size_t ml_shared_members(ml_shared_member *out, size_t n);

/* ---- Version and capabilities --------------------------------------------
 *
 * Convention: facts about the library and the running process; they cannot
 * fail.  Strings are static: never NULL, not to be modified or freed.
 * Exception: ml_patch_objects acts on the process, and returns -1 with
 * errno where it cannot. */

/* The library's version, "MAJOR.MINOR.PATCH". */
ML_EXPORT const char *ml_version(void);
/* A mask of what this process can do, computed once (see
 * ml_capabilities(3)). */
ML_EXPORT unsigned ml_capabilities(void);
/* This library's malloc family is the process's. */
#define ML_CAP_INTERPOSED 1u
/* JUMP delivery can tell runtime frames apart. */
#define ML_CAP_JUMP_SAFE 2u
/* Call stacks can be captured. */
#define ML_CAP_STACKS 4u
/* Held memory can be tracked (ml_task_held, held_bytes): set whenever
 * ML_CAP_INTERPOSED is, as it is recorded at the allocations that reach us.
 * Tracking itself runs only while something needs it (memlimits(3)). */
#define ML_CAP_HELD 8u
/* Memory the program maps itself (private, anonymous, writable mmap) is
 * counted as heap and as allocations: set with ML_CAP_INTERPOSED unless
 * MEMLIMITS_MAPPED=0 turned counting off (0.4). */
#define ML_CAP_MAPPED 16u

/* The allocator the library forwards to, the one after it in the lookup
 * order: "glibc", "jemalloc", "tcmalloc", "mimalloc" or "other".  See
 * ml_allocator(3).  Since 0.2. */
ML_EXPORT const char *ml_allocator(void);

/* Route the malloc family and the mmap family of every loaded object
 * but libc, the loader and the library itself to the library, by
 * rewriting their GOT slots, and of every object loaded later by dlopen:
 * what a program or a runtime that loads the library without the preload
 * (Python's module) uses so that its other objects' allocations are
 * counted.  flags: 0, or ML_PATCH_QUERY to rewrite nothing.  The number of
 * loaded objects whose references reach the library; -1 with errno EEXIST
 * (the library is the process's malloc already), ENOTSUP (another
 * allocator is, or another target than x86-64 and aarch64), ENOENT or
 * EINVAL.  See ml_patch_objects(3).  Since 0.5. */
ML_EXPORT int ml_patch_objects(unsigned flags);
#define ML_PATCH_QUERY 1u

/* A short description of s; "unknown status" outside the enum. */
ML_EXPORT const char *ml_status_str(ml_status s);

/* ---- Aliases: the 0.1 names ----------------------------------------------
 *
 * Same functions (one address for both names), kept so that programs
 * written or built against 0.1 keep working; new code uses
 * ml_set_global_limit and ml_global_limit.  The 0.1 names were too easily
 * mistaken for ml_limit_global_memory, which runs a task.  (ml_run and the
 * three shorthands also keep a 0.1 symbol version, with the 0.1 layouts of
 * ml_limits and ml_outcome: one name, two versions, not an alias.) */

/* Same function as ml_set_global_limit, kept for 0.1. */
ML_EXPORT int ml_set_global_memory_limit(uint64_t bytes);
/* Same function as ml_global_limit, kept for 0.1. */
ML_EXPORT uint64_t ml_global_memory_limit(void);

// clang-format on

#ifdef __cplusplus
}
#endif
#endif /* MEMLIMITS_H */
