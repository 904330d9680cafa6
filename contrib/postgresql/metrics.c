/* memlimits_metrics(): the Prometheus text for the cluster, written by the
 * library's one writer (lib/util/prom.c, compiled in: ml_prom.c) in the
 * library's vocabulary. */
#include "memlimits_pg.h"

#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "util/prom.h"

#include "memlimits_sql.h"

PG_FUNCTION_INFO_V1(memlimits_metrics);

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
	uint64 sum[C_N];
	mlpg_counters_sum(sum);

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
	member_row *r = mlpg_member_rows(&n);
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
	ml__prom_sample(&p, "memlimits_tasks_open", me,
	                (uint64)mlpg_open_tasks);
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
	if (mlpg_cluster_limit_kb > 0) {
		ml__prom_one(
		    &p, "memlimits_shared_limit_bytes", "gauge",
		    "memlimits.cluster_limit: the memory all processes "
		    "of the cluster may hold together.",
		    ml_shared_limit ? ml_shared_limit()
		                    : kb_bytes(mlpg_cluster_limit_kb));
		ml__prom_one(
		    &p, "memlimits_shared_usage_bytes", "gauge",
		    "The heap of all processes of the cluster together, "
		    "as the cluster limit counts it.",
		    ml_shared_usage ? ml_shared_usage() : 0);
	}
	ml__prom_one(&p, "memlimits_statement_limit_bytes", "gauge",
	             "memlimits.statement_limit in the calling session; 0 = "
	             "none.",
	             (uint64)mlpg_statement_limit_kb * 1024);
	ml__prom_one(&p, "memlimits_statement_alloc_limit_bytes", "gauge",
	             "memlimits.statement_alloc_limit in the calling session; "
	             "0 = none.",
	             (uint64)mlpg_statement_alloc_limit_kb * 1024);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(s.data, s.len));
}
