/* libFuzzer target: the JSON reader of `memlimits stats`
 * (tools/cmd-stats.c, parse_file), on the bytes of one file.  The file is
 * handed over without a terminating NUL, in a buffer of exactly its size,
 * so ASan catches any read past its end.  A rejected file calls
 * ml__tool_usage_error, which here checks the message and jumps back; an
 * accepted one must satisfy what the table relies on. */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tools/cmd-stats.c"

#include "usage-jump.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > MAX_FILE)
		return 0;
	char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	static struct proc pr;
	if (setjmp(back) == 0) {
		parse_file("fuzz.json", buf, size, &pr);
		uint64_t hc = 0, hs = 0;
		for (int i = 0; i < NBUCKETS; i++) {
			hc += pr.hist[i];
			hs += pr.hist_sampled[i];
			if (pr.hist_sampled[i] > pr.hist[i])
				abort();
		}
		if (pr.interval == 0 || pr.sampled_allocs > pr.allocs ||
		    hc != pr.allocs || hs != pr.sampled_allocs ||
		    (pr.samples && pr.samples > UINT64_MAX / pr.interval) ||
		    pr.program[sizeof pr.program - 1] != 0)
			abort();
	}
	free(buf);
	return 0;
}
