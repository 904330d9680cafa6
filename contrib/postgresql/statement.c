/* What a statement is: the planner, executor and utility hooks that find
 * a top-level statement's start and end (simple and extended protocol,
 * portals and cursors: docs/postgresql.md, "What a statement is"), run
 * each of its top-level calls as a slice of its task (slice.c), and end
 * its task at ExecutorEnd, at its error, or with the (sub)transaction. */
#include "memlimits_pg.h"

#include "access/xact.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "optimizer/cost.h"
#include "optimizer/planner.h"
#include "tcop/utility.h"
#include "utils/memutils.h"

/* The task of a statement that was planned and has not started to
 * execute yet (planning at the top level, then ExecutorStart or
 * ProcessUtility adopt it). */
static ml_task *pending_task;

/* The task of a statement in its ExecutorEnd (freed after it). */
static ml_task *ending_task;

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
	bool portal;            /* a cursor's executor (below) */
} stmt_entry;
static stmt_entry *stmts;

/* The executor of a cursor that DECLARE opens (not WITH HOLD) gets a
 * task of its own, a *portal task*, from its ExecutorStart to its
 * ExecutorEnd (CLOSE, the transaction's end): its calls run as slices of
 * it, nested in the DECLARE's or FETCH's own statement task (which keep
 * their limits and meaning).  What the cursor holds between FETCHes
 * (a SCROLL cursor's rows, a materialised CTE's tuplestore) is then held
 * by a live task with the statement limit, so that the FETCH or MOVE
 * that grows it past the limit is stopped (each FETCH's own task holds
 * only what it adds, and ends), and, under the cluster limit, by a live
 * global task, which the cluster's budget can choose while the session
 * is idle in its transaction; the wake ends that session (cluster.c).
 * Set by the DECLARE's ProcessUtility until the cursor's ExecutorStart
 * (one level down) takes it. */
static bool declaring;

static planner_hook_type prev_planner;
static ExecutorStart_hook_type prev_ExecutorStart;
static ExecutorRun_hook_type prev_ExecutorRun;
static ExecutorFinish_hook_type prev_ExecutorFinish;
static ExecutorEnd_hook_type prev_ExecutorEnd;
static ProcessUtility_hook_type prev_ProcessUtility;

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
				mlpg_task_end(e->task);
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
	declaring = false;
	mlpg_task_end(pending_task);
	pending_task = NULL;
	mlpg_task_end(ending_task);
	ending_task = NULL;
	mlpg_outside_end();
	mlpg_txn_end();
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
	declaring = false;
	for (stmt_entry **p = &stmts; *p;) {
		stmt_entry *e = *p;
		if (e->subid >= mySubid) {
			*p = e->next;
			mlpg_task_end(e->task);
			pfree(e);
		} else
			p = &e->next;
	}
	mlpg_task_end(ending_task);
	ending_task = NULL;
}

typedef struct planner_call {
	Query *parse;
	const char *query_string;
	int cursor_options;
	ParamListInfo bound_params;
	PlannedStmt *result;
} planner_call;

static void plan(planner_call *c)
{
	if (prev_planner)
		c->result = prev_planner(c->parse, c->query_string,
		                         c->cursor_options, c->bound_params);
	else
		c->result =
		    standard_planner(c->parse, c->query_string,
		                     c->cursor_options, c->bound_params);
}

/* A parallel hash join builds its table in dynamic shared memory (a DSA
 * area in /dev/shm segments, mapped by the leader and each worker):
 * memory that is no process's heap, which neither the statement's
 * limit nor the cluster's counts, and which grows past work_mem *
 * hash_mem_multiplier when a batch cannot be split.  Under a statement
 * limit (or the cluster's) a statement of a role that is not a superuser
 * is planned without it (enable_parallel_hash off for its planning): its
 * hash joins under Gather build private tables in each process's heap,
 * each bounded by the process's task.  A superuser's plans keep it: a
 * superuser can lift its own limits anyway (and PostgreSQL's regression
 * suite, run as one, keeps its plans). */
static void call_planner(void *p)
{
	planner_call *c = p;
	if (!enable_parallel_hash || max_parallel_workers_per_gather <= 0 ||
	    (mlpg_statement_limit_kb <= 0 && mlpg_cluster_limit_kb <= 0 &&
	     mlpg_transaction_limit_kb <= 0) ||
	    superuser()) {
		plan(c);
		return;
	}
	enable_parallel_hash = false;
	PG_TRY();
	{
		plan(c);
	}
	PG_FINALLY();
	{
		enable_parallel_hash = true;
	}
	PG_END_TRY();
}

