/* memlimits run: the environment the program starts with.  Owns the
 * MEMLIMITS_* variables of the run and LD_PRELOAD, --verbose's account of
 * them (with the MEMLIMITS_* variables inherited), and the warning for an
 * env command that would start its program without them. */
#include "config.h"

#define _GNU_SOURCE
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../lib/util/util.h"
#include "../lib/sampler/sampler.h"
#include "run.h"
#include "tool.h"

/* `memlimits run -- env LD_PRELOAD=x prog` (or env -i, env -u LD_PRELOAD):
 * env runs under the library, but starts prog without it, so prog runs
 * without limits.  Nothing can see that happen at run time without
 * interposing exec (the library is not in prog at all), so the command
 * line is read for this common case and a warning printed; the general
 * rule is in memlimits(1). */
void ml__run_warn_env_drops_library(const char *path, char **argv)
{
	const char *base = strrchr(path, '/');
	if (strcmp(base ? base + 1 : path, "env"))
		return;
	const char *why = NULL;
	for (int i = 1; argv[i] && !why; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "--"))
			continue;
		if (!strcmp(a, "-") || !strcmp(a, "-i") ||
		    !strcmp(a, "--ignore-environment")) {
			why = "empties the environment";
		} else if (!strcmp(a, "--unset=LD_PRELOAD") ||
		           !strcmp(a, "-uLD_PRELOAD") ||
		           ((!strcmp(a, "-u") || !strcmp(a, "--unset")) &&
		            argv[i + 1] && !strcmp(argv[++i], "LD_PRELOAD"))) {
			why = "unsets LD_PRELOAD";
		} else if (!strncmp(a, "LD_PRELOAD=", 11)) {
			if (!strstr(a, LIBNAME))
				why = "replaces LD_PRELOAD";
		} else if (a[0] == '-' && a[1] != '-' && strchr(a, 'i') &&
		           strspn(a + 1, "i0v") == strlen(a + 1)) {
			why = "empties the environment"; /* -iv */
		} else if (a[0] != '-' && !strchr(a, '=')) {
			break; /* the command env starts */
		}
	}
	if (why)
		fprintf(stderr,
		        "memlimits run: warning: env %s: the program it starts "
		        "runs without the library (no limits)\n",
		        why);
}

static void set(const char *name, const char *v)
{
	if (v ? setenv(name, v, 1) : unsetenv(name))
		ml__tool_usage_error(CMD, "cannot set %s", name);
}

/* The run's settings are exactly these: nothing inherited from an
 * enclosing run. */
void ml__run_set_limits(const struct ml__run_opts *o, const char *report,
                        const char *profile, const char *stats,
                        const char *timeline)
{
	set("MEMLIMITS_ALLOC_LIMIT",
	    o->alloc ? ml__run_size_env(o->alloc) : NULL);
	set("MEMLIMITS_HEAP_LIMIT", !o->heap || strchr(o->heap, '%')
	                                ? o->heap
	                                : ml__run_size_env(o->heap));
	set("MEMLIMITS_HELD_LIMIT", o->held ? ml__run_size_env(o->held) : NULL);
	set("MEMLIMITS_SAMPLE_INTERVAL",
	    o->interval ? ml__run_size_env(o->interval) : NULL);
	set("MEMLIMITS_SEED", o->seed);
	set("MEMLIMITS_ON_LIMIT", o->on_limit);
	set("MEMLIMITS_MAPPED", o->no_mapped ? "0" : NULL);
	set("MEMLIMITS_REPORT", report);
	/* The report file gets PROGRAM's report (exec keeps this pid) and
	 * those of processes that reach a limit: a test suite's hundreds of
	 * "limit reached: none" reports buried the one that mattered. */
	char pid[24];
	snprintf(pid, sizeof pid, "%ld", (long)getpid());
	/* Without a report file, the same process alone names the pictures'
	 * commands on stderr when no limit is reached (lib/run/report.c). */
	bool one = report ? !o->report_all : profile || timeline;
	set("MEMLIMITS_REPORT_PID", one ? pid : NULL);
	set("MEMLIMITS_PROFILE", profile);
	set("MEMLIMITS_STATS_DIR", stats);
	set("MEMLIMITS_TIMELINE", timeline);
	/* One origin for the program and its children: now. */
	char start[48] = "";
	struct timespec ts;
	if (timeline && clock_gettime(CLOCK_REALTIME, &ts) == 0)
		snprintf(start, sizeof start, "%lld.%09ld",
		         (long long)ts.tv_sec, ts.tv_nsec);
	set("MEMLIMITS_TIMELINE_START", *start ? start : NULL);
}

/* The allocator right after the library: the one it forwards to. */
void ml__run_set_preload(const char *lib, const char *alloc)
{
	const char *old = getenv("LD_PRELOAD");
	char *preload;
	if (asprintf(&preload, "%s%s%s%s%s", lib, alloc ? ":" : "",
	             alloc ? alloc : "", old && *old ? ":" : "",
	             old ? old : "") < 0)
		ml__tool_usage_error(CMD, "out of memory");
	set("LD_PRELOAD", preload);
}

/* One line of --verbose: "memlimits run: NAME = VALUE (SOURCE)". */
static void say(const char *name, const char *value, const char *source)
{
	fprintf(stderr, "memlimits run: %s = %s (%s)\n", name, value, source);
}

/* A percentage, with what it is a percentage of here; each process
 * reads that again at start (lib/run/settings.c). */
