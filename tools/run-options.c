/* memlimits run: its command line.  Owns --help, the parsing and checking
 * of every option, and the files and directory the options name (made
 * absolute, so that a program changing directory still writes where the
 * user meant). */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/util/util.h"
#include "../lib/sampler/sampler.h"
#include "run.h"
#include "tool.h"

const char ml__run_synopsis[] =
    "[--alloc-limit SIZE] [--heap-limit SIZE|P%] [--held-limit SIZE] "
    "[--tree-heap-limit SIZE|P%] "
    "[--interval SIZE] [--seed N] [--allocator NAME] "
    "[--on-limit fail|abort] [--report FILE] [--report-all] [--profile FILE] "
    "[--stats DIR] [--timeline FILE] "
    "[--verbose] -- PROGRAM [ARG...]";

static void help(void)
{
	printf("Usage: memlimits run %s\n\n", ml__run_synopsis);
	printf(
	    "Run PROGRAM (and its children) with the memlimits library "
	    "preloaded: every\nthread of every process runs as a task under "
	    "these limits (memlimits(1)).\n\n"
	    "  --alloc-limit SIZE  stop after about SIZE bytes allocated by "
	    "all threads of\n"
	    "                      a process together (estimated from the "
	    "samples)\n"
	    "  --heap-limit SIZE   refuse allocations that would take the "
	    "heap of a process\n"
	    "                      over SIZE bytes (malloc returns NULL, "
	    "ENOMEM)\n"
	    "  --heap-limit P%%     the same with P%% of the cgroup's "
	    "memory.max (cgroup v2),\n"
	    "                      or of physical memory where it sets "
	    "none, read by each\n"
	    "                      process at start\n"
	    "  --held-limit SIZE   refuse allocations that would take the "
	    "bytes all threads\n"
	    "                      of a process hold (not yet freed, "
	    "estimated from the\n"
	    "                      samples) to SIZE\n"
	    "  --tree-heap-limit SIZE\n"
	    "  --tree-heap-limit P%%\n"
	    "                      refuse allocations that would take the "
	    "heap of PROGRAM and\n"
	    "                      all its descendants together over SIZE "
	    "(P%% as for\n"
	    "                      --heap-limit, read once now); PROGRAM then "
	    "runs as a child\n"
	    "                      of memlimits run, which waits for it\n"
	    "  --no-mapped         count only the malloc family's blocks, not "
	    "the memory the\n"
	    "                      program maps itself (mmap: CPython's "
	    "arenas, the JVM,\n"
	    "                      V8), which counts as heap by default\n"
	    "  --interval SIZE     the mean sample interval (default " ML__INTERVAL_TEXT
	    " "
	    "bytes)\n"
	    "  --seed N            seed the sampler (reproducible runs)\n"
	    "  --allocator NAME    glibc (default), jemalloc, tcmalloc or "
	    "mimalloc: preload\n"
	    "                      that allocator behind the library\n"
	    "  --on-limit fail     allocations fail once a limit is reached "
	    "(default)\n"
	    "  --on-limit abort    write the report and exit with status 3\n"
	    "  --report FILE       write the report to FILE (default: stderr, "
	    "only when a\n"
	    "                      limit is reached); %%p in FILE is the "
	    "process id.  Only\n"
	    "                      PROGRAM and the processes that reach a "
	    "limit write one\n"
	    "  --report-all        with --report FILE: every process writes "
	    "its report\n"
	    "  --profile FILE      write a heap profile of sampled bytes in "
	    "collapsed-stack\n"
	    "                      format; draw it with 'memlimits flamegraph "
	    "FILE'\n"
	    "  --timeline FILE     write the heap over time to FILE (TSV; "
	    "turns the heap\n"
	    "                      meter on); draw it with 'memlimits plot "
	    "FILE'\n"
	    "  --stats DIR         write sampling statistics to "
	    "DIR/memlimits.PID.json\n"
	    "                      (merge them with 'memlimits stats DIR')\n"
	    "  --verbose           print the settings in force before "
	    "starting PROGRAM,\n"
	    "                      inherited MEMLIMITS_* variables too\n\n"
	    "Each process gets its own budget, but for --tree-heap-limit.  "
	    "Exit status: the program's; "
	    "3 when a limit\nwas reached with --on-limit abort; 2 on bad "
	    "usage (nothing is run).\n");
}

