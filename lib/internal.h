/* Internal declarations shared by the library's modules.  Never installed.
 *
 * Naming: ml_ is public, ml__ is internal but visible across our objects
 * (hidden in the shared object), everything else is static. */
#ifndef ML_INTERNAL_H
#define ML_INTERNAL_H

#include "config.h"

#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memlimits.h"
#include "sampler.h"

#define ml__likely(x) __builtin_expect(!!(x), 1)
#define ml__unlikely(x) __builtin_expect(!!(x), 0)
#define ML__HIDDEN __attribute__((visibility("hidden")))
#define ML__COLD __attribute__((cold, noinline))
#define ML__TLS __thread __attribute__((tls_model("initial-exec")))

/* glibc's allocator, called directly (no dlsym bootstrap). */
void *__libc_malloc(size_t);
void *__libc_calloc(size_t, size_t);
void *__libc_realloc(void *, size_t);
void *__libc_memalign(size_t, size_t);
void *__libc_valloc(size_t);
void *__libc_pvalloc(size_t);
void __libc_free(void *);

/* ---- Tasks ------------------------------------------------------------ */

struct ml__cleanup;

/* One ml_run frame.  Lives on ml_run's stack; linked into the thread's task
 * stack while fn runs. */
struct ml__task {
	struct ml__task *outer;
	uint64_t k;           /* samples that reach the allocation limit     */
	uint64_t samples;     /* samples credited so far                     */
	ml_token *token;      /* borrowed: the caller owns it                */
	bool global;          /* subject to the global limit                 */
	ml_delivery delivery; /* how an interruption reaches it              */
	ml_status status;     /* ML_OK until interrupted; sticky after       */
	unsigned mask_depth;  /* thread's mask depth when the task started   */
	struct ml__cleanup *cleanups; /* thread's cleanup stack at start     */
	uint32_t holes;               /* thread's cleanup_holes at start     */
	bool lost_cleanup;            /* a cleanup could not be registered   */
	uint64_t pending_bytes;       /* bytes allocated while a jump waited */
	uintptr_t frame;              /* an address in ml_run's frame        */
	bool root;                    /* the implicit task of `memlimits run` */
	sigjmp_buf jb;
};

/* ---- Per-thread state ------------------------------------------------- */

/* Everything the allocation path touches lives in one initial-exec TLS
 * block, zero-initialised: a zero countdown sends the first allocation of
 * a thread to the slow path, which initialises the rest.  Kept small: when
 * the library is dlopen'ed its TLS must fit glibc's static TLS surplus. */
struct ml__thread {
	/* Fast path: bytes that may still be allocated before the slow path
	 * must run.  Equals the sampler's countdown unless `forced`. */
	uint64_t countdown;
	uint64_t saved; /* the sampler's countdown while forced */
	/* Meter: bytes this thread may still allocate / free before its
	 * delta (= meter_down - meter_up) must be folded into the global
	 * total.  Two countdowns, so that malloc and free each need one
	 * subtraction and one branch, like the sampler. */
	uint64_t meter_up, meter_down;
	struct ml__sampler sampler;
	struct ml__task *top;         /* innermost task, NULL if none   */
	struct ml__task *root;        /* this thread's run-mode task, or NULL */
	void *stats;                  /* run-mode statistics, or NULL */
	struct ml__cleanup *cleanups; /* innermost cleanup handler      */
	unsigned mask_depth;
	/* Cleanup pushes that found no memory, above the top record: they
	 * pop as no-ops, so push/pop stay paired (task.c). */
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
	uint64_t charged_samples;
};

enum { ML__T_NEW = 0, ML__T_LIVE = 1, ML__T_EXITING = 2 };

extern ML__TLS struct ml__thread ml__self;

void ml__thread_init(struct ml__thread *t);
/* Apply the current seed and interval to t now: a fresh gap. */
void ml__thread_refresh(struct ml__thread *t);
void ml__force_slow(struct ml__thread *t);
void ml__unforce(struct ml__thread *t);

/* The slow path of every allocation: 0 = allocate, -1 = fail with ENOMEM.
 * May not return (JUMP delivery). */
