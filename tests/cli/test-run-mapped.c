/* A program for tests/cli/test-run-mapped.sh: "map N" maps N mappings of
 * 1 MiB (private, anonymous, writable), writing each, until one fails;
 * "malloc N" allocates N blocks of 1 MiB the same way.  Prints what it
 * got and the errno of the failure, and keeps everything until exit.
 * "mapmalloc N" maps N MiB in mappings of 64 KiB until one fails, then
 * mallocs 2 MiB in blocks of 4 KiB, as a runtime's bookkeeping does on
 * its way out: prints the MiB mapped, the errno and the blocks got.
 * "mapv8 N": the same, then mallocs 14 MiB in blocks of 4112 bytes, as
 * V8's scavenger does for its worklists after its mapping was refused
 * (6 to 14 MiB measured, docs/mapped.md), never checking for NULL.
 * "bigmalloc N": mallocs 4 N MiB in one block (refused under the test's
 * limit), then N MiB in one block, writes it, frees it and exits with
 * no allocation after it (sort's buffer: the timeline must show it).
 * "mapretry N": maps N MiB in mappings of 64 KiB until one fails, then
 * tries 200 more (Ruby's heap pages, retried after each garbage
 * collection): prints the MiB mapped and how many of the 200 it got.
 * "regrow N": mallocs N MiB, writes it, reallocs it to 3 N / 2 MiB (git's
 * buffer grown by half) and says whether the realloc got it.
 * "ahead N" (the JVM's commits): maps N MiB writable and writes 1 MiB
 * of it, maps N MiB more, then writes both whole and maps 1 MiB at a
 * time (16 at most): prints whether the second got and whether one of
 * the 1 MiB was then refused.  "grow N" (PHP's huge blocks): maps N MiB,
 * writes it, grows it by 16 MiB with mremap, writes it, and grows it by
 * 16 MiB once more: prints whether each growth got.
 * "unseen N": maps N MiB by a raw system call (no count sees it: Go's
 * runtime, a static binary's), writes it, then mallocs 1 MiB blocks,
 * writing each, until one fails: prints the MiB of blocks got.
 * "map N hold": then writes a byte to descriptor 3 and keeps what it
 * mapped until standard input ends (the tree case: both processes hold
 * until both are done). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3 && !(argc == 4 && !strcmp(argv[3], "hold")))
		return 2;
	int n = atoi(argv[2]), got = 0, err = 0;
	if (!strcmp(argv[1], "bigmalloc")) {
		size_t big = (size_t)n << 20;
		char *volatile no = malloc(4 * big); /* not elided */
		int refused = no == NULL;
		free(no);
		/* volatile: clang elides a malloc, memset and free whose
		 * block is never read (the UBSan build's test saw no block). */
		char *volatile p = malloc(big);
		if (!p)
			return 1;
		memset(p, 1, big);
		/* No allocation after the block (printf's buffer could be
		 * sampled): the row must come from the block itself. */
		static const char msg[] = "bigmalloc\n";
		int fail =
		    !refused || write(1, msg, sizeof msg - 1) != sizeof msg - 1;
		free(p);
		return fail;
	}
	if (!strcmp(argv[1], "mapretry")) {
		size_t k = 0;
		for (; k < (size_t)n * 16; k++) {
			void *p = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
			               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
			if (p == MAP_FAILED)
				break;
			memset(p, 1, 64 << 10);
		}
		for (int i = 0; i < 200; i++)
			if (mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
			         MAP_PRIVATE | MAP_ANONYMOUS, -1,
			         0) != MAP_FAILED)
				got++;
		printf("mapretry %zu retries got %d\n", k / 16, got);
		return 0;
	}
	if (!strcmp(argv[1], "ahead") || !strcmp(argv[1], "grow")) {
		size_t a = (size_t)n << 20, step = 16 << 20;
		int rw = PROT_READ | PROT_WRITE,
		    pa = MAP_PRIVATE | MAP_ANONYMOUS;
		char *p = mmap(NULL, a, rw, pa, -1, 0), *q;
		const char *second = "got", *third = "got";
		if (p == MAP_FAILED) {
			printf("%s first %s\n", argv[1], strerror(errno));
			return 0;
		}
		if (argv[1][0] == 'a') {
			memset(p, 1, 1 << 20);
			q = mmap(NULL, a, rw, pa, -1, 0);
			if (q == MAP_FAILED)
				second = strerror(errno);
			else {
				memset(p, 1, a);
				memset(q, 1, a);
			}
			for (int i = 0; i < 16; i++)
				if (mmap(NULL, 1 << 20, rw, pa, -1, 0) ==
				    MAP_FAILED) {
					third = strerror(errno);
					break;
				}
		} else {
			memset(p, 1, a);
			q = mremap(p, a, a + step, MREMAP_MAYMOVE);
			if (q == MAP_FAILED)
				second = strerror(errno);
			else {
				memset(q, 1, a + step);
				p = q;
				a += step;
			}
			if (mremap(p, a, a + step, MREMAP_MAYMOVE) ==
			    MAP_FAILED)
				third = strerror(errno);
		}
		printf("%s %s then %s\n", argv[1], second, third);
		return 0;
	}
	if (!strcmp(argv[1], "unseen")) {
		size_t a = (size_t)n << 20;
		char *p =
		    (char *)syscall(SYS_mmap, NULL, a, PROT_READ | PROT_WRITE,
		                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return 1;
		memset(p, 1, a);
		for (;; got++) {
			char *volatile b = malloc(1 << 20); /* not elided */
			if (!b)
				break;
			memset(b, 1, 1 << 20);
		}
		printf("unseen %d\n", got);
		return 0;
	}
	if (!strcmp(argv[1], "regrow")) {
		size_t a = (size_t)n << 20, b = a * 3 / 2;
		char *volatile p = malloc(a); /* not elided (bigmalloc) */
		if (!p)
			return 1;
		memset(p, 1, a);
		char *volatile q = realloc(p, b);
		printf("regrow %s\n", q ? "got" : strerror(errno));
		if (q)
			free(q);
		else
			free(p);
		return 0;
	}
	if (!strcmp(argv[1], "mapmalloc") || !strcmp(argv[1], "mapv8")) {
		bool v8 = argv[1][3] == 'v';
		int blocks = v8 ? (14 << 20) / 4112 : 512;
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
		for (; got < blocks; got++) {
			size_t b = v8 ? 4112 : 4096;
			char *volatile p = malloc(b);
			if (!p)
				break;
			memset(p, 1, b);
		}
		printf("%s %zu errno %s mallocs %d\n", argv[1], k / 16,
		       err ? strerror(err) : "0", got);
		return 0;
	}
	for (; got < n; got++) {
		void *volatile p; /* not elided (bigmalloc) */
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
