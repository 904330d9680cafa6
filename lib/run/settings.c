/* Run mode's settings: the MEMLIMITS_* variables of `memlimits run`
 * (limits, on-limit action, report, profile and statistics paths), read
 * once at start (run/runmode.c's constructor). */
#define _GNU_SOURCE
#include "run/run.h"

#include <string.h>

struct ml__run ml__run = {.alloc_limit = ML_NO_LIMIT,
                          .heap_limit = ML_NO_LIMIT,
                          .held_limit = ML_NO_LIMIT};

static bool read_size(const char *name, uint64_t *out)
{
	const char *v = ml__getenv(name);
	if (!v)
		return false;
	int r = ml__parse_limit(v, out);
	/* 0 as memlimits run's options take it: refused (a 0-byte limit
	 * runs nothing; unset for none), not a limit of its own. */
	if (r == 0 && *out != 0)
		return true;
	if (r == 0)
		ml__diag("ignoring %s=%s: a limit is at least 1 byte (unset %s "
		         "for none)",
		         name, v, name);
	else if (r == ML__PARSE_NO_LIMIT)
		ml__diag("ignoring %s=%s: 2^64-1 bytes would mean no limit "
		         "(unset %s for none)",
		         name, v, name);
	else
		ml__diag("ignoring %s=%s: expected a size (e.g. 512MiB, 2G)",
		         name, v);
	return false;
}

/* MEMLIMITS_HEAP_LIMIT=P%: P% of what the process may use, read now (its
 * cgroup's memory.max, else physical memory); what it is a percentage of
 * is kept for the report.  True when the value is a percentage, good or
 * not: a bad one is said and leaves *out as it was. */
static char heap_from[ML__PATH_MAX + 64];

static bool read_percent(const char *name, uint64_t *out)
{
	const char *v = ml__getenv(name), *src;
	uint64_t pct;
	if (!v || !strchr(v, '%'))
		return false;
	if (ml__parse_percent(v, &pct) != 0) {
		ml__diag("ignoring %s=%s: expected a percentage above 0 and at "
		         "most 100 (e.g. 80%%, 12.5%%)",
		         name, v);
		return true;
	}
	uint64_t total = ml__memory_total(ML__CGROUP_ROOT, &src);
	if (!src) {
		ml__diag("ignoring %s=%s: the memory size is unknown", name, v);
		return true;
	}
	*out = ml__percent_of(total, pct);
	if (*out == ML_NO_LIMIT)
		(*out)--; /* ML_NO_LIMIT would mean none */
	struct ml__out o = {
	    .buf = heap_from, .cap = sizeof heap_from - 1, .fd = -1};
	ml__out_puts(&o, v);
	ml__out_puts(&o, " of ");
	ml__out_puts(&o, src);
	heap_from[o.len] = 0;
	ml__run.heap_from = heap_from;
	return true;
}

/* Paths are copied at start: a program may overwrite its environment
 * strings (setproctitle: redis, nginx) before we write at exit.  A path
 * that does not fit is refused, never cut short. */
static char report_path[ML__PATH_MAX], profile_path[ML__PATH_MAX],
    stats_dir[ML__PATH_MAX], timeline_path[ML__PATH_MAX];

static const char *read_path(const char *name, char *buf)
{
	const char *v = ml__getenv(name);
	if (!v || !*v)
		return NULL;
	size_t n = strlen(v);
	if (n >= ML__PATH_MAX) {
		ml__diag("ignoring %s: a path of %zu bytes (at most %u)", name,
		         n, ML__PATH_MAX - 1);
		return NULL;
	}
	memcpy(buf, v, n + 1);
	return buf;
}

/* How far before a heap limit L mappings are refused (runmode.c): L/6,
 * at most 64 MiB.  Room for the mallocs a runtime makes on its way out
 * after its mapping was refused, which some never check: V8's collector
 * takes 6 to 20 MiB of worklists then, and writes through a NULL one
 * (a segfault).  Measured with node at L = 262 MiB, ten runs each
 * (docs/mapped.md): L/32 segfaulted in 3 of 3, L/8 ended with V8's own
 * abort in 10 of 10 but one run's RSS reached 1.154 L, L/6 aborted in 10
 * of 10 at 1.05-1.11 L; letting blocks past L once a mapping was refused
 * aborted too, at 1.21-1.23 L.  Capped: beyond 64 MiB the room buys
 * nothing more, and a large limit stays within 64 MiB of its word. */
static uint64_t map_room(uint64_t limit)
{
	uint64_t r = limit / 6, cap = (uint64_t)64 << 20;
	return r < cap ? r : cap;
}

