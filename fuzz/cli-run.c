/* tools/cmd-run.c compiled in whole for fuzz-cli: its parser is static.
 * exit() (only --help's) jumps back to the fuzz target; nothing below
 * parse() is called. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "fuzz-cli.h"
#define exit fuzz_exit
#include "../tools/cmd-run.c"

void fuzz_run_parse(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	/* Accepted: the sizes convert for the environment, and a limit is
	 * never 2^64-1 (ML_NO_LIMIT, which would mean none). */
	if (o.alloc && !strcmp(size_env(o.alloc), "18446744073709551615"))
		abort();
	/* A percentage is passed on as given: it must parse. */
	uint64_t pct;
	if (o.heap && strchr(o.heap, '%') && ml__parse_percent(o.heap, &pct))
		abort();
	if (o.heap && !strchr(o.heap, '%') &&
	    !strcmp(size_env(o.heap), "18446744073709551615"))
		abort();
	if (o.interval && !strcmp(size_env(o.interval), "0"))
		abort(); /* --interval 0 must have been refused */
	if (optind >= argc || !argv[optind][0])
		abort(); /* a missing program must have been refused */
}