int ml__alloc_slow(uint64_t n);
/* The allocation of n bytes that the last ml__alloc_slow let through
 * failed in the allocator: take back what it was charged (tasks, run
 * mode, profile, statistics).  Leaves errno alone. */
void ml__alloc_failed(uint64_t n);

/* ---- Global configuration --------------------------------------------- */

extern _Atomic uint64_t ml__interval; /* S */
extern _Atomic uint64_t ml__seed;
extern _Atomic uint32_t ml__seed_epoch;
extern _Atomic uint32_t ml__interval_epoch;
extern _Atomic int ml__default_delivery;
void ml__global_init(void);

/* ---- Meter ------------------------------------------------------------ */

/* Nonzero while the meter counts every allocation (a global limit is set).
 * malloc and free do not read it: they jump through pointers instead. */
extern _Atomic bool ml__meter_on_;
/* A relaxed load: a plain byte read on x86, and no data race for TSan. */
#define ML__METER_ON atomic_load_explicit(&ml__meter_on_, memory_order_relaxed)
extern _Atomic uint64_t ml__global_limit;
#define ML__METER_BATCH ((int64_t)32768)
void ml__meter_add(int64_t bytes);
void ml__meter_flush(struct ml__thread *t);
uint64_t ml__meter_usage(void);
/* The highest usage the meter has seen (with the meter on only). */
uint64_t ml__meter_peak(void);
/* An allocator below or in front of ours whose heap the meter cannot read
 * (its object's name), or NULL.  Found once, at start. */
const char *ml__meter_blind(void);
/* The object whose malloc the program calls when it is not ours (no
 * allocation reaches the library), or NULL. */
const char *ml__malloc_in_front(void);
size_t ml__chunk_bytes(const void *p);
/* Route malloc and free through the metered variants, or not. */
void ml__meter_switch(bool on);
/* The allocator below us is not glibc's (valgrind): take block sizes from
 * its malloc_usable_size instead of glibc's chunk headers. */
void ml__foreign_allocator(size_t (*usable)(void *));

/* Fault injection (MEMLIMITS_FAULT, for the tests): every Nth call into
 * glibc's allocator fails; our own page allocations fail. */
void ml__fault_libc(uint64_t every);
extern bool ml__fault_pool;

/* ---- Tasks ------------------------------------------------------------ */

/* Credit `s` samples of an allocation of n bytes to the thread's tasks and
 * decide: 0 = allocate, -1 = fail.  May jump. */
int ml__tasks_sample(struct ml__thread *t, uint64_t s, uint64_t n);
/* An allocation while an interruption is pending. */
int ml__tasks_pending(struct ml__thread *t, uint64_t n);
/* Statuses changed outside a sample (fork): recompute what is pending. */
void ml__tasks_recheck(struct ml__thread *t);
/* Would an allocation of n bytes take the heap over the global limit? */
bool ml__over_global(uint64_t n);
void ml__tasks_thread_exit(struct ml__thread *t);

/* ---- Run mode: limits for a whole unmodified process ------------------
 *
 * Set from the environment (memlimits run, or a bare LD_PRELOAD): every
 * thread gets a root task at the bottom of its stack.  The allocation limit
 * counts the samples of all threads together; the heap limit fails each
 * sampled allocation that would take the heap over it (not sticky: a
 * program that catches the failure goes on).  See memlimits(1). */
