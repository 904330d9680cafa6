/* memlimits: a memory limit per statement, and one for the whole cluster,
 * for PostgreSQL (docs/postgresql.md).  This file: the settings and the
 * start (_PG_init), which installs the other files' hooks.
 *
 * Loaded with shared_preload_libraries = 'memlimits' into a server whose
 * allocator is libmemlimits (LD_PRELOAD, or the systemd drop-in
 * contrib/postgresql/memlimits.conf): _PG_init refuses to start the
 * server otherwise.  The library is not linked in: the ml_ functions are
 * weak references, bound to the preloaded library (as the nginx module
 * does), so that a server started without it gets one FATAL line naming
 * the fix instead of a loader error.  The files, one job each: slice.c
 * (tasks and slices), statement.c (what a statement is), commit.c (work
 * at commit), shmem.c (shared memory areas), cluster.c (the cluster's
 * budget), sql.c (memlimits_activity), metrics.c (memlimits_metrics). */
#include "memlimits_pg.h"

#include <limits.h>
#include <math.h>

#include "miscadmin.h"
#include "utils/guc.h"

PG_MODULE_MAGIC;

void _PG_init(void);

/* In kB, whole numbers (check_limit).  Real settings, not integer
 * ones: an integer setting in kB rounds '1B' to '512B' to 0, which is no
 * limit at all, before any check hook sees it; a real one keeps the
 * fraction, and check_limit refuses it. */
double mlpg_statement_limit_kb;       /* memlimits.statement_limit */
double mlpg_statement_alloc_limit_kb; /* memlimits.statement_alloc_limit */
double mlpg_cluster_limit_kb;         /* memlimits.cluster_limit */
double mlpg_transaction_limit_kb;     /* memlimits.transaction_limit */

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
	    NULL, &mlpg_statement_limit_kb, 0, 0, MAX_KILOBYTES, PGC_SUSET,
	    GUC_UNIT_KB, check_limit, NULL, NULL);
	DefineCustomRealVariable(
	    "memlimits.statement_alloc_limit",
	    "The bytes one top-level statement may allocate through malloc in "
	    "total; 0 = none.",
	    NULL, &mlpg_statement_alloc_limit_kb, 0, 0, MAX_KILOBYTES,
	    PGC_SUSET, GUC_UNIT_KB, check_limit, NULL, NULL);
	DefineCustomRealVariable(
	    "memlimits.transaction_limit",
	    "The memory one transaction may hold across its statements, with "
	    "what it runs at COMMIT; 0 = none.",
	    NULL, &mlpg_transaction_limit_kb, 0, 0, MAX_KILOBYTES, PGC_SUSET,
	    GUC_UNIT_KB, check_limit, NULL, NULL);
	DefineCustomRealVariable(
	    "memlimits.cluster_limit",
	    "The memory all backends of the cluster may hold together: over "
	    "it, the statement that holds the most is stopped; 0 = none.",
	    NULL, &mlpg_cluster_limit_kb, 0, 0, MAX_KILOBYTES, PGC_POSTMASTER,
	    GUC_UNIT_KB, check_limit, NULL, NULL);
	MarkGUCPrefixReserved("memlimits");

	ml_set_refusal_guard(mlpg_refusal_ok, NULL);

	mlpg_shmem_hooks();
	mlpg_cluster_hooks();
	mlpg_commit_hooks();
	mlpg_statement_hooks();
}
