/* A program for tests/cli/test-run-protect.sh (issue 41, item 6): memory
 * the program makes private through mprotect, pkey_mprotect and
 * protection changes, N chunks of 64 MiB, each filled; prints the mode,
 * the MiB it filled and how it stopped ("ok", or the error).
 *  - "readonly N": map 64 MiB writable, fill it, make it read-only;
 *  - "pkey N": reserve N x 64 MiB (PROT_NONE), commit each chunk with
 *    pkey_mprotect (key -1) and fill it;
 *  - "partial N": reserve 64 MiB and two pages, unmap the first of those
 *    two (a hole), mprotect the whole writable: the kernel changes the
 *    64 MiB before the hole and fails (ENOMEM); the chunk is filled if it
 *    is writable (read(2) from /dev/zero into it says so, EFAULT if not);
 *  - "advise N": map 64 MiB writable, fill it, make it PROT_NONE and give
 *    it back (MADV_DONTNEED), as V8 uncommits: nothing stays. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHUNK ((size_t)64 << 20)
#define PG ((size_t)4096)

static int zero = -1;

/* Is p writable?  read(2) into it fails with EFAULT if not. */
static int writable(char *p)
{
	return read(zero, p, 1) == 1;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	const char *mode = argv[1];
	int n = atoi(argv[2]), got = 0;
	const char *how = "ok";
	zero = open("/dev/zero", O_RDONLY);
	char *res = NULL;
	if (!strcmp(mode, "pkey")) {
		res = mmap(NULL, (size_t)n * CHUNK, PROT_NONE,
		           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (res == MAP_FAILED)
			return 1;
	}
	for (int i = 0; i < n; i++) {
		char *p;
		if (!strcmp(mode, "readonly") || !strcmp(mode, "advise")) {
			p = mmap(NULL, CHUNK, PROT_READ | PROT_WRITE,
			         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED) {
				how = strerror(errno);
				break;
			}
			memset(p, 1, CHUNK);
			if (mprotect(p, CHUNK,
			             *mode == 'r' ? PROT_READ : PROT_NONE) !=
			        0 ||
			    (*mode == 'a' &&
			     madvise(p, CHUNK, MADV_DONTNEED))) {
				how = strerror(errno);
				break;
			}
		} else if (!strcmp(mode, "pkey")) {
			p = res + (size_t)i * CHUNK;
			if (pkey_mprotect(p, CHUNK, PROT_READ | PROT_WRITE,
			                  -1) != 0) {
				how = strerror(errno);
				break;
			}
			memset(p, 1, CHUNK);
		} else if (!strcmp(mode, "partial")) {
			p = mmap(NULL, CHUNK + 2 * PG, PROT_NONE,
			         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED || munmap(p + CHUNK, PG) != 0)
				return 1;
			int r =
			    mprotect(p, CHUNK + 2 * PG, PROT_READ | PROT_WRITE);
			int e = errno;
			if (r == 0)
				return 1; /* the hole: the kernel must fail */
			if (!writable(p) || !writable(p + CHUNK - 1)) {
				how = strerror(e);
				break;
			}
			memset(p, 1, CHUNK);
		} else {
			return 2;
		}
		got++;
	}
	printf("%s %d %s\n", mode, got * 64, how);
	return 0;
}
