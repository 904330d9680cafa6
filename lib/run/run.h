/* Layer 8, run mode (docs/internals.md, "Layers"): limits, reports,
 * profiles and statistics for a whole unmodified process (`memlimits
 * run`, or LD_PRELOAD with MEMLIMITS_* set).  A consumer of the core's
 * events through its hook table (tasks/tasks.h); nothing below names it,
 * so the core links and works without it.  Never installed.
 *
 * Every thread gets a root task at the bottom of its stack.  The
 * allocation limit counts the samples of all threads together; the heap
 * limit fails each sampled allocation that would take the heap over it,
 * and after one every allocation that would, sampled or not, until the
 * heap is back under (not sticky: a program that frees goes on), and so does
 * the held limit, over the bytes all root tasks hold together (one
 * shared held account).  See memlimits(1). */
#ifndef ML_RUN_H
#define ML_RUN_H

#include "api/api.h"

#pragma GCC visibility push(hidden)

/* ---- Settings (settings.c) -------------------------------------------- */

enum ml__on_limit { ML__ON_LIMIT_FAIL = 0, ML__ON_LIMIT_ABORT = 1 };
struct ml__run {
	bool active;            /* root tasks are created              */
	bool profiling;         /* capture stacks at samples           */
	bool stats;             /* count every allocation              */
	uint8_t on_limit;       /* ML__ON_LIMIT_*                      */
	uint64_t alloc_limit;   /* ML_NO_LIMIT = none                  */
	uint64_t heap_limit;    /* ML_NO_LIMIT = none                  */
	uint64_t held_limit;    /* ML_NO_LIMIT = none: all threads' held */
	const char *heap_from;  /* "80% of physical memory", or NULL   */
	const char *heap_blind; /* the heap limit is off: this allocator */
	/* Mappings are refused this much before the heap limit, blocks at
	 * it (runmode.c's on_sample); tree_room: the same for the tree's. */
	uint64_t heap_room, tree_room;
	/* --tree-heap-limit: this process is a member of run's tree budget
	 * (MEMLIMITS_SHARED_TREE set and the join done): an allocation that
	 * would take the members' total over its limit is refused. */
	bool tree;
	_Atomic bool tree_fired; /* the first limit reached was it     */
	uint64_t k;              /* samples that reach alloc_limit      */
	/* Each thread adds its samples to `samples` once it has `batch` of
	 * them (runmode.c): the limit is reached late by at most batch - 1
	 * samples per other thread (docs/statistics.md, "Run mode"). */
	uint64_t batch;
	_Atomic uint64_t samples; /* all root tasks together, folded  */
	_Atomic int fired;        /* ml_status of the first limit hit */
	/* Samples and allocations refused by the allocation limit (the one
	 * that reached it included): not in the counts, said in the report. */
	_Atomic uint64_t refused_samples, refused_allocs;
	const char *report_path; /* NULL: stderr                   */
	/* With a report file and no limit reached, only this process
	 * writes its report (MEMLIMITS_REPORT_PID); 0: every process. */
	uint64_t report_pid;
	const char *profile_path;  /* NULL: none                     */
	const char *stats_dir;     /* NULL: none                     */
	const char *timeline_path; /* NULL: none (timeline.c)       */
};
extern struct ml__run ml__run;
void ml__run_configure(void); /* reads MEMLIMITS_* run variables */

/* The thread's records in its hook_local slots (tasks/tasks.h). */
#define ML__RUN_ROOT 0  /* runmode.c's struct root: the root task */
#define ML__RUN_STATS 1 /* stats.c's per-thread counts */

/* Counters that one thread writes and others read while it runs
 * (statistics, per-thread counts): relaxed atomics make that a benign
 * race and cost plain moves on the owner's side. */
#define ML__RLOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define ML__RSTORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)
#define ML__RBUMP(x, v) ML__RSTORE(x, ML__RLOAD(x) + (v))

/* ---- Per-thread counts (counts.c) ------------------------------------ */

#define ML__NIDS (ML__NSTACKS + 1) /* stack ids; 0: [unknown] */
struct ml__prof_count {
	uint64_t bytes, samples;
};
/* A thread's profile: written by that thread alone. */
struct ml__prof {
	struct ml__prof_count all;     /* every sample */
	struct ml__prof_count nostack; /* stack id 0, while by_id is NULL */
	/* By stack id (ML__NIDS counts, our own memory), made at the first
	 * sample with a stack; NULL until then. */
	struct ml__prof_count *by_id;
};
/* A thread's counts, in its run-mode record (runmode.c). */
struct ml__run_counts {
	struct ml__run_counts *next; /* the live list */
	uint64_t unfolded;           /* samples not yet in ml__run.samples */
	struct ml__prof prof;
};
void ml__counts_start(struct ml__run_counts *c); /* thread start */
void ml__counts_end(struct ml__run_counts *c);   /* exit: folded in */
/* s samples of `bytes` on stack id `stack`: the process's samples as
 * this thread sees them (the folded total plus its own). */
