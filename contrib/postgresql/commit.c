/* Work at commit: what the end of a transaction runs after the statement
 * that caused it has ended (deferred triggers, WITH HOLD cursors
 * materialised at COMMIT) runs as slices of one task per transaction,
 * with a statement's limits, found through the function manager's hooks
 * and the executor's calls that no statement owns. */
#include "memlimits_pg.h"

#include "access/htup_details.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type_d.h"
#include "utils/syscache.h"

/* The task of work that runs outside every statement: what the end of a
 * transaction runs after the statement that caused it has ended
 * (deferred triggers, WITH HOLD cursors materialised at COMMIT).  One for
 * all of it in a transaction, with a statement's limits; made at its
 * first slice, freed at the end of the transaction. */
static ml_task *xact_task;

static needs_fmgr_hook_type prev_needs_fmgr;
static fmgr_hook_type prev_fmgr;

/* The task for work outside every statement (xact_task), made when
 * needed; NULL without limits. */
ml_task **mlpg_outside_task(void)
{
	if (!xact_task && statements_limited())
		xact_task = mlpg_statement_task_new();
	return &xact_task;
}

/* The end of the transaction: its task ends (statement.c's xact_end). */
void mlpg_outside_end(void)
{
	mlpg_task_end(xact_task);
	xact_task = NULL;
}

/* A deferred trigger runs at COMMIT (AfterTriggerFireDeferred in
 * CommitTransaction), after the statement that queued it has ended and
 * outside every hook above: PL/pgSQL's simple expressions (s := s || s)
 * call no planner or executor.  A deferred unique or exclusion
 * constraint's recheck (unique_key_recheck, a builtin trigger function)
 * evaluates the index's expressions, which may call a user's PL/pgSQL.
 * needs_fmgr_hook routes every call of a trigger function, and of every
 * non-builtin function looked up outside every statement (such an index
 * expression's, prepared by the recheck at COMMIT), through
 * fmgr_security_definer, which calls fmgr_hook
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
	/* Looked up outside every statement's slice: at COMMIT (a deferred
	 * unique or exclusion constraint's recheck preparing its index
	 * expressions, a deferred trigger's function, an ON COMMIT action's
	 * code), at the end of a portal, at a Bind's parameter input.  Every
	 * function that is not builtin (PL/pgSQL, SQL, C of an extension: a
	 * user's code) goes through the hook, whatever it returns, so that
	 * it runs as a slice of the transaction's outside task.  Builtins
	 * never reach here (fmgr_info's fast path). */
	if (mlpg_nesting_level == 0)
		return true;
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
	mlpg_run_slice(mlpg_outside_task(), call_function, &c, false);
	return c.result;
}

static void ml_fmgr(FmgrHookEventType event, FmgrInfo *flinfo, Datum *arg)
{
	if (prev_fmgr)
		prev_fmgr(event, flinfo, arg);
	if (event == FHET_START) {
		if (mlpg_nesting_level == 0 && statements_limited() &&
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

void mlpg_commit_hooks(void)
{
	prev_needs_fmgr = needs_fmgr_hook;
	needs_fmgr_hook = ml_needs_fmgr;
	prev_fmgr = fmgr_hook;
	fmgr_hook = ml_fmgr;
}
