/* libFuzzer target: `memlimits plot` (tools/cmd-plot.c) on the bytes of
 * one timeline, read as the command reads it (read_timeline, through
 * ml__svg_read_line, from a stream over exactly those bytes) and, when
 * accepted, drawn (plot) into memory.  A rejected file calls
 * ml__tool_usage_error, which here checks the message and jumps back.  A
 * chart drawn must be whole (it ends with </svg>), carry no control
 * character but line breaks (outside text is escaped), and stay in
 * proportion to its input: at most 64 bytes for each byte read, and
 * 64 KiB more.  Before issue 33, a 300-digit seconds field overran the
 * subtitle (ASan) and seconds of 1.78e308 drew an axis without end (the
 * memory limit). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tools/cmd-plot.c"

#include "usage-jump.h"
#include "svg-target.h"

/* What one input leaves in the command's globals. */
static void reset(void)
{
	free(rows);
	rows = NULL;
	nrows = rows_cap = 0;
	for (int i = 0; i < 4; i++)
		limit[i] = UINT64_MAX;
	program[0] = 0;
	for (size_t i = 0; i < npnames; i++)
		free(pnames[i].name);
	free(pnames);
	pnames = NULL;
	npnames = pnames_cap = 0;
	free(text);
	text = NULL;
	text_cap = 0;
	with_mapped = false; /* a 0.4 header in one input, not the next */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	svg_target(data, size, read_timeline, plot, 64, NULL, reset);
	return 0;
}
