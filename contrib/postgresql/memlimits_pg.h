/* What the extension's files share (docs/internals.md, "The PostgreSQL
 * extension"): the settings, the statement machinery's entry points, the
 * counters, the cluster's budget's flags.  Each .c file does one job and
 * says which in its opening comment.  Names shared between the files
 * begin with mlpg_; the rest is static. */
#ifndef MEMLIMITS_PG_H
#define MEMLIMITS_PG_H

#include "postgres.h"

#include <signal.h>

#include "fmgr.h"
#include "utils/elog.h"

#include <memlimits.h>

/* The library is not linked in: the ml_ functions are weak references,
 * bound to the preloaded libmemlimits, NULL without it (memlimits.c says
 * why).  Every file that calls one sees them weak. */
#pragma weak ml_capabilities
#pragma weak ml_global_memory_usage
#pragma weak ml_global_memory_limit
#pragma weak ml_set_refusal_guard
#pragma weak ml_task_allocated
#pragma weak ml_task_free
#pragma weak ml_task_held
#pragma weak ml_task_new
#pragma weak ml_task_run
#pragma weak ml_task_status
/* The shared budget: NULL where the library lacks it (0.4's budget with
 * no name and its wake), and then memlimits.cluster_limit refuses to
 * start. */
#pragma weak ml_shared_create
#pragma weak ml_shared_set_wake
#pragma weak ml_shared_members
#pragma weak ml_shared_usage
#pragma weak ml_shared_limit

/* ---- Settings (memlimits.c), in kB, whole numbers; 0 = none */
extern double mlpg_statement_limit_kb;
extern double mlpg_statement_alloc_limit_kb;
extern double mlpg_cluster_limit_kb;
extern double mlpg_transaction_limit_kb;

static inline bool statements_limited(void)
{
	return mlpg_statement_limit_kb > 0 ||
	       mlpg_statement_alloc_limit_kb > 0 || mlpg_cluster_limit_kb > 0 ||
	       mlpg_transaction_limit_kb > 0;
}

static inline uint64_t kb_bytes(double kb)
{
	return kb > 0 ? (uint64_t)kb * 1024 : ML_NO_LIMIT;
}

/* ---- Tasks and slices (slice.c) */
/* Depth of our slices on the stack: 0 = no statement code is running, the
 * next hook call is a top-level one. */
extern int mlpg_nesting_level;
/* The task running now (memlimits_activity). */
extern ml_task *mlpg_current_task;
/* Tasks made and not ended (memlimits_tasks_open). */
extern int mlpg_open_tasks;
ml_task *mlpg_statement_task_new(void);
/* A cursor's portal task (statement.c): the statement limit over what the
 * cursor holds, global under the cluster limit. */
ml_task *mlpg_portal_task_new(void);
/* The slice about to start is a transaction control statement's (COMMIT,
 * ROLLBACK, ROLLBACK TO): it runs even when its transaction is over
 * memlimits.transaction_limit.  Read and cleared by the next top-level
 * slice. */
extern bool mlpg_xact_control;
/* The transaction ended (statement.c's xact_end): its task goes. */
void mlpg_txn_end(void);
void mlpg_task_end(ml_task *task);
void mlpg_run_slice(ml_task **owner, void (*fn)(void *), void *arg, bool ends);
/* Whether owner is an open cursor's portal task's (statement.c). */
bool mlpg_is_portal_owner(ml_task **owner);
void mlpg_limit_text(ml_task *task, const ErrorData *cause, char **message,
                     char **detail);
bool mlpg_refusal_ok(void *arg);

/* ---- Statements (statement.c) */
void mlpg_statement_hooks(void);
/* The task of an open portal that the cluster's budget stopped; NULL. */
ml_task *mlpg_stopped_portal(void);

/* ---- Work at commit (commit.c) */
void mlpg_commit_hooks(void);
ml_task **mlpg_outside_task(void);
void mlpg_outside_end(void);

/* ---- Shared memory areas (shmem.c): the counters */
enum { C_STARTED, C_ALLOC, C_GLOBAL, C_CANCELLED, C_HELD, C_N };
void mlpg_shmem_hooks(void);
void mlpg_count(unsigned i);
unsigned mlpg_counter_of(ml_status st);
void mlpg_counters_sum(uint64 sum[C_N]);

/* ---- The cluster's budget (cluster.c) */
void mlpg_cluster_hooks(void);
void mlpg_cluster_create(void);
/* Set by the wake, in a signal handler: a stop is being delivered
 * (QueryCancelPending), or the session is to end (ProcDiePending). */
extern volatile sig_atomic_t mlpg_stop_pending;
extern volatile sig_atomic_t mlpg_stop_terminates;

#endif
