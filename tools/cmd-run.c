/* memlimits run: an unmodified program under limits.  Sets MEMLIMITS_*,
 * prepends the library to LD_PRELOAD and execs the program, which (with
 * its children) then runs as one task per thread (lib/run/runmode.c).
 * With --tree-heap-limit it forks the program instead and waits for it,
 * to remove the run's shared budget when it ends (tools/run-tree.c).
 *
 * This file is the command's flow; each step is in a file of its own
 * (tools/run.h lists them).  Everything that would make the limits
 * silently not apply is refused before anything runs (run-elf.c), and
 * the output files are only created once the program has passed. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "run.h"
#include "tool.h"

static int run_main(int argc, char **argv)
{
	/* SIGCHLD inherited as ignored (SIG_IGN survives exec) reaps
	 * children without a status: --tree-heap-limit's wait would see
	 * none, and neither would a program that waits for its own.  The
	 * program starts with the default in both modes; every other
	 * disposition and the mask reach it as a plain exec gives them
	 * (nohup's SIGHUP stays ignored; tools/run-tree.c). */
	signal(SIGCHLD, SIG_DFL);
	struct ml__run_opts o;
	ml__run_parse(argc, argv, &o);
	char **prog = argv + optind;
	char *path = ml__run_find_program(prog[0]);
	ml__run_check_program(prog[0], path, 0);
	ml__run_warn_env_drops_library(path, prog);
	char *lib = ml__run_find_library();

	char *stats = o.stats ? ml__run_stats_dir(o.stats) : NULL;
	char *report = o.report ? ml__run_out_file("--report", o.report) : NULL;
	char *profile =
	    o.profile ? ml__run_out_file("--profile", o.profile) : NULL;
	char *timeline =
	    o.timeline ? ml__run_out_file("--timeline", o.timeline) : NULL;
	if (profile)
		ml__run_held_files_clear(profile);
	ml__run_set_limits(&o, report, profile, stats, timeline);

	char *alloc = o.allocator ? ml__run_find_allocator(o.allocator) : NULL;
	/* Another allocator than the one the program links: it runs as
	 * asked (a user may mean to compare them), but not silently. */
	const char *linked = ml__run_linked_allocator();
	if (o.allocator && linked &&
	    strcmp(o.allocator, ml__run_allocator_name(linked)))
		fprintf(stderr,
		        "memlimits run: warning: '%s' is linked with %s; "
		        "--allocator %s %s\n",
		        path, linked, o.allocator,
		        alloc ? "replaces it (its allocations go to the one "
		                "preloaded)"
		              : "preloads nothing: it keeps its own");
	ml__run_set_preload(lib, alloc);
	if (o.tree)
		ml__run_tree_make(o.tree);
	if (o.verbose)
		ml__run_print_settings(&o, lib, path);

	fflush(NULL);
	if (o.tree)
		ml__run_tree_exec(path, prog); /* forks and waits */
	execv(path, prog);
	ml__tool_usage_error(CMD, "cannot run '%s': %s", path, strerror(errno));
}

const struct ml__tool_cmd ml__tool_cmd_run = {
    .name = "run",
    .synopsis = ml__run_synopsis,
    .summary = "run an unmodified program under memory limits, with a "
               "report",
    .main = run_main,
};
