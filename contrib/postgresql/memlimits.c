/* memlimits: a memory limit per statement, and one for the whole cluster,
 * for PostgreSQL (docs/postgresql.md).
 *
 * Loaded with shared_preload_libraries = 'memlimits' into a server whose
 * allocator is libmemlimits (LD_PRELOAD, or the systemd drop-in
 * contrib/postgresql/memlimits.conf): _PG_init refuses to start the
 * server otherwise.  The library is not linked in: the ml_ functions are
 * weak references, bound to the preloaded library (as the nginx module
 * does), so that a server started without it gets one FATAL line naming
 * the fix instead of a loader error.
 *
 * A statement is a task (FAIL delivery: its allocations fail once it is
 * over its limit, and PostgreSQL turns the failure into its own "out of
 * memory" ERROR, which is replaced here by one that names the limit).
 * Every top-level hook call of the statement (planner, ExecutorStart, Run,
 * Finish, End, ProcessUtility) runs as a slice of its task; everything
 * they call (functions, SPI, nested statements, utility commands) is
 * inside the slice.  What a statement is, for the simple and the extended
 * protocol, portals and cursors: docs/postgresql.md, "What a statement is".
 *
 * ereport(ERROR) leaves by siglongjmp: it must never cross ml_task_run's
 * frame (the library ends a slice only by returning, or by its own jump).
 * So each slice's body catches the error (PG_TRY/PG_CATCH), returns, and
 * the error is thrown again once ml_task_run has returned. */
#include "postgres.h"

#include <errno.h>
#include <math.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type_d.h"
#include "executor/executor.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "optimizer/planner.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "catalog/pg_authid_d.h"
#include "utils/acl.h"
#include "utils/backend_status.h"
#include "utils/builtins.h"
#include "utils/elog.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/tuplestore.h"

#include <memlimits.h>

#include "util/prom.h"

PG_MODULE_MAGIC;

/* Bound to the preloaded libmemlimits, NULL without it. */
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

void _PG_init(void);
PG_FUNCTION_INFO_V1(memlimits_activity);
PG_FUNCTION_INFO_V1(memlimits_metrics);

/* ---- Settings ------------------------------------------------------- */

/* In kB, whole numbers (check_limit).  Real settings, not integer
 * ones: an integer setting in kB rounds '1B' to '512B' to 0, which is no
 * limit at all, before any check hook sees it; a real one keeps the
 * fraction, and check_limit refuses it. */
static double statement_limit_kb;       /* memlimits.statement_limit */
static double statement_alloc_limit_kb; /* memlimits.statement_alloc_limit */
static double cluster_limit_kb;         /* memlimits.cluster_limit */

/* 0 is none; a limit is at least 1kB, and a fraction of a kB above that
 * is rounded up ('1025B' is 2kB). */
static bool check_limit(double *newval, void **extra, GucSource source)
{
	if (*newval > 0 && *newval < 1) {
		GUC_check_errdetail("%.0f bytes: a limit under 1kB would "
		                    "stop every statement; 0 means no limit.",
		                    *newval * 1024);
		GUC_check_errhint("Set 0 for none, or a limit of 1kB or more.");
		return false;
	}
	*newval = ceil(*newval);
	return true;
}

/* ---- Statements ------------------------------------------------------ */

/* Depth of our slices on the stack: 0 = no statement code is running, the
 * next hook call is a top-level one. */
static int nesting_level;

/* The task of a statement that was planned and has not started to
 * execute yet (planning at the top level, then ExecutorStart or
 * ProcessUtility adopt it). */
static ml_task *pending_task;

/* The task of a statement in its ExecutorEnd (freed after it). */
static ml_task *ending_task;

/* The task of work that runs outside every statement: what the end of a
 * transaction runs after the statement that caused it has ended
 * (deferred triggers, WITH HOLD cursors materialised at COMMIT).  One for
 * all of it in a transaction, with a statement's limits; made at its
 * first slice, freed at the end of the transaction. */
static ml_task *xact_task;

/* The running portals' tasks: each top-level QueryDesc, from its
 * ExecutorStart to its ExecutorEnd (a portal fetched over several Execute
 * messages is one statement).  Kept in TopMemoryContext; freed at
 * ExecutorEnd, at the statement's error, at the abort of the
 * subtransaction it started in, and at the end of the transaction (an
 * aborted (sub)transaction drops its portals without ExecutorEnd). */
typedef struct stmt_entry {
	struct stmt_entry *next;
	QueryDesc *qd;
	ml_task *task;
	SubTransactionId subid; /* the subtransaction of its ExecutorStart */
} stmt_entry;
static stmt_entry *stmts;

/* The task running now (for memlimits_activity). */
static ml_task *current_task;

static needs_fmgr_hook_type prev_needs_fmgr;
static fmgr_hook_type prev_fmgr;
static planner_hook_type prev_planner;
static ExecutorStart_hook_type prev_ExecutorStart;
static ExecutorRun_hook_type prev_ExecutorRun;
static ExecutorFinish_hook_type prev_ExecutorFinish;
static ExecutorEnd_hook_type prev_ExecutorEnd;
static ProcessUtility_hook_type prev_ProcessUtility;
static shmem_request_hook_type prev_shmem_request;
static shmem_startup_hook_type prev_shmem_startup;

/* ---- Counters, shared between backends (memlimits_metrics) ------------- */

/* Statements started as tasks, and those the library interrupted, by
 * reason (counter_of maps an ml_status to its slot, whatever the
 * values of ml_status). */
enum { C_STARTED, C_ALLOC, C_GLOBAL, C_CANCELLED, C_HELD, C_N };
/* One slot per backend, each on its own cache line: a backend adds only
 * to its own (no line written by every backend at every statement);
 * memlimits_metrics sums them.  A slot outlives its backend: the next
 * backend with that BackendId adds to the same totals. */