enum ml__on_limit { ML__ON_LIMIT_FAIL = 0, ML__ON_LIMIT_ABORT = 1 };
struct ml__run {
	bool active;              /* root tasks are created              */
	bool profiling;           /* capture stacks at samples           */
	bool stats;               /* count every allocation              */
	uint8_t on_limit;         /* ML__ON_LIMIT_*                      */
	uint64_t alloc_limit;     /* ML_NO_LIMIT = none                  */
	uint64_t heap_limit;      /* ML_NO_LIMIT = none                  */
	const char *heap_blind;   /* the heap limit is off: this allocator */
	uint64_t k;               /* samples that reach alloc_limit      */
	_Atomic uint64_t samples; /* all root tasks together        */
	_Atomic int fired;        /* ml_status of the first limit hit */
	const char *report_path;  /* NULL: stderr                   */
	const char *profile_path; /* NULL: none                     */
	const char *stats_dir;    /* NULL: none                     */
};
extern struct ml__run ml__run;
void ml__run_configure(void); /* reads MEMLIMITS_* run variables */
/* getenv for MEMLIMITS_*: NULL in a privileged (AT_SECURE) process. */
const char *ml__getenv(const char *name);
/* Output files of run mode (report, profile, statistics): paths are kept
 * in our own buffers of this size.  ml__out_open opens for writing with
 * O_CLOEXEC, never blocks, refuses what is neither a regular file, a
 * character device nor the process's own stdout/stderr pipe, and says why
 * (naming `what` and the path) once; -1 then.  ml__out_write: 0 or an
 * errno value. */
#define ML__PATH_MAX 4096
int ml__out_open(const char *what, const char *path, int flags);
int ml__out_write(int fd, const char *buf, size_t len);
void ml__out_failed(const char *what, const char *path, int err);
const char *ml__strerror(int err); /* no allocation, no locale */
/* This program's path (/proc/self/exe) in buf, or "?"; cap >= 2. */
void ml__self_exe(char *buf, size_t cap);
void ml__run_thread_start(struct ml__thread *t);
void ml__run_thread_exit(struct ml__thread *t);
/* A sample of a root task: 0 = allocate, -1 = fail (heap limit). */
int ml__run_sample(struct ml__thread *t, struct ml__task *root, uint64_t s,
                   uint64_t n);

/* Reporting hooks (report.c, stats.c). */
void ml__profile_sample(struct ml__thread *t, uint64_t s, uint64_t n);
void ml__profile_refused(struct ml__thread *t, uint64_t s); /* undo a sample */
void ml__profile_trip(ml_status why,
                      uint64_t n); /* capture the tripping stack */
void ml__report_write(void);       /* report and profile files */
void ml__stats_alloc(struct ml__thread *t, uint64_t n, uint64_t s);
void ml__stats_failed(struct ml__thread *t, uint64_t n, uint64_t s);
void ml__stats_thread_exit(struct ml__thread *t);
void ml__stats_write(void);

/* ---- Locks ------------------------------------------------------------
 *
 * Every lock of the library is a spin lock made with ML__LOCK or ML__POOL,
 * which also add it to the fork registry (forklock.c): the fork handlers
 * hold every registered lock around fork, so that a child never inherits
 * one held by a thread it does not have.  They are taken in rank order,
 * then in the order they were registered; code that nests two locks must
 * take them in that order.  tests/test-locks.sh rejects any other lock. */
enum ml__lock_rank {
	ML__RANK_UNWIND, /* around a stack walk, which may allocate  */
	ML__RANK_METER,  /* the meter switch (mallinfo2 under it)    */
	ML__RANK_STATS,  /* run-mode statistics: live list, totals   */
	ML__RANK_POOL,   /* a pool's free list: nothing taken inside */
};
struct ml__lock {
	atomic_flag flag;
};
void ml__spin_lock(struct ml__lock *l);
void ml__spin_unlock(struct ml__lock *l);
/* Called before main by the constructors ML__LOCK and ML__POOL make. */
void ml__fork_lock_register(struct ml__lock *l, enum ml__lock_rank rank);
void ml__fork_locks_acquire(void); /* fork: prepare */
void ml__fork_locks_release(void); /* fork: parent and child */
/* pthread_atfork, or one diagnostic saying what a fork loses without. */
void ml__atfork(void (*prepare)(void), void (*parent)(void),
                void (*child)(void), const char *lost);

#define ML__CAT_(a, b) a##b
#define ML__CAT(a, b) ML__CAT_(a, b)
#define ML__LOCK_REGISTER_(lockp, rank, fn)                    \
	__attribute__((constructor(101))) static void fn(void) \
	{                                                      \
		ml__fork_lock_register((lockp), (rank));       \
	}
