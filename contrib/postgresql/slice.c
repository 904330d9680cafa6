/* Statements' tasks and slices: a statement's task is made and ended
 * here, every top-level hook call runs as a slice of it (mlpg_run_slice),
 * and an interrupted task becomes the statement's 53200 error.
 *
 * A statement is a task (FAIL delivery: its allocations fail once it is
 * over its limit, and PostgreSQL turns the failure into its own "out of
 * memory" ERROR, which is replaced here by one that names the limit).
 * ereport(ERROR) leaves by siglongjmp: it must never cross ml_task_run's
 * frame (the library ends a slice only by returning, or by its own jump).
 * So each slice's body catches the error (PG_TRY/PG_CATCH), returns, and
 * the error is thrown again once ml_task_run has returned. */
#include "memlimits_pg.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/memutils.h"

/* Depth of our slices on the stack: 0 = no statement code is running, the
 * next hook call is a top-level one. */
int mlpg_nesting_level;

/* The task running now (for memlimits_activity). */
ml_task *mlpg_current_task;

/* The tasks made by mlpg_statement_task_new and not yet freed by mlpg_task_end
 * (memlimits_metrics' memlimits_tasks_open: 1 while it runs, once every
 * statement before it has ended). */
int mlpg_open_tasks;

static void reap_retired(void);
static ml_task *task_new(const ml_limits *l);

ml_task *mlpg_statement_task_new(void)
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
	l.held_bytes = kb_bytes(mlpg_statement_limit_kb);
	l.alloc_bytes = kb_bytes(mlpg_statement_alloc_limit_kb);
	l.global = mlpg_cluster_limit_kb > 0;
	return task_new(&l);
}

/* A cursor's portal task: statement_limit over what the cursor holds
 * across the statements that run it (they keep their own limits too),
 * and the cluster limit.  No allocation limit: a cursor fetched to its
 * end allocates what it streams. */
ml_task *mlpg_portal_task_new(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.delivery = ML_DELIVER_FAIL;
	l.held_bytes = kb_bytes(mlpg_statement_limit_kb);
	l.global = mlpg_cluster_limit_kb > 0;
	return task_new(&l);
}

/* The transaction's task under memlimits.transaction_limit: every
 * top-level slice of the transaction (its statements', and what runs at
 * its COMMIT) runs nested in a slice of it, so that it holds what they
 * allocated and have not freed, across statements (cursors' state, the
 * queue of deferred triggers, what a statement leaves in the
 * transaction's contexts).  Made at the transaction's first slice,
 * freed at its end; not counted as a statement (memlimits_metrics), not
 * global (the cluster's budget chooses statements). */
static ml_task *txn_task;
/* The transaction ended inside a slice (a procedure's COMMIT or
 * ROLLBACK): its task is freed when the top-level slice returns. */
static bool txn_ended;
bool mlpg_xact_control;

void mlpg_txn_end(void)
{
	if (!txn_task)
		return;
	if (mlpg_nesting_level > 0) {
		txn_ended = true;
		return;
	}
	ml_task_free(txn_task);
	txn_task = NULL;
	txn_ended = false;
}

/* After a top-level slice: the task of a transaction that ended inside
 * it goes. */
static void txn_settle(void)
{
	if (txn_ended && mlpg_nesting_level == 0) {
		txn_ended = false;
		mlpg_txn_end();
	}
}

static ml_task *txn_task_get(void)
{
	if (!txn_task) {
		ml_limits l = ML_LIMITS_INIT;
		l.delivery = ML_DELIVER_FAIL;
		l.held_bytes = kb_bytes(mlpg_transaction_limit_kb);
		txn_task = ml_task_new(&l);
	}
	return txn_task;
}