typedef union counter_slot {
	pg_atomic_uint64 c[C_N];
	char pad[PG_CACHE_LINE_SIZE];
} counter_slot;
StaticAssertDecl(sizeof(pg_atomic_uint64) * C_N <= PG_CACHE_LINE_SIZE,
                 "counters fit in a cache line");
/* MaxBackends + 1 slots: by MyBackendId, the last one for processes
 * without one. */
static counter_slot *counters;

static void count(unsigned i)
{
	if (!counters)
		return;
	counter_slot *s = MyBackendId != InvalidBackendId && MyBackendId >= 1 &&
	                          MyBackendId <= MaxBackends
	                      ? &counters[MyBackendId - 1]
	                      : &counters[MaxBackends];
	pg_atomic_fetch_add_u64(&s->c[i], 1);
}

/* The slot of an interruption's reason; C_N for a status that is none. */
static unsigned counter_of(ml_status st)
{
	switch (st) {
	case ML_ALLOC_LIMIT:
		return C_ALLOC;
	case ML_GLOBAL_LIMIT:
		return C_GLOBAL;
	case ML_CANCELLED:
		return C_CANCELLED;
	case ML_HELD_LIMIT:
		return C_HELD;
	default:
		return C_N;
	}
}

static bool statements_limited(void)
{
	return statement_limit_kb > 0 || statement_alloc_limit_kb > 0 ||
	       cluster_limit_kb > 0;
}

static uint64_t kb_bytes(double kb)
{
	return kb > 0 ? (uint64_t)kb * 1024 : ML_NO_LIMIT;
}

/* The tasks made by statement_task_new and not yet freed by task_end
 * (memlimits_metrics' memlimits_tasks_open: 1 while it runs, once every
 * statement before it has ended). */
static int open_tasks;

static void reap_retired(void);

static ml_task *statement_task_new(void)
{
	/* A task object that lives for the session and never runs keeps held
	 * tracking on between statements: otherwise the library switches it
	 * off when a statement's task goes and on for the next one, and the
	 * sampled blocks freed in between each look for the last record
	 * (lib/tasks/held.c's drain), about 300 instructions a pgbench -S
	 * transaction. */
	static ml_task *keep_tracking;
	if (!keep_tracking) {
		ml_limits k = ML_LIMITS_INIT;
		keep_tracking = ml_task_new(&k);
	}
	reap_retired();
	ml_limits l = ML_LIMITS_INIT;
	l.delivery = ML_DELIVER_FAIL;
	l.held_bytes = kb_bytes(statement_limit_kb);
	l.alloc_bytes = kb_bytes(statement_alloc_limit_kb);
	l.global = cluster_limit_kb > 0;
	ml_task *task = ml_task_new(&l);
	if (task) { /* NULL (no memory): the statement runs free, uncounted */
		count(C_STARTED);
		open_tasks++;
	}
	return task;
}

/* A statement's task ends (every task is freed here, once): counted as
 * interrupted when the library interrupted it, whether the statement
 * then failed with our error (nearly always) or finished anyway (its
 * refusals let through in a critical section). */
/* Interrupted tasks that have ended, not freed yet: a task's held
 * estimate is what the cluster's budget counts as on its way back while
 * the statement's memory is released (docs/shared.md, "The choice"); the
 * memory goes only with the (sub)transaction's abort, after the error has
 * left the statement, and a task freed before that would leave the
 * budget seeing the memory with no stopped task holding it, and stopping
 * a bystander.  Freed at the next statement's start, when the abort is
 * over; a fixed array, for no allocation on the error's way. */
#define RETIRED_N 8
static ml_task *retired[RETIRED_N];

static void reap_retired(void)
{
	for (int i = 0; i < RETIRED_N; i++)
		if (retired[i]) {
			ml_task_free(retired[i]);
			retired[i] = NULL;
		}
}

static void task_end(ml_task *task)
{
	if (!task)
		return;
	unsigned c = counter_of(ml_task_status(task));
	if (c != C_N)
		count(c);
	open_tasks--;
	if (c != C_N)
		for (int i = 0; i < RETIRED_N; i++)
			if (!retired[i]) {
				retired[i] = task;
				return;
			}
	ml_task_free(task);
}

/* ---- Slices ----------------------------------------------------------- */

typedef struct slice_call {
	void (*fn)(void *);
	void *arg;
	bool failed; /* fn left by an ERROR: thrown again after the slice */
} slice_call;

static void *slice_body(void *p)
{
	slice_call *c = p;
	nesting_level++;
	PG_TRY();
	{
		c->fn(c->arg);
	}
	PG_CATCH();
	{
		/* Caught only to leave ml_task_run by returning: the error
		 * stays on the error stack, thrown again by run_slice. */
		c->failed = true;
	}
	PG_END_TRY();
	nesting_level--;
	return NULL;
}

static void size_text(char *buf, size_t len, uint64_t b)
{
	if (b >= (uint64_t)10 << 30)
		snprintf(buf, len, "%.1f GB", (double)b / (1 << 30));
	else if (b >= (uint64_t)10 << 20)
		snprintf(buf, len, "%.1f MB", (double)b / (1 << 20));
	else
		snprintf(buf, len, "%.1f kB", (double)b / 1024);
}

/* Allocations memlimits refused in this backend (the refusal guard said
 * yes): a slice's ERROR is the limit's only when one was refused during
 * it. */
static uint64 refusals;

/* The stop the cluster's budget asked for with its wake (wake below):
 * set in the signal handler, with QueryCancelPending (the statement's
 * ERROR is then PostgreSQL's cancel, replaced by ours in run_slice) or,
 * for a backend idle in a transaction whose open portal holds the
 * memory, ProcDiePending (PostgreSQL's only way to end a transaction
 * while it waits for its client: the session ends, with our error in
 * place of "terminating connection due to administrator command",
 * rewritten by rewrite_fatal). */
