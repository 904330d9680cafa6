/* The one input of a picture command's fuzz target (fuzz-plot,
 * fuzz-flamegraph): read from a stream over exactly the input's bytes,
 * drawn into memory when accepted, the picture checked to be whole (it
 * ends with </svg>), to carry no control character but line breaks, and
 * to be at most per_byte bytes for each byte read and 64 KiB more; then
 * the target's own check and the command's globals reset.  A rejected
 * input jumps back through usage-jump.h.  Included after it. */
#ifndef FUZZ_SVG_TARGET_H
#define FUZZ_SVG_TARGET_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void svg_target(const uint8_t *data, size_t size,
                       void (*read_input)(const char *, FILE *),
                       void (*draw_picture)(FILE *, const char *, const char *),
                       size_t per_byte, void (*check_more)(void),
                       void (*reset_globals)(void))
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
		read_input("fuzz", in);
		draw_picture(o, NULL, "fuzz");
		if (fflush(o) != 0)
			abort();
		if (len < 7 || memcmp(svg + len - 7, "</svg>\n", 7) != 0)
			abort();
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)svg[i] < 0x20 && svg[i] != '\n')
				abort();
		if (len > per_byte * size + 65536)
			abort();
		if (check_more)
			check_more();
	}
	fclose(o);
	fclose(in);
	free(svg);
	svg = NULL;
	reset_globals();
}

#endif
