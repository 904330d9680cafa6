/* Layer 7, run mode (docs/internals.md, "Layers"): limits, reports,
 * profiles and statistics for a whole unmodified process (`memlimits
 * run`, or LD_PRELOAD with MEMLIMITS_* set).  A consumer of the core's
 * events through its hook table (tasks/tasks.h); nothing below names it,
 * so the core links and works without it.  Never installed.
 *
 * Every thread gets a root task at the bottom of its stack.  The
 * allocation limit counts the samples of all threads together; the heap
 * limit fails each sampled allocation that would take the heap over it
 * (not sticky: a program that catches the failure goes on), and so does
 * the held limit, over the bytes all root tasks hold together (one
 * shared held account).  See memlimits(1). */
#ifndef ML_RUN_H
#define ML_RUN_H

#include "api/api.h"

#pragma GCC visibility push(hidden)

/* ---- Settings (settings.c) -------------------------------------------- */

enum ml__on_limit { ML__ON_LIMIT_FAIL = 0, ML__ON_LIMIT_ABORT = 1 };
struct ml__run {
	bool active;              /* root tasks are created              */
	bool profiling;           /* capture stacks at samples           */
	bool stats;               /* count every allocation              */
	uint8_t on_limit;         /* ML__ON_LIMIT_*                      */
	uint64_t alloc_limit;     /* ML_NO_LIMIT = none                  */
	uint64_t heap_limit;      /* ML_NO_LIMIT = none                  */
	uint64_t held_limit;      /* ML_NO_LIMIT = none: all threads' held */
	const char *heap_from;    /* "80% of physical memory", or NULL   */
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

/* The thread's records in its hook_local slots (tasks/tasks.h). */
#define ML__RUN_ROOT 0  /* runmode.c's struct root: the root task */
#define ML__RUN_STATS 1 /* stats.c's per-thread counts */

/* ---- Profile and report (report.c) ------------------------------------ */

void ml__profile_sample(struct ml__thread *t, uint64_t s, uint64_t n);
void ml__profile_refused(struct ml__thread *t, uint64_t s); /* undo */
void ml__profile_trip(ml_status why, uint64_t n); /* the tripping stack */
void ml__report_write(void);                      /* report and profile */

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
void ml__stats_write(void);

#pragma GCC visibility pop

#endif
