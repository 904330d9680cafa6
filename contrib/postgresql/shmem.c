/* The extension's shared memory areas: the statement counters every
 * backend adds to (memlimits_metrics sums them), requested and set up
 * through the shmem hooks, which also make the cluster's budget
 * (cluster.c) where MaxBackends is known. */
#include "memlimits_pg.h"

#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/backendid.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

static shmem_request_hook_type prev_shmem_request;
static shmem_startup_hook_type prev_shmem_startup;

/* Statements started as tasks, and those the library interrupted, by
 * reason (mlpg_counter_of maps an ml_status to its slot, whatever the
 * values of ml_status). */
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

void mlpg_count(unsigned i)
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
unsigned mlpg_counter_of(ml_status st)
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

static Size counters_size(void)
{
	return mul_size(add_size(MaxBackends, 1), sizeof(counter_slot));
}

static void ml_shmem_request(void)
{
	if (prev_shmem_request)
		prev_shmem_request();
	mlpg_cluster_create();
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

/* The counters of every backend since the server started, summed. */
void mlpg_counters_sum(uint64 sum[C_N])
{
	for (int j = 0; j < C_N; j++)
		sum[j] = 0;
	if (counters)
		for (int i = 0; i <= MaxBackends; i++)
			for (int j = 0; j < C_N; j++)
				sum[j] += pg_atomic_read_u64(&counters[i].c[j]);
}

void mlpg_shmem_hooks(void)
{
	prev_shmem_request = shmem_request_hook;
	shmem_request_hook = ml_shmem_request;
	prev_shmem_startup = shmem_startup_hook;
	shmem_startup_hook = ml_shmem_startup;
}
