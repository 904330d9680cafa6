/* A program linked with the library, for tests/cli/test-output.sh: it reads
 * MEMLIMITS_* itself (no LD_PRELOAD needed, so that a setuid copy works),
 * allocates, and at exit the library writes its report, profile and
 * statistics.
 *
 *   test-output-prog alloc MIB     allocate MIB MiB in 1 MiB blocks, kept
 *   test-output-prog closeerr MIB  close stderr after allocating, before
 *                                  exit (as sort's close_stdout does)
 *   test-output-prog wipeenv MIB   overwrite every environment string first
 *                                  (as setproctitle does: redis, nginx)
 * Prints "secure=S euid=U failed=F": AT_SECURE, the effective uid, and how
 * many of the blocks could not be allocated. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

extern char **environ;
void *volatile sink; /* keeps the allocations from being optimised out */

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	long mib = atol(argv[2]), failed = 0;
	if (!strcmp(argv[1], "closeerr")) {
		/* below, after the allocations */
	} else if (!strcmp(argv[1], "wipeenv")) {
		/* The strings lie end to end: clear them as one area, as
		 * setproctitle does to make room for a long title. */
		char *start = environ[0], *end = start;
		for (char **e = environ; *e; e++)
			if (*e + strlen(*e) + 1 > end)
				end = *e + strlen(*e) + 1;
		if (start)
			memset(start, 0, (size_t)(end - start));
	} else if (strcmp(argv[1], "alloc") != 0) {
		return 2;
	}
	for (long i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		if (!p) {
			failed++;
			continue;
		}
		memset(p, 1, 4096);
		sink = p;
	}
	if (!strcmp(argv[1], "closeerr"))
		close(2);
	printf("secure=%lu euid=%u failed=%ld\n", getauxval(AT_SECURE),
	       (unsigned)geteuid(), failed);
	return 0;
}
