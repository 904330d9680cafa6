/* The SQL functions' rows: memlimits_activity(), one row per process of
 * the cluster (its heap, its statement's held estimate) as the cluster's
 * budget's table has them, and the same rows for memlimits_metrics(). */
#include "memlimits_pg.h"

#include "catalog/pg_authid_d.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/tuplestore.h"

#include "memlimits_sql.h"

PG_FUNCTION_INFO_V1(memlimits_activity);

/* The figures shown: the cluster's budget's members (every process of the
 * cluster with memlimits.cluster_limit set: the postmaster, auxiliary
 * processes, backends) as the table has them, no staler than one
 * publication batch (ml_shared_members: it only reads), the calling
 * backend's as of now; without the cluster limit, the calling backend's
 * only.  Other processes' rows only for members of pg_read_all_stats (as
 * pg_stat_statements shows other users' queries). */
/* The rows, palloc'd; *n their count. */
member_row *mlpg_member_rows(size_t *n)
{
	bool all = has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	size_t cap = 0, got = 0;
	ml_shared_member *m = NULL;
	if (mlpg_cluster_limit_kb > 0 && ml_shared_members)
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
	r[k++] = (member_row){
	    MyProcPid, ml_global_memory_usage(),
	    mlpg_current_task ? ml_task_held(mlpg_current_task) : 0};
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
	member_row *r = mlpg_member_rows(&n);

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
