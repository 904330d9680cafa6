/* A program for tests/cli/test-accuracy.sh to run under `memlimits
 * accuracy`:
 *   test-accuracy-prog alloc [MIB]  4 KiB blocks, each freed at once,
 *                                   until one is refused
 *   test-accuracy-prog held [MIB]   4 KiB blocks kept until one is refused
 *   test-accuracy-prog hang         waits for a signal (for --timeout)
 * With MIB it stops after MIB MiB and exits 0: a program that fits under a
 * larger limit.  Without, it allocates at most 16 GiB, so that a run whose
 * limit never fires still ends.  A refusal exits 1 (under --on-limit
 * abort the run ends at the trip before that). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK 4096

/* Keeps the allocations from being optimised out. */
static void *volatile sink;

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "hang")) {
		for (;;)
			pause();
	}
	if (argc < 2 || (strcmp(argv[1], "alloc") && strcmp(argv[1], "held"))) {
		fprintf(stderr, "usage: %s alloc|held [MIB] | hang\n", argv[0]);
		return 2;
	}
	int keep = !strcmp(argv[1], "held");
	unsigned long long max =
	    argc > 2 ? strtoull(argv[2], NULL, 10) << 20 : 16ull << 30;
	for (unsigned long long n = 0; n < max; n += BLOCK) {
		char *p = malloc(BLOCK);
		if (!p)
			return 1;
		p[0] = 1;
		sink = p;
		if (!keep)
			free(p);
	}
	return 0;
}