static void size_opt(const char *name, const char *v, bool nonzero, bool limit)
{
	uint64_t x;
	int r = limit ? ml__parse_limit(v, &x) : ml__parse_size(v, &x);
	if (r == ML__PARSE_NO_LIMIT)
		ml__tool_usage_error(CMD,
		                     "%s '%s': 2^64-1 bytes would mean no "
		                     "limit (leave the option out for none)",
		                     name, v);
	if (r != 0)
		ml__tool_usage_error(CMD,
		                     "invalid size for %s: '%s' (bytes, or "
		                     "with a suffix: 64MiB, 1.5G)",
		                     name, v);
	if ((nonzero || limit) && x == 0)
		ml__tool_usage_error(CMD, "%s must be at least 1 byte%s", name,
		                     limit ? " (a 0-byte limit runs nothing: "
		                             "leave the option out for none)"
		                           : "");
}

/* P%: passed on as it is, each process reads its memory size at start. */
static void percent_opt(const char *name, const char *v)
{
	uint64_t x;
	if (ml__parse_percent(v, &x) != 0)
		ml__tool_usage_error(CMD,
		                     "invalid percentage for %s: '%s' (above 0 "
		                     "and at most 100: 80%%, 12.5%%)",
		                     name, v);
}

/* One canonical form for the environment: plain bytes. */
char *ml__run_size_env(const char *v)
{
	static char bufs[3][24];
	static int next;
	uint64_t x = 0;
	ml__parse_size(v, &x);
	char *b = bufs[next++ % 3];
	snprintf(b, sizeof bufs[0], "%" PRIu64, x);
	return b;
}

static char *absolute(const char *p)
{
	if (p[0] == '/')
		return strdup(p);
	char cwd[PATH_MAX];
	if (!getcwd(cwd, sizeof cwd))
		ml__tool_usage_error(CMD,
		                     "cannot find the current directory: %s",
		                     strerror(errno));
	size_t n = strlen(cwd) + strlen(p) + 2;
	char *r = malloc(n);
	if (!r)
		ml__tool_usage_error(CMD, "out of memory");
	/* ml__tool_usage_error does not return (cppcheck misses it). */
	// cppcheck-suppress nullPointerRedundantCheck
	snprintf(r, n, "%s/%s", cwd, p);
	return r;
}

/* FILE.peak and FILE.stop, the held profiles beside FILE, are appended to
 * by the processes that have one: a stale one from an earlier run goes
 * first (a .stop exists only where a limit stopped a process). */
void ml__run_held_files_clear(const char *profile)
{
	static const char *const suffix[] = {".peak", ".stop"};
	if (strstr(profile, "%p"))
		return;
	for (int i = 0; i < 2; i++) {
		char *p;
		struct stat st;
		if (asprintf(&p, "%s%s", profile, suffix[i]) < 0)
			ml__tool_usage_error(CMD, "out of memory");
		if (lstat(p, &st) == 0 && S_ISREG(st.st_mode) && unlink(p) != 0)
			ml__tool_usage_error(CMD, "cannot remove '%s': %s", p,
			                     strerror(errno));
		free(p);
	}
}

/* The report and profile files are appended to by every process of the
 * run: start them empty (unless they are per-process, with %p). */
char *ml__run_out_file(const char *opt, const char *v)
{
	if (!*v)
		ml__tool_usage_error(CMD, "%s needs a file name", opt);
	char *p = absolute(v);
	if (strstr(p, "%p")) {
		char *dir = strdup(p);
		*strrchr(dir, '/') = 0;
		struct stat st;
		if (stat(*dir ? dir : "/", &st) != 0 || !S_ISDIR(st.st_mode))
			ml__tool_usage_error(CMD, "%s: no directory for '%s'",
			                     opt, v);
		free(dir);
		return p;
	}
	/* Never block on a FIFO (ENXIO without a reader); truncate only a
	 * regular file that is not our own stdout or stderr. */
	int fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
	              0644);
	if (fd < 0 && errno != ENXIO)
		ml__tool_usage_error(CMD, "cannot write %s '%s': %s", opt, v,
		                     strerror(errno));
	struct stat st, out, err;
	bool ok = fd >= 0 && fstat(fd, &st) == 0;
	bool is_out = ok && fstat(1, &out) == 0 && out.st_dev == st.st_dev &&
	              out.st_ino == st.st_ino;
	bool is_err = ok && fstat(2, &err) == 0 && err.st_dev == st.st_dev &&
	              err.st_ino == st.st_ino;
	if (!ok ||
	    !(S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) || is_out || is_err))
		ml__tool_usage_error(CMD,
		                     "%s '%s' is not a regular file or a "
		                     "terminal",
		                     opt, v);
	if (S_ISREG(st.st_mode) && !is_out && !is_err && ftruncate(fd, 0) != 0)
		ml__tool_usage_error(CMD, "cannot write %s '%s': %s", opt, v,
		                     strerror(errno));
	close(fd);
	return p;
}

