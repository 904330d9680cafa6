/* ml_write_metrics (issue 29): this process's metrics in the Prometheus
 * text format 0.0.4.  The counts are the tasks layer's (tasks/metrics.c),
 * summed over the threads here; the gauges are read now.  Written from a
 * stack buffer with write(2): no allocation, no stdio. */
#define _GNU_SOURCE
#include "run/run.h"

#include <errno.h>
#include <fcntl.h>

static void family(struct ml__out *o, const char *name, const char *type,
                   const char *help)
{
	ml__out_puts(o, "# HELP ");
	ml__out_puts(o, name);
	ml__out_puts(o, " ");
	ml__out_puts(o, help);
	ml__out_puts(o, "\n# TYPE ");
	ml__out_puts(o, name);
	ml__out_puts(o, " ");
	ml__out_puts(o, type);
	ml__out_puts(o, "\n");
}

static void sample(struct ml__out *o, const char *name, const char *label,
                   uint64_t v)
{
	ml__out_puts(o, name);
	if (label) {
		ml__out_puts(o, "{reason=\"");
		ml__out_puts(o, label);
		ml__out_puts(o, "\"}");
	}
	ml__out_puts(o, " ");
	ml__out_u(o, v, 10);
	ml__out_puts(o, "\n");
}

static void one(struct ml__out *o, const char *name, const char *type,
                const char *help, uint64_t v)
{
	family(o, name, type, help);
	sample(o, name, NULL, v);
}

/* The reasons, in ML_ALLOC_LIMIT ... ML_HELD_LIMIT order. */
static const char *const reasons[4] = {"alloc_limit", "global_limit",
                                       "cancelled", "held_limit"};

ML_EXPORT int ml_write_metrics(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fd < 0 || fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
		errno = EBADF;
		return ML_EINVAL;
	}
	uint64_t m[ML__M_N];
	ml__metrics_sum(m);
	uint64_t limit = atomic_load(&ml__global_limit);
	char buf[4096];
	struct ml__out o = {.buf = buf, .cap = sizeof buf, .fd = fd};
	one(&o, "memlimits_heap_bytes", "gauge",
	    "Heap in use by this process, as the heap meter counts it.",
	    ml__meter_usage());
	one(&o, "memlimits_mapped_bytes", "gauge",
	    "The part of the heap the program mapped itself (private "
	    "anonymous writable mmap).",
	    ml__meter_mapped_now());
	family(&o, "memlimits_global_limit_bytes", "gauge",
	       "The global limit on the heap; +Inf when none is set.");
	if (limit == ML_NO_LIMIT)
		ml__out_puts(&o, "memlimits_global_limit_bytes +Inf\n");
	else
		sample(&o, "memlimits_global_limit_bytes", NULL, limit);
	one(&o, "memlimits_shared_usage_bytes", "gauge",
	    "The heap of all members of this process's shared budget; 0 "
	    "when not a member.",
	    ml__shared_usage());
	one(&o, "memlimits_samples_total", "counter",
	    "Samples the allocation slow path took.", m[ML__M_SAMPLES]);
	one(&o, "memlimits_tasks_started_total", "counter",
	    "Tasks started: ml_run calls and task objects (not slices).",
	    m[ML__M_STARTED]);
	family(&o, "memlimits_tasks_interrupted_total", "counter",
	       "Tasks interrupted, by the reason of the interruption.");
	for (unsigned i = 0; i < 4; i++)
		sample(&o, "memlimits_tasks_interrupted_total", reasons[i],
		       m[ML__M_INTERRUPTED + i]);
	one(&o, "memlimits_pressure_callbacks_total", "counter",
	    "Calls of the pressure callback.", m[ML__M_PRESSURE]);
	ml__out_flush(&o, o.len);
	if (o.err) {
		errno = o.err;
		return ML_EINVAL;
	}
	return 0;
}
