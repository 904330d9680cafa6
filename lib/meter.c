/* The global memory meter: live heap bytes, counted as glibc chunk sizes
 * (the usable bytes plus glibc's header word), so that it agrees with
 * glibc's own mallinfo2() accounting and with the memory really taken.
 *
 * It only runs while a global limit is set: then every allocation and free
 * adds its chunk size to a per-thread delta, folded into one atomic total
 * when the thread has allocated or freed ML__METER_BATCH bytes since the last
 * fold, and at every sample of that thread.  The total is therefore exact up to
 * ML__METER_BATCH per other thread.  A limit set late starts from mallinfo2()'s
 * count of bytes in use, which also holds the blocks parked in glibc's
 * per-thread caches; docs/statistics.md ("The global meter") gives the slack.
 */
#define _GNU_SOURCE
#include "internal.h"

#include <malloc.h>

_Atomic bool ml__meter_on_;
_Atomic uint64_t ml__global_limit = ML_NO_LIMIT;
static _Atomic int64_t total;
atomic_flag ml__meter_switch_lock = ATOMIC_FLAG_INIT;

void ml__meter_flush(struct ml__thread *t)
{
	int64_t d = (int64_t)(t->meter_down - t->meter_up);
	if (d)
		atomic_fetch_add_explicit(&total, d, memory_order_relaxed);
	t->meter_up = t->meter_down = ML__METER_BATCH;
}

void ml__meter_add(int64_t bytes)
{
	struct ml__thread *t = &ml__self;
	uint64_t *c = bytes >= 0 ? &t->meter_up : &t->meter_down;
	uint64_t b = bytes >= 0 ? (uint64_t)bytes : -(uint64_t)bytes;
	if (__builtin_sub_overflow(*c, b, c))
		ml__meter_flush(t);
}

static uint64_t glibc_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();
	return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
}

uint64_t ml__meter_usage(void)
{
	if (!ML__METER_ON)
		return glibc_in_use();
	int64_t v = atomic_load_explicit(&total, memory_order_relaxed) +
	            (int64_t)(ml__self.meter_down - ml__self.meter_up);
	return v < 0 ? 0 : (uint64_t)v;
}

ML_EXPORT int ml_set_global_memory_limit(uint64_t bytes)
{
	ml__spin_lock(&ml__meter_switch_lock);
	atomic_store(&ml__global_limit, bytes);
	if (bytes == ML_NO_LIMIT) {
		ml__meter_switch(false);
		atomic_store_explicit(&ml__meter_on_, false,
		                      memory_order_relaxed);
	} else if (!ML__METER_ON) {
		/* Count from now on, starting from glibc's own figure.  Our
		 * own delta is stale from an earlier period: drop it. */
		ml__self.meter_up = ml__self.meter_down = ML__METER_BATCH;
		atomic_store_explicit(&ml__meter_on_, true,
		                      memory_order_relaxed);
		ml__meter_switch(true);
		atomic_store(&total, (int64_t)glibc_in_use());
	}
	ml__spin_unlock(&ml__meter_switch_lock);
	return 0;
}

ML_EXPORT uint64_t ml_global_memory_limit(void)
{
	return atomic_load(&ml__global_limit);
}

ML_EXPORT uint64_t ml_global_memory_usage(void)
{
	return ml__meter_usage();
}