static PlannedStmt *ml_planner(Query *parse, const char *query_string,
                               int cursor_options, ParamListInfo bound_params)
{
	planner_call c = {parse, query_string, cursor_options, bound_params,
	                  NULL};
	if (mlpg_nesting_level > 0 || !statements_limited()) {
		call_planner(&c);
		return c.result;
	}
	/* A statement planned and never started (a Bind whose portal
	 * was not executed) ends here. */
	mlpg_task_end(pending_task);
	pending_task = mlpg_statement_task_new();
	mlpg_run_slice(&pending_task, call_planner, &c, false);
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

/* A top-level executor call of qd's statement; its error ends it (its
 * entry stays, with no task, until ExecutorEnd or the transaction's
 * end).  A query with no entry was started inside another statement and
 * runs now outside every statement: a WITH HOLD cursor that DECLARE
 * started, materialised at COMMIT (PersistHoldablePortal). */
static void executor_slice(QueryDesc *qd, void (*fn)(void *), executor_call *c)
{
	stmt_entry *e = stmt_entry_of(qd);
	if (!e) {
		mlpg_run_slice(mlpg_outside_task(), fn, c, false);
		return;
	}
	if (!e->task) {
		fn(c);
		return;
	}
	mlpg_run_slice(&e->task, fn, c, false);
}

/* Record qd's entry with its task. */
static stmt_entry *stmt_add(QueryDesc *qd, ml_task *task, bool portal)
{
	forget_stmt(qd, NULL); /* a stale entry at a reused address */
	stmt_entry *e = MemoryContextAlloc(TopMemoryContext, sizeof(*e));
	e->qd = qd;
	e->task = task;
	e->subid = GetCurrentSubTransactionId();
	e->portal = portal;
	e->next = stmts;
	stmts = e;
	return e;
}

static void ml_ExecutorStart(QueryDesc *qd, int eflags)
{
	executor_call c = {qd, eflags};
	if (mlpg_nesting_level == 1 && declaring) {
		/* The cursor DECLARE opens: its portal task. */
		declaring = false;
		ml_task *task = mlpg_portal_task_new();
		if (task) {
			stmt_add(qd, task, true);
			executor_slice(qd, call_start, &c);
			return;
		}
	}
	if (mlpg_nesting_level > 0 || !statements_limited()) {
		call_start(&c);
		return;
	}
	ml_task *task = pending_task ? pending_task : mlpg_statement_task_new();
	pending_task = NULL;
	if (!task) {
		call_start(&c);
		return;
	}
	stmt_add(qd, task, false);
	executor_slice(qd, call_start, &c);
}

/* A cursor's executor called from inside a statement (FETCH, MOVE):
 * its portal task's entry, NULL for any other. */
static stmt_entry *portal_entry(QueryDesc *qd)
{
	stmt_entry *e =
	    mlpg_nesting_level > 0 && stmts ? stmt_entry_of(qd) : NULL;
	return e && e->portal ? e : NULL;
}

static void ml_ExecutorRun(QueryDesc *qd, ScanDirection direction, uint64 count,
                           bool execute_once)
{
	executor_call c = {qd, 0, direction, count, execute_once};
	if (mlpg_nesting_level > 0 && !portal_entry(qd)) {
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
	if (mlpg_nesting_level > 0)
		call_finish(&c);
	else if (qd->operation == CMD_SELECT &&
	         !qd->plannedstmt->hasModifyingCTE &&
	         (!(e = stmt_entry_of(qd)) || !e->task ||
	          ml_task_status(e->task) == ML_OK))
		call_finish(&c);
	else /* (one interrupted is stopped here, by mlpg_run_slice) */
		executor_slice(qd, call_finish, &c);
}

static void ml_ExecutorEnd(QueryDesc *qd)
{
	executor_call c = {qd};
	if (mlpg_nesting_level > 0) {
		/* A cursor's (CLOSE, the COMMIT's portal cleanup): its
		 * portal task ends after it. */
		ml_task *task = NULL;
		bool portal = portal_entry(qd) && forget_stmt(qd, &task);
		call_end(&c);
		if (portal)
			mlpg_task_end(task);
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
	mlpg_task_end(ending_task);
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
	if (mlpg_nesting_level > 0 || !statements_limited()) {
		call_utility(&c);
		return;
	}
	/* A utility command is a statement of its own: from here to its
	 * return (COMMIT, ROLLBACK and the like included: they run in a
	 * slice, and end the transaction inside it). */
	ml_task *task = pending_task ? pending_task : mlpg_statement_task_new();
	pending_task = NULL;
	declaring = pstmt->utilityStmt &&
	            IsA(pstmt->utilityStmt, DeclareCursorStmt) &&
	            !(((DeclareCursorStmt *)pstmt->utilityStmt)->options &
	              CURSOR_OPT_HOLD);
	mlpg_xact_control =
	    pstmt->utilityStmt && IsA(pstmt->utilityStmt, TransactionStmt);
	mlpg_run_slice(&task, call_utility, &c, true);
	declaring = false;
}

/* The task of an open portal that the cluster's budget stopped (the
 * session ended by the wake while idle in a transaction or blocked
 * writing to its client: cluster.c): a cursor's portal task, or a
 * statement's. */
ml_task *mlpg_stopped_portal(void)
{
	for (stmt_entry *e = stmts; e; e = e->next)
		if (e->task && ml_task_status(e->task) == ML_GLOBAL_LIMIT)
			return e->task;
	return NULL;
}

bool mlpg_is_portal_owner(ml_task **owner)
{
	for (stmt_entry *e = stmts; e; e = e->next)
		if (&e->task == owner)
			return e->portal;
	return false;
}

void mlpg_statement_hooks(void)
{
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