static void say_percent(const char *name, const char *pct, const char *source)
{
	uint64_t p = 0;
	ml__parse_percent(pct, &p);
	const char *of;
	uint64_t total = ml__memory_total(ML__CGROUP_ROOT, &of);
	if (!of) {
		fprintf(stderr,
		        "memlimits run: %s = %s of a memory size that cannot "
		        "be read: ignored (%s)\n",
		        name, pct, source);
		return;
	}
	fprintf(stderr,
	        "memlimits run: %s = %" PRIu64 " bytes = %s of %s, read "
	        "again by each process at start (%s)\n",
	        name, ml__percent_of(total, p), pct, of, source);
}

/* --verbose: the settings the program starts with, each with where it
 * comes from.  The run's own variables are set above; MEMLIMITS_DELIVERY
 * and any other MEMLIMITS_* variable pass through from our environment
 * and act on the program too: a linked program's ml_run tasks take the
 * default delivery from MEMLIMITS_DELIVERY (memlimits(3)). */
void ml__run_print_settings(const struct ml__run_opts *o, const char *lib,
                            const char *path)
{
	say("program", path, "PROGRAM");
	say("library", lib, "LD_PRELOAD");
	say("allocator",
	    o->allocator ? o->allocator
	                 : "glibc's, or the one the program links (jemalloc, "
	                   "tcmalloc, mimalloc)",
	    o->allocator ? "--allocator" : "default");
	say("alloc limit", o->alloc ? o->alloc : "none",
	    o->alloc ? "--alloc-limit" : "default");
	if (o->heap && strchr(o->heap, '%'))
		say_percent("heap limit", o->heap, "--heap-limit");
	else
		say("heap limit", o->heap ? o->heap : "none",
		    o->heap ? "--heap-limit" : "default");
	say("held limit", o->held ? o->held : "none",
	    o->held ? "--held-limit" : "default");
	if (o->tree)
		ml__run_tree_describe(o->tree);
	else
		say("tree heap limit", "none", "default");
	say("on limit", o->on_limit ? o->on_limit : "fail",
	    o->on_limit ? "--on-limit" : "default");
	say("mapped memory",
	    o->no_mapped ? "not counted"
	                 : "counted as heap (private anonymous writable "
	                   "mmap, sbrk, IPC_PRIVATE shmat)",
	    o->no_mapped ? "--no-mapped" : "default");
	say("not counted",
	    "shared and file-backed mappings, SysV segments with a key, "
	    "memory mapped by raw system calls",
	    "always");
	say("sample interval", o->interval ? o->interval : ML__INTERVAL_TEXT,
	    o->interval ? "--interval" : "default");
	say("seed", o->seed ? o->seed : "the library's fixed seed",
	    o->seed ? "--seed" : "default");
	say("report", o->report ? o->report : "stderr, when a limit is reached",
	    o->report ? "--report" : "default");
	if (o->report)
		say("report written by",
		    o->report_all
		        ? "every process"
		        : "PROGRAM and each process that reaches a limit",
		    o->report_all ? "--report-all" : "default");
	say("profile", o->profile ? o->profile : "none",
	    o->profile ? "--profile" : "default");
	say("statistics", o->stats ? o->stats : "none",
	    o->stats ? "--stats" : "default");
	say("timeline", o->timeline ? o->timeline : "none",
	    o->timeline ? "--timeline" : "default");
	if (o->timeline && !o->heap)
		say("heap meter", "on, for the timeline (no heap limit)",
		    "--timeline");
	const char *d = getenv("MEMLIMITS_DELIVERY");
	if (!d)
		say("default delivery", "jump", "default");
	else if (!strcmp(d, "jump") || !strcmp(d, "fail") || !strcmp(d, "flag"))
		say("default delivery", d,
		    "inherited MEMLIMITS_DELIVERY: the program's own ml_run "
		    "tasks that ask for the default use it");
	else
		say("default delivery", "jump",
		    "inherited MEMLIMITS_DELIVERY is not jump, fail or flag: "
		    "the library ignores it");
	extern char **environ;
	static const char *const own[] = {
	    "MEMLIMITS_ALLOC_LIMIT=",    "MEMLIMITS_HEAP_LIMIT=",
	    "MEMLIMITS_HELD_LIMIT=",     "MEMLIMITS_SAMPLE_INTERVAL=",
	    "MEMLIMITS_SEED=",           "MEMLIMITS_ON_LIMIT=",
	    "MEMLIMITS_REPORT=",         "MEMLIMITS_PROFILE=",
	    "MEMLIMITS_STATS_DIR=",      "MEMLIMITS_DELIVERY=",
	    "MEMLIMITS_REPORT_PID=",     "MEMLIMITS_TIMELINE=",
	    "MEMLIMITS_TIMELINE_START=", "MEMLIMITS_SHARED=",
	    "MEMLIMITS_SHARED_TREE=",    "MEMLIMITS_MAPPED="};
	for (char **e = environ; e && *e; e++) {
		if (strncmp(*e, "MEMLIMITS_", 10))
			continue;
		bool known = false;
		for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
			known |= !strncmp(*e, own[i], strlen(own[i]));
		/* Ours only where --tree-heap-limit set them. */
		if (!o->tree && !strncmp(*e, "MEMLIMITS_SHARED", 16))
			known = false;
		if (!known)
			fprintf(stderr, "memlimits run: %s (inherited)\n", *e);
	}
}
