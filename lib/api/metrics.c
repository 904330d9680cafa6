/* ml_write_metrics (issues 29, 33): this process's metrics in the
 * Prometheus text format 0.0.4, through the one writer of that format
 * (util/prom.c).  In the entry points' layer, so that the core library
 * has it without run mode: it reads the tasks layer's counts
 * (tasks/metrics.c, summed over the threads here), the meter, the global
 * limit and the shared budget, all below; run mode adds nothing of its
 * own.  Written from a stack buffer with write(2): no allocation, no
 * stdio. */
#define _GNU_SOURCE
#include "api/api.h"
#include "util/prom.h"

#include <errno.h>
#include <fcntl.h>

static void to_out(void *sink, const char *s, size_t n)
{
	ml__out_put(sink, s, n);
}

/* The label of each reason, by its ml_status. */
static const char *const reasons[] = {
    [ML_ALLOC_LIMIT] = "alloc_limit",
    [ML_GLOBAL_LIMIT] = "global_limit",
    [ML_CANCELLED] = "cancelled",
    [ML_HELD_LIMIT] = "held_limit",
};

ML_EXPORT int ml_write_metrics(int fd)
{
	/* No system call on a descriptor that cannot be one. */
	if (fd < 0) {
		errno = EBADF;
		return ML_EINVAL;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
		errno = EBADF;
		return ML_EINVAL;
	}
	uint64_t m[ML__M_N];
	ml__metrics_sum(m);
	uint64_t limit = atomic_load(&ml__global_limit);
	char buf[4096];
	struct ml__out o = {.buf = buf, .cap = sizeof buf, .fd = fd};
	const struct ml__prom p = {.put = to_out, .sink = &o};
	ml__prom_one(
	    &p, "memlimits_heap_bytes", "gauge",
	    "Heap in use by this process, as the heap meter counts it.",
	    ml__meter_usage());
	ml__prom_one(&p, "memlimits_mapped_bytes", "gauge",
	             "The part of the heap the program mapped itself (private "
	             "anonymous writable mmap).",
	             ml__meter_mapped_now());
	ml__prom_family(&p, "memlimits_global_limit_bytes", "gauge",
	                "The global limit on the heap; +Inf when none is set.");
	if (limit == ML_NO_LIMIT)
		ml__prom_sample_text(&p, "memlimits_global_limit_bytes", NULL,
		                     "+Inf");
	else
		ml__prom_sample(&p, "memlimits_global_limit_bytes", NULL,
		                limit);
	ml__prom_one(&p, "memlimits_shared_usage_bytes", "gauge",
	             "The heap of all members of this process's shared budget; "
	             "0 when not a member.",
	             ml__shared_usage());
	ml__prom_one(&p, "memlimits_samples_total", "counter",
	             "Samples the allocation slow path took.",
	             m[ML__M_SAMPLES]);
	ml__prom_one(
	    &p, "memlimits_tasks_started_total", "counter",
	    "Tasks started: ml_run calls and task objects (not slices).",
	    m[ML__M_STARTED]);
	ml__prom_family(
	    &p, "memlimits_tasks_interrupted_total", "counter",
	    "Tasks interrupted, by the reason of the interruption.");
	for (int st = ML_ALLOC_LIMIT; st <= ML_HELD_LIMIT; st++) {
		const struct ml__prom_label l[] = {{"reason", reasons[st]},
		                                   {NULL, NULL}};
		ml__prom_sample(&p, "memlimits_tasks_interrupted_total", l,
		                m[ML__M_INTERRUPTED + (unsigned)st - 1]);
	}
	ml__prom_one(&p, "memlimits_pressure_callbacks_total", "counter",
	             "Calls of the pressure callback.", m[ML__M_PRESSURE]);
	ml__out_flush(&o, o.len);
	if (o.err) {
		errno = o.err;
		return ML_EINVAL;
	}
	return 0;
}