#define ML__LOCK_REGISTER(lockp, rank)  \
	ML__LOCK_REGISTER_(lockp, rank, \
	                   ML__CAT(ml__fork_register_, __COUNTER__))
/* ML__LOCK(static, name, rank) or ML__LOCK(, name, rank): define a lock. */
#define ML__LOCK(storage, name, rank)                      \
	storage struct ml__lock name = {ATOMIC_FLAG_INIT}; \
	ML__LOCK_REGISTER(&name, rank)

/* ---- Own memory ------------------------------------------------------- */

/* Fixed-size slots from mmap'd slabs; never touches the malloc family. */
struct ml__pool {
	size_t slot;
	struct ml__lock lock;
	void *free;
};
/* ML__POOL(static, name, slot bytes) or ML__POOL(, name, bytes): define a
 * pool, its lock registered for fork. */
#define ML__POOL(storage, name, slot_bytes)                          \
	storage struct ml__pool name = {.slot = (slot_bytes),        \
	                                .lock = {ATOMIC_FLAG_INIT}}; \
	ML__LOCK_REGISTER(&name.lock, ML__RANK_POOL)
void *ml__pool_get(struct ml__pool *p);
void ml__pool_put(struct ml__pool *p, void *slot);
void *ml__raw_alloc(size_t bytes); /* mmap; NULL on failure */
void ml__raw_free(void *p, size_t bytes);
extern struct ml__pool ml__token_pool, ml__cleanup_pool, ml__root_pool;
extern struct ml__lock ml__meter_switch_lock;

/* ---- Unwinding -------------------------------------------------------- */

enum ml__frames {
	ML__FRAMES_SAFE = 0, /* only user code between here and the task */
	ML__FRAMES_RUNTIME =
	    1, /* a libc/loader/libstdc++/libgcc/ourselves frame */
	ML__FRAMES_LOADER = 2, /* a frame that cannot survive a failure      */
};
/* Classify the frames between the caller and `stop` (an address in the
 * target ml_run's frame).  stop = 0: the loader check only, over the
 * runtime frames the allocation came through up to the first user frame
 * (its cost does not grow with the depth of the stack). */
enum ml__frames ml__frames_check(uintptr_t stop);
void ml__unwind_init(void);
/* At start: find libgcc_s's unwinder (never from inside malloc). */
void ml__unwind_load(void);
bool ml__unwind_loaded(void);
/* Return addresses, innermost first; 0 frames if no unwinder is loaded.
 * Opens no descriptor. */
int ml__backtrace(void **ip, int max);
/* The loaded object holding addr: _dl_find_object, or dl_iterate_phdr
 * before glibc 2.35.  name: the link map's ("" for the main program). */
struct ml__object {
	uintptr_t start, end;
	const char *name;
};
int ml__find_object(uintptr_t addr, struct ml__object *o);
void ml__unwind_lock(void);
void ml__unwind_unlock(void);

/* ---- Diagnostics ------------------------------------------------------ */

void ml__diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* At start: remember which file stderr is (diag.c).  ml__diag_keep: a
 * report on stderr is due, keep a close-on-exec copy of it above the low
 * descriptors (none is held before).  ml__diag_fd: where diagnostics and a
 * report on stderr go, or -1 (stderr was closed at start, or is another
 * file now and no copy was kept). */
void ml__diag_init(void);
/* The no-stdio writer (diag.c): text into buf[cap].  With fd >= 0 a full
 * buffer sends its complete lines to fd (O_APPEND keeps the lines of
 * concurrent processes apart; the first error is kept in err, and nothing
 * more is written); with fd < 0 a text that does not fit is dropped, and
 * so is everything after it (cut). */
struct ml__out {
	char *buf;
	size_t len, cap, line; /* line: end of the last complete line */
	int fd;
	int err;
	bool cut;
};
void ml__out_put(struct ml__out *o, const char *s, size_t n);
void ml__out_puts(struct ml__out *o, const char *s);
void ml__out_u(struct ml__out *o, uint64_t v, unsigned base);
void ml__out_flush(struct ml__out *o, size_t upto); /* buf[0, upto) to fd */
void ml__diag_keep(void);
int ml__diag_fd(void);

#endif