uint64_t ml__counts_sample(struct ml__run_counts *c, uint32_t stack,
                           uint64_t bytes, uint64_t s);
void ml__counts_unsample(struct ml__run_counts *c, uint32_t stack,
                         uint64_t bytes, uint64_t s);
/* A forked child: only its own thread's record, emptied. */
void ml__counts_fork_child(struct ml__run_counts *mine);
/* Samples of all root tasks, every live thread's unfolded part included
 * (exact once the threads are quiet). */
uint64_t ml__counts_samples(void);
/* The profile summed over all threads; by stack id into bytes and
 * samples (ML__NIDS each) where not NULL. */
struct ml__prof_count ml__counts_profile(uint64_t *bytes, uint64_t *samples);

/* ---- Profile and report (report.c) ------------------------------------ */

/* The tripping stack; s samples, the count then `total` (allocation
 * limit). */
void ml__profile_trip(ml_status why, uint64_t n, uint64_t s, uint64_t total);
/* The allocation that tripped was refused (or failed): its samples left
 * the count. */
void ml__profile_trip_refused(void);
/* At a sample, with a profile: the process's held estimate now; what is
 * held is taken by stack when it passes the last peak taken by 1/32. */
void ml__profile_peak(uint64_t held);
/* A forked child's report and profile start empty (runmode.c's fork
 * hook, in the child). */
void ml__profile_fork_child(void);
void ml__report_write(void); /* report and profile */
/* At the first limit reached, inside the allocation (fire): the report's
 * first part (the limits, the stack that tripped) written at once, so
 * that a process that then aborts, _exits or is killed leaves it; the
 * report at exit adds the rest.  ml__report_claim first, at once (true:
 * the part is this thread's to write, with ml__report_at_limit), so that
 * another thread's refusal waits from then on; not in abort mode (the
 * whole report at the trip). */
bool ml__report_claim(void);
void ml__report_at_limit(void);
/* A refusal waits (bounded) for a thread writing that part: a program
 * that exits at its refusal must not end the process in the middle. */
void ml__report_wait(void);

/* path with %p made this process's id, in buf[cap]; false (said, naming
 * what) when it does not fit. */
bool ml__run_expand(const char *path, char *buf, size_t cap, const char *what);

/* ---- Timeline (timeline.c) -------------------------------------------- */

/* The held bytes of all root tasks, ML_NO_LIMIT where not tracked
 * (runmode.c). */
/* The file, its header, the first row; held(): run mode's held memory
 * now (ML_NO_LIMIT when not tracked). */
void ml__timeline_start(uint64_t (*held)(void));
void ml__timeline_sample(void);         /* a sampled block made: a row if due */
void ml__timeline_event(ml_status why); /* a limit reached */
void ml__timeline_exit(void);
void ml__timeline_fork_child(void);

/* ---- Symbols (symbols.c) ---------------------------------------------- */

struct ml__symbols;
/* demangle: C++ names through the program's __cxa_demangle, which
 * allocates (never inside an allocation).  NULL when no memory. */
struct ml__symbols *ml__symbols_open(bool demangle);
void ml__symbols_close(struct ml__symbols *sy); /* NULL: no-op */
const char *ml__symbols_exe(const struct ml__symbols *sy);
/* A collapsed-stack frame: the function, else object+0xoffset. */
void ml__put_frame(struct ml__out *o, struct ml__symbols *sy, uintptr_t ip);
/* A report's stack: one "    name+0xoff (object)" line per frame, at
 * most max of them. */
void ml__put_stack(struct ml__out *o, struct ml__symbols *sy,
                   const uintptr_t *ip, uint32_t depth, uint32_t max);
/* "[prog;]outer;...;inner", "[unknown]" for a stack not captured. */
void ml__put_collapsed(struct ml__out *o, struct ml__symbols *sy,
                       const char *prog, const struct ml__stack *st);

/* ---- Statistics (stats.c) --------------------------------------------- */

void ml__stats_alloc(struct ml__thread *t, uint64_t n, uint64_t s);
void ml__stats_failed(struct ml__thread *t, uint64_t n, uint64_t s);
void ml__stats_thread_exit(struct ml__thread *t);
/* A forked child's statistics start empty, its one thread's record kept
 * (runmode.c's fork hook, in the child). */
void ml__stats_fork_child(void);
void ml__stats_write(void);

#pragma GCC visibility pop

#endif
