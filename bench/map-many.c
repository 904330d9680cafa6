/* Wall clock of mmap+munmap pairs with many mappings live (issue 34): LIVE
 * private anonymous writable mappings of SIZE bytes are made and kept,
 * then PAIRS mappings of SIZE bytes are made and unmapped at once, REPS
 * times; the best rep's nanoseconds per pair is printed.  Not linked with
 * the library: bench/run-map-many.sh runs it plain and under LD_PRELOAD,
 * so both run the same machine code.  On Linux the kernel places each new
 * mapping below the others (top-down): this is the pattern that costs
 * the range table the most when records after an insertion move.
 *
 *   map-many LIVE PAIRS REPS [SIZE] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *map(size_t size)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		perror("map-many: mmap");
		exit(1);
	}
	return p;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: map-many LIVE PAIRS REPS [SIZE]\n");
		return 2;
	}
	long live = atol(argv[1]), pairs = atol(argv[2]), reps = atol(argv[3]);
	size_t size = argc > 4 ? (size_t)atol(argv[4]) : 64 << 10;
	if (live < 0 || pairs < 1 || reps < 1 || !size) {
		fprintf(stderr, "map-many: bad arguments\n");
		return 2;
	}
	void **keep = malloc((size_t)(live ? live : 1) * sizeof *keep);
	if (!keep)
		return 1;
	for (long i = 0; i < live; i++)
		keep[i] = map(size);
	double best = 0;
	for (long r = 0; r < reps; r++) {
		double t0 = now();
		for (long i = 0; i < pairs; i++)
			if (munmap(map(size), size) != 0)
				return 1;
		double ns = (now() - t0) / (double)pairs;
		if (!r || ns < best)
			best = ns;
	}
	printf("%.0f\n", best);
	for (long i = 0; i < live; i++)
		munmap(keep[i], size);
	free(keep);
	return 0;
}