void ml__run_configure(void)
{
	struct ml__run *r = &ml__run;
	uint64_t x;
	if (read_size("MEMLIMITS_ALLOC_LIMIT", &x))
		r->alloc_limit = x;
	if (!read_percent("MEMLIMITS_HEAP_LIMIT", &r->heap_limit) &&
	    read_size("MEMLIMITS_HEAP_LIMIT", &x))
		r->heap_limit = x;
	if (read_size("MEMLIMITS_HELD_LIMIT", &x))
		r->held_limit = x;
	const char *v = ml__getenv("MEMLIMITS_ON_LIMIT");
	if (v) {
		if (!strcmp(v, "fail"))
			r->on_limit = ML__ON_LIMIT_FAIL;
		else if (!strcmp(v, "abort"))
			r->on_limit = ML__ON_LIMIT_ABORT;
		else
			ml__diag(
			    "ignoring MEMLIMITS_ON_LIMIT=%s: expected fail "
			    "or abort",
			    v);
	}
	r->report_path = read_path("MEMLIMITS_REPORT", report_path);
	v = ml__getenv("MEMLIMITS_REPORT_PID");
	if (v && ml__parse_u64(v, &x) != 0)
		ml__diag("ignoring MEMLIMITS_REPORT_PID=%s: expected a process "
		         "id",
		         v);
	else if (v)
		r->report_pid = x;
	r->profile_path = read_path("MEMLIMITS_PROFILE", profile_path);
	r->stats_dir = read_path("MEMLIMITS_STATS_DIR", stats_dir);
	r->timeline_path = read_path("MEMLIMITS_TIMELINE", timeline_path);
	/* A report or profile on stderr is sure to be written: keep a copy
	 * of stderr from now on (diag.c). */
	if (ml__names_stderr(r->report_path) ||
	    ml__names_stderr(r->profile_path) ||
	    ml__names_stderr(r->timeline_path))
		ml__diag_keep();
	/* The tree budget was joined by the core's constructor, before
	 * this one (api/init.c, shared/shared.c). */
	r->tree = ml__getenv("MEMLIMITS_SHARED_TREE") && ml__shared_member();
	if (ml__getenv("MEMLIMITS_SHARED_TREE") && !r->tree)
		ml__diag("not a member of the run's tree budget: this process "
		         "runs without the tree heap limit");
	r->heap_room = map_room(r->heap_limit);
	if (r->tree)
		r->tree_room = map_room(ml__shared_limit());
	r->active = r->tree || r->alloc_limit != ML_NO_LIMIT ||
	            r->heap_limit != ML_NO_LIMIT ||
	            r->held_limit != ML_NO_LIMIT;
	/* The timeline's rows are written at samples: root tasks. */
	r->profiling =
	    r->active || r->profile_path || r->report_path || r->timeline_path;
	r->stats = r->stats_dir != NULL;
	if (!r->active && !r->profiling && !r->stats)
		return;
	uint64_t s = atomic_load(&ml__interval);
	if (r->alloc_limit != ML_NO_LIMIT)
		r->k = ml__samples_needed(r->alloc_limit, s);
	/* Threads fold their samples in batches of k/1024, at most 64
	 * (runmode.c): late by at most (threads - 1)/1024 of the limit, and
	 * one shared write per 64 samples at most. */
	r->batch = r->alloc_limit == ML_NO_LIMIT ? 64
	           : r->k / 1024 > 64            ? 64
	           : r->k / 1024 < 1             ? 1
	                                         : r->k / 1024;
	const char *front = ml__malloc_in_front();
	if (r->heap_limit != ML_NO_LIMIT && (r->heap_blind = front))
		ml__diag("the heap limit is off: the allocator in use (%s) is "
		         "not glibc's, whose heap is all the meter can read%s",
		         r->heap_blind,
		         front ? "; its malloc comes before the library's: "
		                 "no allocation is seen"
		               : "");
	else if (r->heap_limit != ML_NO_LIMIT)
		ml__global_limit_set(r->heap_limit);
	else if (r->timeline_path && !front)
		/* The timeline turns the meter on (memlimits(1), "TIMELINE"):
		 * a limit no heap reaches, as ml_set_global_limit would. */
		ml__global_limit_set(ML_NO_LIMIT - 1);
	if (front && r->heap_limit == ML_NO_LIMIT)
		ml__diag("the malloc of %s comes before the library's: no "
		         "allocation is seen, no limit applies",
		         front);
}