static volatile sig_atomic_t stop_pending;
static volatile sig_atomic_t stop_terminates;

/* The text of the error for task's interruption: its message and DETAIL
 * (palloc'd).  cause: as limit_error's. */
static void limit_text(ml_task *task, const ErrorData *cause, char **message,
                       char **detail)
{
	ml_status st = ml_task_status(task);
	uint64_t held = ml_task_held(task), allocated = ml_task_allocated(task);
	char limit[32], h[32], a[32];
	const char *what, *name;
	switch (st) {
	case ML_ALLOC_LIMIT:
		what = "statement allocation limit";
		name = "memlimits.statement_alloc_limit";
		size_text(limit, sizeof(limit),
		          kb_bytes(statement_alloc_limit_kb));
		break;
	case ML_GLOBAL_LIMIT:
		what = "cluster memory limit";
		name = "memlimits.cluster_limit";
		size_text(limit, sizeof(limit), kb_bytes(cluster_limit_kb));
		break;
	case ML_HELD_LIMIT:
	default:
		what = "statement memory limit";
		name = "memlimits.statement_limit";
		size_text(limit, sizeof(limit), kb_bytes(statement_limit_kb));
		break;
	}
	size_text(h, sizeof(h), held);
	size_text(a, sizeof(a), allocated);
	/* The refused request, as the code that asked for it reported it:
	 * PostgreSQL's own failure names its size in its DETAIL ("Failed on
	 * request of size N in memory context X"); other code's, in its
	 * message (no size: the library does not tell it). */
	StringInfoData req;
	initStringInfo(&req);
	if (cause && cause->sqlerrcode == ERRCODE_OUT_OF_MEMORY &&
	    cause->detail)
		appendStringInfo(&req,
		                 " The refused request (not counted in those): "
		                 "%s",
		                 cause->detail);
	else if (cause && cause->message)
		appendStringInfo(&req,
		                 " The refused request (not counted in those), "
		                 "as its code reported it: %s (SQLSTATE %s).",
		                 cause->message,
		                 unpack_sql_state(cause->sqlerrcode));
	*message = psprintf("memlimits: %s reached", what);
	if (st == ML_GLOBAL_LIMIT) {
		char total[32];
		size_text(total, sizeof(total),
		          ml_shared_usage ? ml_shared_usage() : 0);
		*detail =
		    psprintf("%s is %s; the cluster's backends held about "
		             "%s together, this statement the most of "
		             "them: about %s (it had allocated about %s)."
		             "%s",
		             name, limit, total, h, a, req.data);
	} else
		*detail = psprintf("%s is %s; the statement held about %s and "
		                   "had allocated about %s.%s",
		                   name, limit, h, a, req.data);
	pfree(req.data);
}

/* The statement's ERROR for its task's interruption; frees the task.
 * cause: the ERROR that the refused allocation became (PostgreSQL's
 * "out of memory", or the message of code that reported its own malloc's
 * failure: the regex engine's), NULL when the statement is stopped
 * before it runs again or by the budget's wake. */
static void limit_error(ml_task *task, const ErrorData *cause)
    pg_attribute_noreturn();
static void limit_error(ml_task *task, const ErrorData *cause)
{
	char *message, *detail;
	limit_text(task, cause, &message, &detail);
	task_end(task);
	if (stop_pending) {
		/* The cancel our wake asked for is this error: not the next
		 * statement's. */
		QueryCancelPending = false;
		stop_pending = 0;
	}
	ereport(ERROR,
	        (errcode(ERRCODE_OUT_OF_MEMORY), errmsg_internal("%s", message),
	         errdetail_internal("%s", detail)));
}

/* Run fn(arg) as a slice of the task *owner holds (NULL: plainly).  On
 * an ERROR the task is freed (the statement ends there), *owner set to
 * NULL first, and the error thrown again, or replaced by the limit's when
 * the task was interrupted and an allocation was refused during the
 * slice, whatever the code that asked for it made of the refusal (its
 * own "out of memory", or the regex engine's 2201B): so that the callers
 * need no PG_TRY of their own (a sigsetjmp each).  ends: the statement
 * ends with this call (the caller has let go of the task; it is freed
 * here).  Returns normally only when the statement goes on or ended
 * well. */
static void run_slice(ml_task **owner, void (*fn)(void *), void *arg, bool ends)
{
	ml_task *task = *owner;
	if (!task) {
		fn(arg);
		return;
	}
	if (ml_task_status(task) != ML_OK) {
		/* Interrupted while its refusals were let through (a
		 * critical section, an allocation that handles NULL): the
		 * statement stops at its next step; its end runs plainly. */
		if (ends) {
			fn(arg);
			task_end(task);
			return;
		}
		*owner = NULL;
		limit_error(task, NULL);
	}
	slice_call c = {fn, arg, false};
	MemoryContext cxt = CurrentMemoryContext;
	ml_task *outer = current_task;
	uint64 refused = refusals;
	current_task = task;
	ml_status st = ml_task_run(task, slice_body, &c, NULL);
	current_task = outer;
	if (c.failed) {
		*owner = NULL;
		/* The error is on the error stack: CopyErrorData reads it
		 * (out of ErrorContext), where geterrcode belongs inside
		 * ereport's own processing. */
		/* The error is the limit's when an allocation was refused
		 * during the slice, or when the budget's wake cancelled it
		 * (PostgreSQL's 57014, which PL/pgSQL's WHEN OTHERS does not
		 * catch: it reaches this slice). */
		if (st != ML_OK && (refusals != refused ||
		                    (stop_pending && st == ML_GLOBAL_LIMIT))) {
			MemoryContextSwitchTo(cxt);
			ErrorData *cause = CopyErrorData();
			FlushErrorState();
			if (cause->sqlerrcode == ERRCODE_QUERY_CANCELED &&
			    stop_pending)
				cause = NULL; /* our own cancel: no request
				                 refused */
			limit_error(task, cause);
		}
		task_end(task);
		PG_RE_THROW();
	}
	if (st != ML_OK && !ends) {
		*owner = NULL;
		limit_error(task, NULL);
	}
	if (ends)
		task_end(task);
}

