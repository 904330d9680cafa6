/* A program for tests/cli/test-run-mapped.sh: "map N" maps N mappings of
 * 1 MiB (private, anonymous, writable), writing each, until one fails;
 * "malloc N" allocates N blocks of 1 MiB the same way.  Prints what it
 * got and the errno of the failure, and keeps everything until exit.
 * "mapmalloc N" maps N MiB in mappings of 64 KiB until one fails, then
 * mallocs 2 MiB in blocks of 4 KiB, as a runtime's bookkeeping does on
 * its way out: prints the MiB mapped, the errno and the blocks got.
 * "map N hold": then writes a byte to descriptor 3 and keeps what it
 * mapped until standard input ends (the tree case: both processes hold
 * until both are done). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "hold")))
		return 2;
	int n = atoi(argv[2]), got = 0, err = 0;
	if (!strcmp(argv[1], "mapmalloc")) {
		size_t k = 0;
		for (; k < (size_t)n * 16; k++) {
			void *p = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
			               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) {
				err = errno;
				break;
			}
			memset(p, 1, 64 << 10);
		}
		for (; got < 512; got++) {
			char *volatile p = malloc(4096);
			if (!p)
				break;
			memset(p, 1, 4096);
		}
		printf("mapmalloc %zu errno %s mallocs %d\n", k / 16,
		       err ? strerror(err) : "0", got);
		return 0;
	}
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
	if (argc == 4) {
		fflush(stdout);
		char c = 'r';
		if (write(3, &c, 1) != 1)
			return 3;
		while (read(0, &c, 1) > 0)
			;
	}
	return 0;
}
