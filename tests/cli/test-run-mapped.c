/* A program for tests/cli/test-run-mapped.sh: "map N" maps N mappings of
 * 1 MiB (private, anonymous, writable), writing each, until one fails;
 * "malloc N" allocates N blocks of 1 MiB the same way.  Prints what it
 * got and the errno of the failure, and keeps everything until exit. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int n = atoi(argv[2]), got = 0, err = 0;
	for (; got < n; got++) {
		void *p;
		if (!strcmp(argv[1], "map")) {
			p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
			         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				p = NULL;
		} else {
			p = malloc(1 << 20);
		}
		if (!p) {
			err = errno;
			break;
		}
		memset(p, 1, 1 << 20);
	}
	printf("%s %d errno %s\n", argv[1], got, err ? strerror(err) : "0");
	return 0;
}