/* Drops qd's entry: its task goes to *task, or is freed (task NULL).
 * False (and *task untouched) when qd has none. */
static bool forget_stmt(QueryDesc *qd, ml_task **task)
{
	for (stmt_entry **p = &stmts; *p; p = &(*p)->next)
		if ((*p)->qd == qd) {
			stmt_entry *e = *p;
			*p = e->next;
			if (task)
				*task = e->task;
			else
				task_end(e->task);
			pfree(e);
			return true;
		}
	return false;
}

static stmt_entry *stmt_entry_of(QueryDesc *qd)
{
	for (stmt_entry *e = stmts; e; e = e->next)
		if (e->qd == qd)
			return e;
	return NULL;
}

/* The end of the transaction: every portal's executor is gone. */
static void xact_end(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_ABORT &&
	    event != XACT_EVENT_PARALLEL_COMMIT &&
	    event != XACT_EVENT_PARALLEL_ABORT && event != XACT_EVENT_PREPARE)
		return;
	while (stmts)
		forget_stmt(stmts->qd, NULL);
	task_end(pending_task);
	pending_task = NULL;
	task_end(ending_task);
	ending_task = NULL;
	task_end(xact_task);
	xact_task = NULL;
}

/* The abort of a subtransaction (an ERROR under SAVEPOINT, ROLLBACK TO):
 * the portals started in it (or in its children: their ids are larger)
 * are dropped without ExecutorEnd, and an ExecutorEnd that failed in it
 * left its task in ending_task.  A PL/pgSQL block's subtransaction that
 * aborts inside a statement has started no entry (entries are made at
 * nesting level 0 only). */
static void subxact_end(SubXactEvent event, SubTransactionId mySubid,
                        SubTransactionId parentSubid, void *arg)
{
	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	for (stmt_entry **p = &stmts; *p;) {
		stmt_entry *e = *p;
		if (e->subid >= mySubid) {
			*p = e->next;
			task_end(e->task);
			pfree(e);
		} else
			p = &e->next;
	}
	task_end(ending_task);
	ending_task = NULL;
}

/* ---- Hooks ----------------------------------------------------------- */

typedef struct planner_call {
	Query *parse;
	const char *query_string;
	int cursor_options;
	ParamListInfo bound_params;
	PlannedStmt *result;
} planner_call;

static void call_planner(void *p)
{
	planner_call *c = p;
	if (prev_planner)
		c->result = prev_planner(c->parse, c->query_string,
		                         c->cursor_options, c->bound_params);
	else
		c->result =
		    standard_planner(c->parse, c->query_string,
		                     c->cursor_options, c->bound_params);
}

static PlannedStmt *ml_planner(Query *parse, const char *query_string,
                               int cursor_options, ParamListInfo bound_params)
{
	planner_call c = {parse, query_string, cursor_options, bound_params,
	                  NULL};
	if (nesting_level > 0 || !statements_limited()) {
		call_planner(&c);
		return c.result;
	}
	/* A statement planned and never started (a Bind whose portal
	 * was not executed) ends here. */
	task_end(pending_task);
	pending_task = statement_task_new();
	run_slice(&pending_task, call_planner, &c, false);
	return c.result;
}

typedef struct executor_call {
	QueryDesc *qd;
	int eflags;
	ScanDirection direction;
	uint64 count;
	bool execute_once;
} executor_call;

static void call_start(void *p)
{
	executor_call *c = p;
	if (prev_ExecutorStart)
		prev_ExecutorStart(c->qd, c->eflags);
	else
		standard_ExecutorStart(c->qd, c->eflags);
}

static void call_run(void *p)
{
	executor_call *c = p;
	if (prev_ExecutorRun)
		prev_ExecutorRun(c->qd, c->direction, c->count,
		                 c->execute_once);
	else
		standard_ExecutorRun(c->qd, c->direction, c->count,
		                     c->execute_once);
}

static void call_finish(void *p)
{
	executor_call *c = p;
	if (prev_ExecutorFinish)
		prev_ExecutorFinish(c->qd);
	else
		standard_ExecutorFinish(c->qd);
}

static void call_end(void *p)
{
	executor_call *c = p;
	if (prev_ExecutorEnd)
		prev_ExecutorEnd(c->qd);
	else
		standard_ExecutorEnd(c->qd);
}

/* The task for work outside every statement (xact_task), made when
 * needed; NULL without limits. */
static ml_task **outside_task(void)
{
	if (!xact_task && statements_limited())
		xact_task = statement_task_new();
	return &xact_task;
}

/* A top-level executor call of qd's statement; its error ends it (its
 * entry stays, with no task, until ExecutorEnd or the transaction's
 * end).  A query with no entry was started inside another statement and
 * runs now outside every statement: a WITH HOLD cursor that DECLARE
 * started, materialised at COMMIT (PersistHoldablePortal). */
static void executor_slice(QueryDesc *qd, void (*fn)(void *), executor_call *c)
{
	stmt_entry *e = stmt_entry_of(qd);
	if (!e) {
		run_slice(outside_task(), fn, c, false);
		return;
	}
	if (!e->task) {
		fn(c);
		return;
	}
	run_slice(&e->task, fn, c, false);
}

