/* libFuzzer target: the ELF checks of `memlimits run` (tools/cmd-run.c,
 * check_elf) on the bytes of one file, in a buffer of exactly its size:
 * ASan catches a read past its end, UBSan a misaligned load (a table at
 * an odd offset).  A refused file calls ml__tool_usage_error, which here
 * checks that there is one and jumps back (the real one escapes what the
 * file put in it).  Nothing is executed.  Seeds:
 * tests/cli/make-elf.c's files (tables at odd offsets). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static _Noreturn void fuzz_elf_exit(int status)
{
	(void)status;
	abort(); /* only --help exits, and the parser is not called */
}
#define exit fuzz_elf_exit
#include "../tools/cmd-run.c"
#undef exit

#include "usage-jump.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned char cls;
	static uint16_t machine;
	if (!cls)
		host_ident(&cls, &machine);
	unsigned char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	if (setjmp(back) == 0) {
		check_elf("fuzz", buf, size, cls, machine);
		/* Accepted: an ELF file of this class with its header. */
		if (size < sizeof(Elf64_Ehdr) || memcmp(buf, ELFMAG, SELFMAG) ||
		    buf[EI_CLASS] != cls)
			abort();
	}
	free(buf);
	return 0;
}