static ml_task *task_new(const ml_limits *l)
{
	ml_task *task = ml_task_new(l);
	if (task) { /* NULL (no memory): the statement runs free, uncounted */
		mlpg_count(C_STARTED);
		mlpg_open_tasks++;
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

void mlpg_task_end(ml_task *task)
{
	if (!task)
		return;
	unsigned c = mlpg_counter_of(ml_task_status(task));
	if (c != C_N)
		mlpg_count(c);
	mlpg_open_tasks--;
	if (c != C_N)
		for (int i = 0; i < RETIRED_N; i++)
			if (!retired[i]) {
				retired[i] = task;
				return;
			}
	ml_task_free(task);
}

/* Allocations memlimits refused in this backend (the refusal guard said
 * yes): a slice's ERROR is the limit's only when one was refused during
 * it. */
static uint64 refusals;

/* Asked inside malloc before a statement's allocation is refused: never in
 * a critical section, where PostgreSQL turns any ERROR into a PANIC (a
 * restart of the whole cluster), nor while the backend exits. */
bool mlpg_refusal_ok(void *arg)
{
	if (CritSectionCount != 0 || proc_exit_inprogress)
		return false;
	refusals++; /* a plain store: allowed inside malloc */
	return true;
}

typedef struct slice_call {
	void (*fn)(void *);
	void *arg;
	bool failed; /* fn left by an ERROR: thrown again after the slice */
} slice_call;

static void *slice_body(void *p)
{
	slice_call *c = p;
	mlpg_nesting_level++;
	PG_TRY();
	{
		c->fn(c->arg);
	}
	PG_CATCH();
	{
		/* Caught only to leave ml_task_run by returning: the error
		 * stays on the error stack, thrown again by mlpg_run_slice. */
		c->failed = true;
	}
	PG_END_TRY();
	mlpg_nesting_level--;
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

/* What the interrupted task was: a statement's, an open cursor's, the
 * transaction's. */
typedef enum { K_STATEMENT, K_CURSOR, K_TRANSACTION } task_kind;

static void limit_text(ml_task *task, task_kind kind, const ErrorData *cause,
                       char **message, char **detail);

/* The text of the error for task's interruption: its message and DETAIL
 * (palloc'd).  cause: as limit_error's. */
void mlpg_limit_text(ml_task *task, const ErrorData *cause, char **message,
                     char **detail)
{
	limit_text(task, K_STATEMENT, cause, message, detail);
}

static void limit_text(ml_task *task, task_kind kind, const ErrorData *cause,
                       char **message, char **detail)
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
		          kb_bytes(mlpg_statement_alloc_limit_kb));
		break;
	case ML_GLOBAL_LIMIT:
		what = "cluster memory limit";
		name = "memlimits.cluster_limit";
		size_text(limit, sizeof(limit),
		          kb_bytes(mlpg_cluster_limit_kb));
		break;
	case ML_HELD_LIMIT:
	default:
		if (kind == K_TRANSACTION) {
			what = "transaction memory limit";
			name = "memlimits.transaction_limit";
			size_text(limit, sizeof(limit),
			          kb_bytes(mlpg_transaction_limit_kb));
			break;
		}
		what = "statement memory limit";
		name = "memlimits.statement_limit";
		size_text(limit, sizeof(limit),
		          kb_bytes(mlpg_statement_limit_kb));
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
		*detail = psprintf(
		    "%s is %s; %s held about %s and had allocated about %s.%s",
		    name, limit,
		    kind == K_TRANSACTION ? "the transaction's statements"
		    : kind == K_CURSOR    ? "the cursor's fetches (what the "
		                            "cursor kept)"
		                          : "the statement",
		    h, a, req.data);
	pfree(req.data);
}

/* The statement's ERROR for its task's interruption; frees the task.
 * cause: the ERROR that the refused allocation became (PostgreSQL's
 * "out of memory", or the message of code that reported its own malloc's
 * failure: the regex engine's), NULL when the statement is stopped
 * before it runs again or by the budget's wake. */
static void limit_error(ml_task *task, task_kind kind, ml_task *stmt,
                        const ErrorData *cause) pg_attribute_noreturn();
/* task: the one interrupted, of kind; stmt: the statement's own task,
 * ended here too when it is another (NULL: none). */
static void limit_error(ml_task *task, task_kind kind, ml_task *stmt,
                        const ErrorData *cause)
{
	char *message, *detail;
	limit_text(task, kind, cause, &message, &detail);
	if (kind != K_TRANSACTION)
		mlpg_task_end(task);
	if (stmt && stmt != task)
		mlpg_task_end(stmt);
	txn_settle();
	if (mlpg_stop_pending) {
		/* The cancel our wake asked for is this error: not the next
		 * statement's. */
		QueryCancelPending = false;
		mlpg_stop_pending = 0;
	}
	if (kind == K_TRANSACTION)
		ereport(ERROR,
		        (errcode(ERRCODE_OUT_OF_MEMORY),
		         errmsg_internal("%s", message),
		         errdetail_internal("%s", detail),
		         errhint("The transaction is over its limit: its "
		                 "statements fail until it ends.")));
	ereport(ERROR,
	        (errcode(ERRCODE_OUT_OF_MEMORY), errmsg_internal("%s", message),
	         errdetail_internal("%s", detail)));
}

/* The cancel the budget's wake asked for reached a statement that it
 * did not stop: the task stopped is an open cursor's (its portal task,
 * chosen while the session ran another statement).  The statement's
 * error is then the limit's, with the cursor's figures (the transaction's
 * abort frees the cursor); the statement's own task ends here, the
 * portal's with its entry.  Returns when the error is not our cancel. */
static void portal_stop_error(ml_task *task, MemoryContext cxt)
{
	ml_task *portal = mlpg_stopped_portal();
	if (!portal || portal == task)
		return;
	MemoryContextSwitchTo(cxt);
	ErrorData *cause = CopyErrorData();
	if (cause->sqlerrcode != ERRCODE_QUERY_CANCELED) {
		FreeErrorData(cause);
		return;
	}
	FlushErrorState();
	char *message, *detail;
	mlpg_limit_text(portal, NULL, &message, &detail);
	mlpg_task_end(task);
	txn_settle();
	QueryCancelPending = false;
	mlpg_stop_pending = 0;
	ereport(ERROR,
	        (errcode(ERRCODE_OUT_OF_MEMORY), errmsg_internal("%s", message),
	         errdetail_internal("%s", detail),
	         errhint("The memory was held by an open cursor of this "
	                 "transaction.")));
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
/* The kind of the task that owner holds, asked on the error's way only
 * (a cursor's portal task is found in the running portals' list, whose
 * entry stays until its ExecutorEnd; the slice runs at the level it was
 * called at). */
static task_kind kind_of(ml_task **owner)
{
	return mlpg_nesting_level > 0 && mlpg_is_portal_owner(owner)
	           ? K_CURSOR
	           : K_STATEMENT;
}

typedef struct txn_call {
	ml_task *task; /* the statement's (or cursor's) */
	slice_call *c;
	ml_status st; /* its ml_task_run's */
} txn_call;

/* A top-level slice nested in a slice of the transaction's task. */
static void *txn_body(void *p)
{
	txn_call *x = p;
	x->st = ml_task_run(x->task, slice_body, x->c, NULL);
	return NULL;
}

void mlpg_run_slice(ml_task **owner, void (*fn)(void *), void *arg, bool ends)
{
	ml_task *task = *owner;
	bool control = mlpg_xact_control;
	mlpg_xact_control = false;
	if (!task) {
		fn(arg);
		return;
	}
	/* The transaction's task, for a top-level slice.  Once it is over
	 * its limit, the transaction's statements fail before they run but
	 * for those that end it (ROLLBACK, COMMIT, ROLLBACK TO): the memory
	 * goes with the transaction. */
	ml_task *txn = NULL;
	if (mlpg_nesting_level == 0 && mlpg_transaction_limit_kb > 0) {
		txn = txn_task_get();
		if (txn && ml_task_status(txn) != ML_OK) {
			if (control)
				txn = NULL;
			else {
				*owner = NULL;
				limit_error(txn, K_TRANSACTION, task, NULL);
			}
		}
	}
	if (ml_task_status(task) != ML_OK) {
		/* Interrupted while its refusals were let through (a
		 * critical section, an allocation that handles NULL): the
		 * statement stops at its next step; its end runs plainly. */
		if (ends) {
			fn(arg);
			mlpg_task_end(task);
			txn_settle();
			return;
		}
		*owner = NULL;
		limit_error(task, kind_of(owner), NULL, NULL);
	}
	slice_call c = {fn, arg, false};
	MemoryContext cxt = CurrentMemoryContext;
	ml_task *outer = mlpg_current_task;
	uint64 refused = refusals;
	mlpg_current_task = task;
	ml_status st, xst = ML_OK;
	if (txn) {
		txn_call x = {task, &c, ML_OK};
		xst = ml_task_run(txn, txn_body, &x, NULL);
		st = x.st;
	} else
		st = ml_task_run(task, slice_body, &c, NULL);
	mlpg_current_task = outer;
	if (c.failed) {
		*owner = NULL;
		/* The error is on the error stack: CopyErrorData reads it
		 * (out of ErrorContext), where geterrcode belongs inside
		 * ereport's own processing. */
		/* The error is the limit's when an allocation was refused
		 * during the slice, or when the budget's wake cancelled it
		 * (PostgreSQL's 57014, which PL/pgSQL's WHEN OTHERS does not
		 * catch: it reaches this slice).  The statement's own limit
		 * first; else the transaction's. */
		if ((st != ML_OK &&
		     (refusals != refused ||
		      (mlpg_stop_pending && st == ML_GLOBAL_LIMIT))) ||
		    (xst != ML_OK && refusals != refused)) {
			MemoryContextSwitchTo(cxt);
			ErrorData *cause = CopyErrorData();
			FlushErrorState();
			if (cause->sqlerrcode == ERRCODE_QUERY_CANCELED &&
			    mlpg_stop_pending)
				cause = NULL; /* our own cancel: no request
				                 refused */
			else if (cause->sqlerrcode == ERRCODE_OUT_OF_MEMORY &&
			         cause->message &&
			         strncmp(cause->message, "memlimits: ", 11) ==
			             0) {
				/* A nested slice's limit (an open cursor's
				 * portal task, reached in the same FETCH):
				 * its error stands. */
				mlpg_task_end(task);
				txn_settle();
				ReThrowError(cause);
			}
			if (st != ML_OK)
				limit_error(task, kind_of(owner), NULL, cause);
			limit_error(txn, K_TRANSACTION, task, cause);
		}
		if (st == ML_OK && mlpg_stop_pending)
			portal_stop_error(task, cxt);
		mlpg_task_end(task);
		txn_settle();
		PG_RE_THROW();
	}
	if (st != ML_OK && !ends) {
		*owner = NULL;
		limit_error(task, kind_of(owner), NULL, NULL);
	}
	if (xst != ML_OK && !ends) {
		*owner = NULL;
		limit_error(txn, K_TRANSACTION, task, NULL);
	}
	if (ends)
		mlpg_task_end(task);
	txn_settle();
}