static void ml_ExecutorStart(QueryDesc *qd, int eflags)
{
	executor_call c = {qd, eflags};
	if (nesting_level > 0 || !statements_limited()) {
		call_start(&c);
		return;
	}
	ml_task *task = pending_task ? pending_task : statement_task_new();
	pending_task = NULL;
	if (!task) {
		call_start(&c);
		return;
	}
	forget_stmt(qd, NULL); /* a stale entry at a reused address */
	stmt_entry *e = MemoryContextAlloc(TopMemoryContext, sizeof(*e));
	e->qd = qd;
	e->task = task;
	e->subid = GetCurrentSubTransactionId();
	e->next = stmts;
	stmts = e;
	executor_slice(qd, call_start, &c);
}

static void ml_ExecutorRun(QueryDesc *qd, ScanDirection direction, uint64 count,
                           bool execute_once)
{
	executor_call c = {qd, 0, direction, count, execute_once};
	if (nesting_level > 0) {
		call_run(&c);
	} else
		executor_slice(qd, call_run, &c);
}

/* ExecutorFinish runs AFTER triggers and a modifying CTE's remaining
 * rows: a slice for those.  A plain SELECT has none (its functions ran
 * in ExecutorRun); it finishes without a slice, which costs a pgbench -S
 * transaction about 500 instructions (docs/postgresql.md). */
static void ml_ExecutorFinish(QueryDesc *qd)
{
	executor_call c = {qd};
	stmt_entry *e;
	if (nesting_level > 0)
		call_finish(&c);
	else if (qd->operation == CMD_SELECT &&
	         !qd->plannedstmt->hasModifyingCTE &&
	         (!(e = stmt_entry_of(qd)) || !e->task ||
	          ml_task_status(e->task) == ML_OK))
		call_finish(&c);
	else /* (one interrupted is stopped here, by run_slice) */
		executor_slice(qd, call_finish, &c);
}

static void ml_ExecutorEnd(QueryDesc *qd)
{
	executor_call c = {qd};
	if (nesting_level > 0) {
		call_end(&c);
		return;
	}
	/* ExecutorEnd frees (what it allocates is a few bytes): no slice.
	 * The task is freed after it, not before: the last task gone turns
	 * held tracking off, and the executor's sampled blocks freed then
	 * would each look for the last record (held.c's drain), about 700
	 * instructions a pgbench -S transaction.  An ERROR in between leaves
	 * it to the end of the (sub)transaction (ending_task).  A query
	 * without an entry (one a SQL function started, ended here by the
	 * outer query's ExecutorEnd) leaves ending_task alone; one with an
	 * entry ending inside another's ExecutorEnd gives it back after. */
	ml_task *outer = ending_task;
	if (!forget_stmt(qd, &ending_task)) {
		call_end(&c);
		return;
	}
	call_end(&c);
	task_end(ending_task);
	ending_task = outer;
}

typedef struct utility_call {
	PlannedStmt *pstmt;
	const char *query_string;
	bool read_only_tree;
	ProcessUtilityContext context;
	ParamListInfo params;
	QueryEnvironment *query_env;
	DestReceiver *dest;
	QueryCompletion *qc;
} utility_call;

static void call_utility(void *p)
{
	utility_call *c = p;
	if (prev_ProcessUtility)
		prev_ProcessUtility(c->pstmt, c->query_string,
		                    c->read_only_tree, c->context, c->params,
		                    c->query_env, c->dest, c->qc);
	else
		standard_ProcessUtility(
		    c->pstmt, c->query_string, c->read_only_tree, c->context,
		    c->params, c->query_env, c->dest, c->qc);
}

static void ml_ProcessUtility(PlannedStmt *pstmt, const char *query_string,
                              bool read_only_tree,
                              ProcessUtilityContext context,
                              ParamListInfo params, QueryEnvironment *query_env,
                              DestReceiver *dest, QueryCompletion *qc)
{
	utility_call c = {pstmt,  query_string, read_only_tree, context,
	                  params, query_env,    dest,           qc};
	if (nesting_level > 0 || !statements_limited()) {
		call_utility(&c);
		return;
	}
	/* A utility command is a statement of its own: from here to its
	 * return (COMMIT, ROLLBACK and the like included: they run in a
	 * slice, and end the transaction inside it). */
	ml_task *task = pending_task ? pending_task : statement_task_new();
	pending_task = NULL;
	run_slice(&task, call_utility, &c, true);
}

/* ---- Functions called outside every statement ------------------------ */

/* A deferred trigger runs at COMMIT (AfterTriggerFireDeferred in
 * CommitTransaction), after the statement that queued it has ended and
 * outside every hook above: PL/pgSQL's simple expressions (s := s || s)
 * call no planner or executor.  needs_fmgr_hook routes every call of a
 * trigger function through fmgr_security_definer, which calls fmgr_hook
 * before and after it; at nesting level 0 (no statement's slice is
 * running) the hook points the FmgrInfo that is about to be called (the
 * one it is given) at outside_call, which puts the address back and runs
 * the function as a slice of xact_task.  Inside a statement (AFTER
 * triggers in ExecutorFinish, SET CONSTRAINTS ... IMMEDIATE) the hook
 * changes nothing: the statement's slice is running. */
static struct {
	FmgrInfo *flinfo; /* the call armed at FHET_START, NULL when none */
	PGFunction fn;    /* its function */
} armed;

static bool ml_needs_fmgr(Oid fn_oid)
{
	if (prev_needs_fmgr && prev_needs_fmgr(fn_oid))
		return true;
	if (!statements_limited())
		return false;
	HeapTuple tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn_oid));
	if (!HeapTupleIsValid(tup))
		return false;
	bool trigger = ((Form_pg_proc)GETSTRUCT(tup))->prorettype == TRIGGEROID;
	ReleaseSysCache(tup);
	return trigger;
}

typedef struct function_call {
	FunctionCallInfo fcinfo;
	PGFunction fn;
	Datum result;
} function_call;

static void call_function(void *p)
{
	function_call *c = p;
	c->result = c->fn(c->fcinfo);
}