void ml__run_parse(int argc, char **argv, struct ml__run_opts *o)
{
	enum {
		O_ALLOC = 256,
		O_HEAP,
		O_HELD,
		O_TREE,
		O_ALLOCATOR,
		O_INTERVAL,
		O_SEED,
		O_ON_LIMIT,
		O_REPORT,
		O_PROFILE,
		O_STATS,
		O_TIMELINE,
		O_VERBOSE,
		O_REPORT_ALL,
		O_NO_MAPPED,
		O_HELP
	};
	static const struct option longopts[] = {
	    {"alloc-limit", required_argument, NULL, O_ALLOC},
	    {"heap-limit", required_argument, NULL, O_HEAP},
	    {"held-limit", required_argument, NULL, O_HELD},
	    {"tree-heap-limit", required_argument, NULL, O_TREE},
	    {"allocator", required_argument, NULL, O_ALLOCATOR},
	    {"interval", required_argument, NULL, O_INTERVAL},
	    {"seed", required_argument, NULL, O_SEED},
	    {"on-limit", required_argument, NULL, O_ON_LIMIT},
	    {"report", required_argument, NULL, O_REPORT},
	    {"report-all", no_argument, NULL, O_REPORT_ALL},
	    {"profile", required_argument, NULL, O_PROFILE},
	    {"stats", required_argument, NULL, O_STATS},
	    {"timeline", required_argument, NULL, O_TIMELINE},
	    {"verbose", no_argument, NULL, O_VERBOSE},
	    {"no-mapped", no_argument, NULL, O_NO_MAPPED},
	    {"help", no_argument, NULL, O_HELP},
	    {NULL, 0, NULL, 0},
	};
	*o = (struct ml__run_opts){0};
	opterr = 0;
	optind = 1;
	for (;;) {
		int prev = optind;
		int c = getopt_long(argc, argv, "+:h", longopts, NULL);
		if (c == -1)
			break;
		switch (c) {
		case O_ALLOC:
			size_opt("--alloc-limit", optarg, false, true);
			o->alloc = optarg;
			break;
		case O_HEAP:
			if (strchr(optarg, '%'))
				percent_opt("--heap-limit", optarg);
			else
				size_opt("--heap-limit", optarg, false, true);
			o->heap = optarg;
			break;
		case O_TREE:
			if (strchr(optarg, '%'))
				percent_opt("--tree-heap-limit", optarg);
			else
				size_opt("--tree-heap-limit", optarg, true,
				         true);
			o->tree = optarg;
			break;
		case O_ALLOCATOR:
			if (!ml__run_allocator_soname(optarg))
				ml__tool_usage_error(
				    CMD,
				    "invalid --allocator '%s' (glibc, jemalloc, "
				    "tcmalloc or mimalloc)",
				    optarg);
			o->allocator = optarg;
			break;
		case O_HELD:
			size_opt("--held-limit", optarg, false, true);
			o->held = optarg;
			break;
		case O_INTERVAL:
			size_opt("--interval", optarg, true, false);
			o->interval = optarg;
			break;
		case O_SEED: {
			uint64_t x;
			if (ml__parse_u64(optarg, &x))
				ml__tool_usage_error(
				    CMD,
				    "invalid --seed '%s' (an unsigned 64-bit "
				    "integer)",
				    optarg);
			o->seed = optarg;
			break;
		}
		case O_ON_LIMIT:
			if (strcmp(optarg, "fail") && strcmp(optarg, "abort"))
				ml__tool_usage_error(
				    CMD,
				    "invalid --on-limit '%s' (fail or abort)",
				    optarg);
			o->on_limit = optarg;
			break;
		case O_REPORT:
			o->report = optarg;
			break;
		case O_REPORT_ALL:
			o->report_all = true;
			break;
		case O_PROFILE:
			o->profile = optarg;
			break;
		case O_STATS:
			o->stats = optarg;
			break;
		case O_TIMELINE:
			o->timeline = optarg;
			break;
		case O_VERBOSE:
			o->verbose = true;
			break;
		case O_NO_MAPPED:
			o->no_mapped = true;
			break;
		case 'h':
		case O_HELP:
			help();
			exit(ML__TOOL_OK);
		default:
			ml__tool_option_error(CMD, c, argc, argv, prev);
		}
	}
	if (optind >= argc)
		ml__tool_usage_error(CMD, "missing program (memlimits run "
		                          "[OPTION]... -- PROGRAM [ARG]...)");
	if (!argv[optind][0])
		ml__tool_usage_error(CMD, "empty program name");
	if (o->report_all && !o->report)
		ml__tool_usage_error(CMD, "--report-all needs --report FILE");
}

char *ml__run_stats_dir(const char *v)
{
	struct stat st;
	if (!*v || stat(v, &st) != 0 || !S_ISDIR(st.st_mode) ||
	    access(v, W_OK | X_OK) != 0)
		ml__tool_usage_error(
		    CMD, "--stats '%s' is not a writable directory", v);
	return absolute(v);
}
