/* tools/cmd-bounds.c compiled in whole for fuzz-cli: its parser is
 * static.  exit() (only --help's) jumps back to the fuzz target. */
#define _GNU_SOURCE
#include <stdlib.h>

#include "fuzz-cli.h"
#define exit fuzz_exit
#include "../tools/cmd-bounds.c"

void fuzz_bounds_parse(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	/* What the computation relies on. */
	if (o.interval == 0 || o.has_limit == o.has_safe || o.ntargets < 1 ||
	    o.ntargets > MAX_TARGETS || o.curve > MAX_CURVE)
		abort();
	/* 2^64-1 is ML_NO_LIMIT: never accepted as a limit. */
	if (o.has_limit && o.limit == UINT64_MAX)
		abort();
	for (int i = 0; i < o.ntargets; i++)
		if (!(o.targets[i] > 0 && o.targets[i] < 1))
			abort();
}