static Datum outside_call(PG_FUNCTION_ARGS)
{
	if (armed.flinfo != fcinfo->flinfo)
		elog(ERROR, "memlimits: a function call that was not armed");
	function_call c = {fcinfo, armed.fn, (Datum)0};
	fcinfo->flinfo->fn_addr = armed.fn;
	armed.flinfo = NULL;
	run_slice(outside_task(), call_function, &c, false);
	return c.result;
}

static void ml_fmgr(FmgrHookEventType event, FmgrInfo *flinfo, Datum *arg)
{
	if (prev_fmgr)
		prev_fmgr(event, flinfo, arg);
	if (event == FHET_START) {
		if (nesting_level == 0 && statements_limited() &&
		    flinfo->fn_addr != outside_call) {
			armed.flinfo = flinfo;
			armed.fn = flinfo->fn_addr;
			flinfo->fn_addr = outside_call;
		}
	} else if (flinfo->fn_addr == outside_call && armed.flinfo == flinfo) {
		/* Armed and not called (an ERROR in between). */
		flinfo->fn_addr = armed.fn;
		armed.flinfo = NULL;
	}
}

/* ---- Refusals --------------------------------------------------------- */

/* Asked inside malloc before a statement's allocation is refused: never in
 * a critical section, where PostgreSQL turns any ERROR into a PANIC (a
 * restart of the whole cluster), nor while the backend exits. */
static bool refusal_ok(void *arg)
{
	if (CritSectionCount != 0 || proc_exit_inprogress)
		return false;
	refusals++; /* a plain store: allowed inside malloc */
	return true;
}

/* ---- Shared memory and the cluster's budget ----------------------------- */

static Size counters_size(void)
{
	return mul_size(add_size(MaxBackends, 1), sizeof(counter_slot));
}

static void cluster_create(void);

static void ml_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	cluster_create();
	RequestAddinShmemSpace(counters_size());
}

static void ml_shmem_startup(void)
{
	bool found;
	if (prev_shmem_startup)
		prev_shmem_startup();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	counters =
	    ShmemInitStruct("memlimits counters", counters_size(), &found);
	if (!found)
		for (int i = 0; i <= MaxBackends; i++)
			for (int j = 0; j < C_N; j++)
				pg_atomic_init_u64(&counters[i].c[j], 0);
	LWLockRelease(AddinShmemInitLock);
}

/* The wake (ml_shared_set_wake's callback), in a signal handler of the
 * backend whose statement the cluster's budget chose: the library has
 * interrupted its task (FAIL delivery: ML_GLOBAL_LIMIT); this makes the
 * backend's wait end, as pg_cancel_backend's SIGINT (StatementCancel-
 * Handler) does: a flag, InterruptPending, the latch.  Its next
 * CHECK_FOR_INTERRUPTS (pg_sleep's, a lock wait's, the executor's) raises
 * the cancel, which run_slice replaces by the 53200 error.  A backend idle
 * in a transaction (an open cursor whose client does not read) ignores a
 * cancel while it reads a command: only ending the session frees what the
 * portal holds, as idle_in_transaction_session_timeout does; its FATAL
 * says why (rewrite_fatal).  Async-signal-safe: stores and SetLatch. */
static void wake(void *arg)
{
	int save_errno = errno;
	(void)arg;
	stop_pending = 1;
	if (MyBEEntry && MyBEEntry->st_state == STATE_IDLEINTRANSACTION) {
		stop_terminates = 1;
		ProcDiePending = true;
	} else
		QueryCancelPending = true;
	InterruptPending = true;
	if (MyLatch)
		SetLatch(MyLatch);
	errno = save_errno;
}

static emit_log_hook_type prev_emit_log;

/* The FATAL that ends a session the wake stopped while it waited for its
 * client: our 53200 error in place of PostgreSQL's words for a SIGTERM,
 * for the client and the log alike. */
static void rewrite_fatal(ErrorData *edata)
{
	if (stop_terminates && edata->elevel == FATAL &&
	    edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN) {
		ml_task *task = NULL;
		for (stmt_entry *e = stmts; e && !task; e = e->next)
			if (e->task &&
			    ml_task_status(e->task) == ML_GLOBAL_LIMIT)
				task = e->task;
		stop_terminates = 0;
		if (task) {
			limit_text(task, NULL, &edata->message, &edata->detail);
			edata->sqlerrcode = ERRCODE_OUT_OF_MEMORY;
			edata->hint =
			    pstrdup("The session was idle in a transaction "
			            "whose open cursor held the memory: "
			            "ending the session was the only way "
			            "to free it.");
		}
	}
	if (prev_emit_log)
		prev_emit_log(edata);
}

/* The cluster's budget: a table with no name (ml_shared_create), made in
 * the postmaster before it forks anything, with a slot for each process it
 * can have at once: every backend is a member from its start (a fork stays
 * a member), nothing is left in /dev/shm, no name can be taken first.
 * From the shmem request hook: MaxBackends is known there, not in
 * _PG_init. */
#define CLUSTER_SLOT_MARGIN 16 /* the syslogger, dead-end backends */
static void cluster_create(void)
{
	if (cluster_limit_kb <= 0)
		return;
	if (!ml_shared_create || !ml_shared_set_wake || !ml_shared_members)
		ereport(
		    FATAL,
		    (errmsg("memlimits: memlimits.cluster_limit needs "
		            "libmemlimits 0.4 (ml_shared_create); set "
		            "memlimits.cluster_limit = 0 or preload a newer "
		            "libmemlimits")));
	uint64_t slots = (uint64_t)MaxBackends + NUM_AUXILIARY_PROCS + 1 +
	                 CLUSTER_SLOT_MARGIN;
	if (slots > 65536)
		ereport(
		    FATAL,
		    (errmsg("memlimits: memlimits.cluster_limit cannot count "
		            "this cluster: its %llu processes at most "
		            "(MaxBackends %d, %d auxiliary, the postmaster, "
		            "%d more) are over a shared budget's 65536; lower "
		            "max_connections or max_worker_processes",
		            (unsigned long long)slots, MaxBackends,
		            NUM_AUXILIARY_PROCS, CLUSTER_SLOT_MARGIN)));
	int rc = ml_shared_set_wake(ML_WAKE_KEEP, wake, NULL);
	if (rc == ML_OK)
		rc = ml_shared_create(kb_bytes(cluster_limit_kb),
		                      (uint32_t)slots);
	if (rc != ML_OK)
		ereport(
		    FATAL,
		    (errmsg(
		        "memlimits: could not make the shared budget for "
		        "memlimits.cluster_limit (%llu slots): ml_status %d",
		        (unsigned long long)slots, rc)));
}

