/* tools/run-options.c compiled in here for fuzz-cli, so that exit()
 * (only --help's) jumps back to the fuzz target; nothing after the parser
 * is called (tools/run-library.c is linked for the --allocator names). */
#define _GNU_SOURCE
#include <stdlib.h>

#include "fuzz-cli.h"
#define exit fuzz_exit
#include "../tools/run-options.c"

void fuzz_run_parse(int argc, char **argv)
{
	struct ml__run_opts o;
	ml__run_parse(argc, argv, &o);
	/* Accepted: the sizes convert for the environment, and a limit is
	 * never 2^64-1 (ML_NO_LIMIT, which would mean none). */
	if (o.alloc &&
	    !strcmp(ml__run_size_env(o.alloc), "18446744073709551615"))
		abort();
	/* A percentage is passed on as given: it must parse. */
	uint64_t pct;
	if (o.heap && strchr(o.heap, '%') && ml__parse_percent(o.heap, &pct))
		abort();
	if (o.heap && !strchr(o.heap, '%') &&
	    !strcmp(ml__run_size_env(o.heap), "18446744073709551615"))
		abort();
	if (o.interval && !strcmp(ml__run_size_env(o.interval), "0"))
		abort(); /* --interval 0 must have been refused */
	if (optind >= argc || !argv[optind][0])
		abort(); /* a missing program must have been refused */
}
