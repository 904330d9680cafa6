/* The cluster's budget (memlimits.cluster_limit): made in the postmaster
 * with no name before it forks anything, and the wake that makes a
 * backend whose statement the budget chose end its wait (a cancel, or the
 * session when it is idle in a transaction). */
#include "memlimits_pg.h"

#include <errno.h>

#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "utils/backend_status.h"
#include "utils/wait_event.h"

/* The stop the cluster's budget asked for with its wake (wake below):
 * set in the signal handler, with QueryCancelPending (the statement's
 * ERROR is then PostgreSQL's cancel, replaced by ours in mlpg_run_slice) or,
 * for a backend idle in a transaction whose open portal holds the
 * memory (STOP_IDLE), or blocked writing to a client that does not read
 * (STOP_WRITE), ProcDiePending (PostgreSQL's only way to end a
 * transaction while it waits for its client: the session ends, with our
 * error in place of "terminating connection due to administrator
 * command", rewritten by rewrite_fatal). */
volatile sig_atomic_t mlpg_stop_pending;
volatile sig_atomic_t mlpg_stop_terminates;

/* The wake (ml_shared_set_wake's callback), in a signal handler of the
 * backend whose statement the cluster's budget chose: the library has
 * interrupted its task (FAIL delivery: ML_GLOBAL_LIMIT); this makes the
 * backend's wait end, as pg_cancel_backend's SIGINT (StatementCancel-
 * Handler) does: a flag, InterruptPending, the latch.  Its next
 * CHECK_FOR_INTERRUPTS (pg_sleep's, a lock wait's, the executor's) raises
 * the cancel, which mlpg_run_slice replaces by the 53200 error.  A backend idle
 * in a transaction (an open cursor whose client does not read) ignores a
 * cancel while it reads a command: only ending the session frees what the
 * portal holds, as idle_in_transaction_session_timeout does; its FATAL
 * says why (rewrite_fatal).  Async-signal-safe: stores and SetLatch. */
enum { STOP_IDLE = 1, STOP_WRITE = 2 };

static void wake(void *arg)
{
	int save_errno = errno;
	(void)arg;
	mlpg_stop_pending = 1;
	/* Where PostgreSQL takes no cancel: reading a command (idle in a
	 * transaction: ProcessClientReadInterrupt runs a cancel only as an
	 * error of a statement, and there is none), and blocked writing
	 * (ProcessClientWriteInterrupt takes ProcDiePending only). */
	if (MyBEEntry && MyBEEntry->st_state == STATE_IDLEINTRANSACTION) {
		mlpg_stop_terminates = STOP_IDLE;
		ProcDiePending = true;
	} else if (MyProc &&
	           MyProc->wait_event_info == WAIT_EVENT_CLIENT_WRITE) {
		mlpg_stop_terminates = STOP_WRITE;
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
	if (mlpg_stop_terminates && edata->elevel == FATAL &&
	    edata->sqlerrcode == ERRCODE_ADMIN_SHUTDOWN) {
		ml_task *task = mlpg_stopped_portal();
		bool idle = mlpg_stop_terminates == STOP_IDLE;
		mlpg_stop_terminates = 0;
		if (task) {
			mlpg_limit_text(task, NULL, &edata->message,
			                &edata->detail);
			edata->sqlerrcode = ERRCODE_OUT_OF_MEMORY;
			edata->hint = pstrdup(
			    idle ? "The session was idle in a transaction "
			           "whose open cursor held the memory: "
			           "ending the session was the only way "
			           "to free it."
			         : "The session was blocked writing to a "
			           "client that did not read: ending the "
			           "session was the only way to free its "
			           "statement's memory.");
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
void mlpg_cluster_create(void)
{
	if (mlpg_cluster_limit_kb <= 0)
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
		rc = ml_shared_create(kb_bytes(mlpg_cluster_limit_kb),
		                      (uint32_t)slots);
	if (rc != ML_OK)
		ereport(
		    FATAL,
		    (errmsg(
		        "memlimits: could not make the shared budget for "
		        "memlimits.cluster_limit (%llu slots): ml_status %d",
		        (unsigned long long)slots, rc)));
}

void mlpg_cluster_hooks(void)
{
	prev_emit_log = emit_log_hook;
	emit_log_hook = rewrite_fatal;
}