/* ---- Start ------------------------------------------------------------ */

void _PG_init(void)
{
	if (!process_shared_preload_libraries_in_progress)
		ereport(
		    ERROR,
		    (errmsg("memlimits: load it with shared_preload_libraries "
		            "= 'memlimits' (postgresql.conf) and restart")));
	if (!ml_capabilities || !(ml_capabilities() & ML_CAP_INTERPOSED))
		ereport(
		    FATAL,
		    (errmsg("memlimits: libmemlimits is not the server's "
		            "allocator%s: start postgres with "
		            "LD_PRELOAD=libmemlimits.so.0 or use the systemd "
		            "drop-in memlimits.conf (docs/postgresql.md)",
		            ml_capabilities ? "" : " (not loaded)")));
	if (!ml_set_refusal_guard)
		ereport(
		    FATAL,
		    (errmsg("memlimits: the preloaded libmemlimits is older "
		            "than 0.3 (no ml_set_refusal_guard): preload "
		            "libmemlimits 0.3 or newer")));

	DefineCustomRealVariable(
	    "memlimits.statement_limit",
	    "The memory one top-level statement may hold, with everything "
	    "it runs; 0 = none.",
	    NULL, &statement_limit_kb, 0, 0, MAX_KILOBYTES, PGC_SUSET,
	    GUC_UNIT_KB, check_limit, NULL, NULL);
	DefineCustomRealVariable(
	    "memlimits.statement_alloc_limit",
	    "The bytes one top-level statement may allocate through malloc in "
	    "total; 0 = none.",
	    NULL, &statement_alloc_limit_kb, 0, 0, MAX_KILOBYTES, PGC_SUSET,
	    GUC_UNIT_KB, check_limit, NULL, NULL);
	DefineCustomRealVariable(
	    "memlimits.cluster_limit",
	    "The memory all backends of the cluster may hold together: over "
	    "it, the statement that holds the most is stopped; 0 = none.",
	    NULL, &cluster_limit_kb, 0, 0, MAX_KILOBYTES, PGC_POSTMASTER,
	    GUC_UNIT_KB, check_limit, NULL, NULL);
	MarkGUCPrefixReserved("memlimits");

	ml_set_refusal_guard(refusal_ok, NULL);

	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = ml_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = ml_shmem_startup;
	prev_emit_log = emit_log_hook;
	emit_log_hook = rewrite_fatal;
	prev_needs_fmgr = needs_fmgr_hook;
	needs_fmgr_hook = ml_needs_fmgr;
	prev_fmgr = fmgr_hook;
	fmgr_hook = ml_fmgr;
	prev_planner = planner_hook;
	planner_hook = ml_planner;
	prev_ExecutorStart = ExecutorStart_hook;
	ExecutorStart_hook = ml_ExecutorStart;
	prev_ExecutorRun = ExecutorRun_hook;
	ExecutorRun_hook = ml_ExecutorRun;
	prev_ExecutorFinish = ExecutorFinish_hook;
	ExecutorFinish_hook = ml_ExecutorFinish;
	prev_ExecutorEnd = ExecutorEnd_hook;
	ExecutorEnd_hook = ml_ExecutorEnd;
	prev_ProcessUtility = ProcessUtility_hook;
	ProcessUtility_hook = ml_ProcessUtility;
	RegisterXactCallback(xact_end, NULL);
	RegisterSubXactCallback(subxact_end, NULL);
}

/* ---- memlimits_activity() and memlimits_metrics() ----------------------- */

/* The figures shown: the cluster's budget's members (every process of the
 * cluster with memlimits.cluster_limit set: the postmaster, auxiliary
 * processes, backends) as the table has them, no staler than one
 * publication batch (ml_shared_members: it only reads), the calling
 * backend's as of now; without the cluster limit, the calling backend's
 * only.  Other processes' rows only for members of pg_read_all_stats (as
 * pg_stat_statements shows other users' queries). */
typedef struct member_row {
	int32 pid;
	uint64 heap, held;
} member_row;

/* The rows, palloc'd; *n their count. */
static member_row *member_rows(size_t *n)
{
	bool all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	size_t cap = 0, got = 0;
	ml_shared_member *m = NULL;
	if (cluster_limit_kb > 0 && ml_shared_members)
		for (;;) {
			got = ml_shared_members(m, cap);
			if (got <= cap)
				break;
			cap = got + 16;
			m = m ? repalloc(m, cap * sizeof(*m))
			      : palloc(cap * sizeof(*m));
		}
	member_row *r = palloc((got + 1) * sizeof(*r));
	size_t k = 0;
	r[k++] = (member_row){MyProcPid, ml_global_memory_usage(),
	                      current_task ? ml_task_held(current_task) : 0};
	for (size_t i = 0; i < got; i++)
		if (all && !(m[i].flags & ML_SHARED_SELF) &&
		    m[i].pid != MyProcPid)
			r[k++] = (member_row){m[i].pid, m[i].heap, m[i].held};
	if (m)
		pfree(m);
	*n = k;
	return r;
}

