/* libFuzzer target: `memlimits flamegraph` (tools/cmd-flamegraph.c) on
 * the bytes of one collapsed-stack profile, read as the command reads it
 * (read_profile, through ml__svg_read_line, from a stream over exactly
 * those bytes) and, when accepted, drawn (flamegraph) into memory.  A
 * rejected file calls ml__tool_usage_error, which here checks the message
 * and jumps back.  A picture drawn must be whole (it ends with </svg>),
 * carry no control character but line breaks (names are escaped), draw
 * no more frames than the profile has, and stay in proportion to its
 * input: at most 512 bytes for each byte read (a frame can be one byte,
 * ";", and is drawn in about 200), and 64 KiB more.  Before issue 33, a
 * stack of 50 000 frames overflowed the C stack in draw(). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "../tools/cmd-flamegraph.c"

#include "usage-jump.h"
#include "svg-target.h"

/* What one input leaves in the command's globals. */
static void reset(void)
{
	for (uint32_t i = 0; i < nnames; i++)
		free(names[i].s);
	free(names);
	names = NULL;
	nnames = names_cap = 0;
	free(name_index.slot);
	name_index.slot = NULL;
	name_index.size = 0;
	free(nodes);
	nodes = NULL;
	nnodes = nodes_cap = 0;
	free(kid_index.slot);
	kid_index.slot = NULL;
	kid_index.size = 0;
	free(kids);
	kids = NULL;
	free(levels);
	levels = NULL;
	free(text);
	text = NULL;
	text_cap = 0;
	nstacks = drawn = merged_blocks = 0;
	memset(&held_info, 0, sizeof held_info);
}

/* Each node drawn once at most, a merged block under a node. */
static void check(void)
{
	if (drawn > 2 * (uint64_t)nnodes)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	svg_target(data, size, read_profile, flamegraph, 512, check, reset);
	return 0;
}
