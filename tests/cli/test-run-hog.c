/* A program for tests/cli/test-run.sh to run under `memlimits run`: one clearly
 * named function allocates most, so that the report can be checked for it
 * (linked -rdynamic: dladdr names it).
 *
 *   test-run-hog MIB        small_function, then hog_function allocates MIB
 *                           MiB in 1 MiB blocks it keeps
 *   test-run-hog threads N  4 threads allocate and free N MiB each */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exported (and so declared): the report names them through dladdr. */
void small_function(void);
void hog_function(long mib);

/* Keeps the allocations from being optimised out; per thread. */
static _Thread_local void *volatile sink;

__attribute__((noinline)) void small_function(void)
{
	for (int i = 0; i < 4096; i++) {
		void *mine = malloc(256);
		sink = mine;
		free(mine);
	}
}

__attribute__((noinline)) void hog_function(long mib)
{
	for (long i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		if (!p) {
			printf("hog: NULL after %ld MiB\n", i);
			return;
		}
		memset(p, (int)i, 4096);
		sink = p; /* kept: the heap grows */
	}
	printf("hog: allocated %ld MiB\n", mib);
}

static void *thread_hog(void *arg)
{
	long mib = *(long *)arg;
	for (long i = 0; i < mib * 16; i++) {
		char *p = malloc(64 << 10);
		if (p)
			p[0] = 1;
		sink = p;
		free(p);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "threads")) {
		long mib = atol(argv[2]);
		pthread_t t[4];
		for (int i = 0; i < 4; i++)
			if (pthread_create(&t[i], NULL, thread_hog, &mib))
				return 1;
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		printf("threads: done\n");
		return 0;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: test-run-hog MIB | threads MIB\n");
		return 1;
	}
	small_function();
	hog_function(atol(argv[1]));
	return 0;
}
