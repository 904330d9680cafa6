/* The memlimits command: what its subcommands share.
 *
 * A subcommand is a function int main-like (argc, argv), argv[0] being the
 * subcommand's name, that returns the exit status.  To add one, write
 * tools/cmd-NAME.c defining `const struct ml__tool_cmd ml__tool_cmd_NAME`
 * and list it in the table in tools/memlimits.c (run and stats are already
 * listed, as weak references: they appear once their file is linked in). */
#ifndef ML_TOOL_H
#define ML_TOOL_H

#include <getopt.h>
#include <stdint.h>
#include <stdlib.h>

#include "../lib/util/parse.h"

struct ml__tool_cmd {
	const char *name;
	const char *synopsis; /* "[--interval SIZE] ..." for the usage text */
	const char *summary;  /* one line */
	int (*main)(int argc, char **argv);
};

/* The default interval as a string literal ("80000"), for help texts. */
#define ML__TOOL_STR_(x) #x
#define ML__TOOL_STR(x) ML__TOOL_STR_(x)
#define ML__INTERVAL_TEXT ML__TOOL_STR(ML__DEFAULT_INTERVAL)

/* Exit statuses. */
enum { ML__TOOL_OK = 0, ML__TOOL_USAGE = 2 };

/* Bad usage: print "memlimits CMD: MESSAGE" as one line on stderr and
 * exit with status 2. */
_Noreturn void ml__tool_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* calloc(n, size), or the usage error "out of memory" (exit 2): what a
 * command allocates for itself, never NULL to its caller. */
static inline void *ml__tool_calloc(const char *cmd, size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		ml__tool_usage_error(cmd, "out of memory");
	return p;
}

/* The size v of option opt, read by the library's one parser (bytes, or
 * with a binary suffix), or the usage error that names them. */
static inline uint64_t ml__tool_size(const char *cmd, const char *opt,
                                     const char *v)
{
	uint64_t x;
	if (ml__parse_size(v, &x) != 0)
		ml__tool_usage_error(
		    cmd,
		    "invalid size for %s: '%s' (bytes, or with "
		    "a suffix such as 64KiB, 16M, 2G)",
		    opt, v);
	return x;
}

/* getopt_long answered c, ':' (an option without its value) or anything
 * else (an unknown option): the usage error that says so, naming the
 * option as given (argv[prev]: optind before that getopt_long call).
 * Inline: the fuzz targets link the commands' parsers with a stand-in of
 * ml__tool_usage_error and without this file's. */
static inline _Noreturn void
ml__tool_option_error(const char *cmd, int c, int argc, char **argv, int prev)
{
	if (c == ':')
		ml__tool_usage_error(cmd, "option '%s' needs a value",
		                     argv[optind - 1]);
	ml__tool_usage_error(cmd,
	                     "unknown option '%s' (see memlimits %s --help)",
	                     argv[prev < argc ? prev : argc - 1], cmd);
}

/* tools/cmd-stats.c: the "bytes" and "heap_bytes" of one statistics
 * file of `memlimits run --stats` (bad files: one line and status 2). */
void ml__stats_read_stop(const char *path, uint64_t *bytes, uint64_t *heap);

#endif
