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

static void check(const char *svg, size_t len, size_t in)
{
	if (len < 7 || memcmp(svg + len - 7, "</svg>\n", 7) != 0)
		abort();
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)svg[i] < 0x20 && svg[i] != '\n')
			abort();
	if (len > 64 * in + 65536)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Read only: fmemopen's "r" never writes to the buffer. */
	FILE *in = fmemopen((void *)data, size, "r");
	/* Static: set by the stream, read after a longjmp. */
	static char *svg;
	static size_t len;
	FILE *o = open_memstream(&svg, &len);
	if (!in || !o)
		abort();
	if (setjmp(back) == 0) {
		read_timeline("fuzz", in);
		plot(o, NULL, "fuzz");
		if (fflush(o) != 0)
			abort();
		check(svg, len, size);
	}
	fclose(o);
	fclose(in);
	free(svg);
	svg = NULL;
	reset();
	return 0;
}