Datum memlimits_activity(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *)fcinfo->resultinfo;
	Datum values[3];
	bool nulls[3] = {false, false, false};
	size_t n;
	member_row *r = member_rows(&n);

	InitMaterializedSRF(fcinfo, 0);
	for (size_t i = 0; i < n; i++) {
		values[0] = Int32GetDatum(r[i].pid);
		values[1] = Int64GetDatum((int64)r[i].heap);
		values[2] = Int64GetDatum((int64)r[i].held);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values,
		                     nulls);
	}
	pfree(r);
	return (Datum)0;
}

/* The library's Prometheus writer (lib/util/prom.c, compiled in) into a
 * StringInfo. */
static void put_text(void *sink, const char *t, size_t len)
{
	appendBinaryStringInfo((StringInfo)sink, t, (int)len);
}

/* A family of one sample per row, labelled with the process's pid. */
static void metric_rows(const struct ml__prom *p, const char *name,
                        const char *help, const member_row *r, size_t n,
                        bool held)
{
	ml__prom_family(p, name, "gauge", help);
	for (size_t i = 0; i < n; i++) {
		char pid[16];
		snprintf(pid, sizeof(pid), "%d", (int)r[i].pid);
		const struct ml__prom_label l[] = {{"pid", pid}, {NULL, NULL}};
		ml__prom_sample(p, name, l, held ? r[i].held : r[i].heap);
	}
}

/* The Prometheus text format (0.0.4) for the cluster: the counters of
 * every backend since the server started (shared memory), the processes'
 * heaps (as memlimits_activity), the per-process limit, the cluster's
 * budget, and the calling session's statement limits.  The library's
 * vocabulary (ml_write_metrics): memlimits_global_limit_bytes is the
 * per-process limit, the cluster's budget is memlimits_shared_*, the
 * process is the label pid. */
Datum memlimits_metrics(PG_FUNCTION_ARGS)
{
	static const char *const reasons[C_N] = {
	    [C_ALLOC] = "alloc_limit",
	    [C_GLOBAL] = "global_limit",
	    [C_CANCELLED] = "cancelled",
	    [C_HELD] = "held_limit",
	};
	uint64 sum[C_N] = {0};
	if (counters)
		for (int i = 0; i <= MaxBackends; i++)
			for (int j = 0; j < C_N; j++)
				sum[j] += pg_atomic_read_u64(&counters[i].c[j]);

	StringInfoData s;
	initStringInfo(&s);
	const struct ml__prom p = {.put = put_text, .sink = &s};
	ml__prom_one(&p, "memlimits_tasks_started_total", "counter",
	             "Statements started under a memlimits limit, in every "
	             "backend since the server started.",
	             sum[C_STARTED]);
	ml__prom_family(&p, "memlimits_tasks_interrupted_total", "counter",
	                "Statements interrupted by a limit, by reason "
	                "(alloc_limit: memlimits.statement_alloc_limit, "
	                "held_limit: memlimits.statement_limit, global_limit: "
	                "memlimits.cluster_limit).");
	for (int j = C_STARTED + 1; j < C_N; j++) {
		const struct ml__prom_label l[] = {{"reason", reasons[j]},
		                                   {NULL, NULL}};
		ml__prom_sample(&p, "memlimits_tasks_interrupted_total", l,
		                sum[j]);
	}
	size_t n;
	member_row *r = member_rows(&n);
	metric_rows(&p, "memlimits_heap_bytes",
	            "Heap in use by each process of the cluster, as "
	            "libmemlimits measures it (with memlimits.cluster_limit "
	            "and pg_read_all_stats; the calling backend's otherwise).",
	            r, n, false);
	metric_rows(&p, "memlimits_statement_held_bytes",
	            "The held estimate of the statement each process is "
	            "running; 0 when idle.",
	            r, n, true);
	pfree(r);
	char pid[16];
	snprintf(pid, sizeof(pid), "%d", MyProcPid);
	const struct ml__prom_label me[] = {{"pid", pid}, {NULL, NULL}};
	ml__prom_family(
	    &p, "memlimits_tasks_open", "gauge",
	    "Statement tasks the calling backend has not freed yet: "
	    "the calling statement's, and those of portals kept "
	    "open; the calling backend only.");
	ml__prom_sample(&p, "memlimits_tasks_open", me, (uint64)open_tasks);
	uint64 glimit =
	    ml_global_memory_limit ? ml_global_memory_limit() : ML_NO_LIMIT;
	ml__prom_family(&p, "memlimits_global_limit_bytes", "gauge",
	                "The per-process limit on the heap (the calling "
	                "backend's); +Inf when none is set.");
	if (glimit == ML_NO_LIMIT)
		ml__prom_sample_text(&p, "memlimits_global_limit_bytes", NULL,
		                     "+Inf");
	else
		ml__prom_sample(&p, "memlimits_global_limit_bytes", NULL,
		                glimit);
	if (cluster_limit_kb > 0) {
		ml__prom_one(
		    &p, "memlimits_shared_limit_bytes", "gauge",
		    "memlimits.cluster_limit: the memory all processes "
		    "of the cluster may hold together.",
		    ml_shared_limit ? ml_shared_limit()
		                    : kb_bytes(cluster_limit_kb));
		ml__prom_one(
		    &p, "memlimits_shared_usage_bytes", "gauge",
		    "The heap of all processes of the cluster together, "
		    "as the cluster limit counts it.",
		    ml_shared_usage ? ml_shared_usage() : 0);
	}
	ml__prom_one(&p, "memlimits_statement_limit_bytes", "gauge",
	             "memlimits.statement_limit in the calling session; 0 = "
	             "none.",
	             (uint64)statement_limit_kb * 1024);
	ml__prom_one(&p, "memlimits_statement_alloc_limit_bytes", "gauge",
	             "memlimits.statement_alloc_limit in the calling session; "
	             "0 = none.",
	             (uint64)statement_alloc_limit_kb * 1024);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(s.data, s.len));
}
