/* A program for tests/cli/test-accounting.sh to run under `memlimits run`.
 *
 *   test-run-alloc huge       malloc(SIZE_MAX / 2) (glibc refuses it),
 *                             then 200 blocks of 1 MiB: exit 0 when the
 *                             huge one failed with ENOMEM and none after
 *   test-run-alloc peak MIB   MIB blocks of 1 MiB kept, then all freed
 *   test-run-alloc refused MIB  1 MiB blocks until one is refused (at most
 *                             MIB), then refused_function asks for 16 more
 *   test-run-alloc usable     blocks of many sizes, each checked with
 *                             malloc_usable_size, realloc'd and freed
 *   test-run-alloc fork MIB   1 MiB blocks until one is refused (at most
 *                             MIB), then fork: exit 0 when the child's 16
 *                             blocks of 1 MiB all succeed (its own budget)
 *   test-run-alloc leak MIB   1 MiB blocks kept by leak_function: prints
 *                             how many were refused
 *   test-run-alloc stream MIB MIB blocks of 1 MiB, each freed at once
 *                             (stream_function): exit 0 when none failed
 *   test-run-alloc handoff MIB  MIB blocks of 1 MiB kept, freed by another
 *                             thread, then MIB more kept: exit 0 when none
 *                             failed
 *   test-run-alloc twoleak MIB  two threads keep MIB blocks of 1 MiB each:
 *                             prints how many were refused
 *   test-run-alloc threads N MIB  N threads each allocate and free blocks
 *                             of 64 KiB until one is refused (at most MIB
 *                             MiB each): prints the bytes all of them
 *                             were given
 * Linked -rdynamic: the report names the functions through dladdr. */
#include <errno.h>
#include <pthread.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

void hog_until_refused(long mib);
void refused_function(void);
void leak_function(long mib);
int stream_function(long mib);

/* Keeps the allocations from being optimised out; per thread. */
static _Thread_local void *volatile sink;

static int huge(void)
{
	errno = 0;
	void *p = malloc(SIZE_MAX / 2);
	int err = errno;
	int fails = 0;
	for (int i = 0; i < 200; i++) {
		char *q = malloc(1 << 20);
		if (!q)
			fails++;
		else
			q[0] = 1;
		sink = q;
		free(q);
	}
	printf("huge: %s, errno %d; later failures: %d\n",
	       p ? "allocated" : "NULL", err, fails);
	return p == NULL && err == ENOMEM && fails == 0 ? 0 : 1;
}

static int peak(long mib)
{
	char **keep = calloc((size_t)mib, sizeof *keep);
	if (!keep)
		return 1;
	for (long i = 0; i < mib; i++) {
		keep[i] = malloc(1 << 20);
		if (!keep[i])
			return 1;
		memset(keep[i], 1, 4096);
	}
	for (long i = 0; i < mib; i++)
		free(keep[i]);
	free(keep);
	printf("peak: %ld MiB allocated and freed\n", mib);
	return 0;
}

__attribute__((noinline)) void hog_until_refused(long mib)
{
	for (long i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		if (!p)
			return;
		p[0] = 1;
		sink = p; /* kept */
	}
}

__attribute__((noinline)) void refused_function(void)
{
	for (int i = 0; i < 16; i++) {
		void *mine = malloc(1 << 20);
		sink = mine;
		free(mine);
	}
}

/* memlimits(1): a child created by fork alone has a budget of its own,
 * as an exec'd one does, even when its parent has spent its own. */
static int forked(long mib)
{
	hog_until_refused(mib);
	errno = 0;
	sink = malloc(1 << 20);
	int parent_refused = sink == NULL;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		int fails = 0;
		for (int i = 0; i < 16; i++) {
			char *p = malloc(1 << 20);
			if (!p)
				fails++;
			else
				p[0] = 1;
			sink = p;
			free(p);
		}
		printf("fork: child, %d of 16 refused\n", fails);
		exit(fails != 0);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return 1;
	printf("fork: parent %s refused after the limit\n",
	       parent_refused ? "still" : "not");
	return parent_refused && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

__attribute__((noinline)) void leak_function(long mib)
{
	long refused = 0;
	for (long i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		if (!p) {
			refused++;
			continue;
		}
		p[0] = 1;
		sink = p; /* kept */
	}
	printf("leak: %ld of %ld refused\n", refused, mib);
}

__attribute__((noinline)) int stream_function(long mib)
{
	int fails = 0;
	for (long i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		if (!p) {
			fails++;
			continue;
		}
		memset(p, 1, 4096);
		sink = p;
		free(p);
	}
	printf("stream: %ld MiB, %d failed\n", mib, fails);
	return fails != 0;
}

struct blocks {
	char **p;
	long n;
};

static void *free_all(void *arg)
{
	struct blocks *b = arg;
	for (long i = 0; i < b->n; i++)
		free(b->p[i]);
	return NULL;
}

static void *leak_thread(void *arg)
{
	long mib = *(long *)arg, refused = 0;
	for (long i = 0; i < mib; i++) {
		char *p = malloc(1 << 20);
		refused += !p;
		sink = p;
	}
	return (void *)(intptr_t)refused;
}

static int twoleak(long mib)
{
	pthread_t th[2];
	long refused = 0;
	for (int i = 0; i < 2; i++)
		if (pthread_create(&th[i], NULL, leak_thread, &mib) != 0)
			return 1;
	for (int i = 0; i < 2; i++) {
		void *r;
		pthread_join(th[i], &r);
		refused += (long)(intptr_t)r;
	}
	printf("twoleak: %ld of %ld refused\n", refused, 2 * mib);
	return 0;
}

/* Streams 64 KiB blocks until one is refused or *arg MiB went by: the
 * bytes it was given. */
static void *stream_thread(void *arg)
{
	long blocks = *(long *)arg * 16;
	uintptr_t got = 0;
	for (long i = 0; i < blocks; i++) {
		char *p = malloc(64 << 10);
		if (!p)
			break;
		p[0] = 1;
		sink = p;
		free(p);
		got += 64 << 10;
	}
	return (void *)got;
}

static int threads(long n, long mib)
{
	pthread_t th[64];
	uint64_t got = 0;
	if (n < 1 || n > 64)
		return 2;
	for (long i = 0; i < n; i++)
		if (pthread_create(&th[i], NULL, stream_thread, &mib) != 0)
			return 1;
	for (long i = 0; i < n; i++) {
		void *r;
		pthread_join(th[i], &r);
		got += (uintptr_t)r;
	}
	printf("threads: %llu bytes\n", (unsigned long long)got);
	return 0;
}

/* Held memory is the allocator's until freed, by whichever thread. */
static int handoff(long mib)
{
	char **keep = calloc((size_t)mib, sizeof *keep);
	int fails = 0;
	for (int round = 0; keep && round < 2; round++) {
		for (long i = 0; i < mib; i++) {
			keep[i] = malloc(1 << 20);
			fails += !keep[i];
		}
		struct blocks b = {keep, mib};
		pthread_t th;
		if (pthread_create(&th, NULL, free_all, &b) != 0 ||
		    pthread_join(th, NULL) != 0)
			return 1;
	}
	printf("handoff: %d failed\n", fails);
	return !keep || fails != 0;
}

static int usable(void)
{
	int bad = 0;
	for (size_t n = 1; n < (4u << 20); n = n * 3 + 1) {
		char *p = malloc(n);
		if (!p || malloc_usable_size(p) < n) {
			bad++;
			continue;
		}
		memset(p, 2, n);
		char *q = realloc(p, n * 2);
		if (!q || malloc_usable_size(q) < n * 2)
			bad++;
		free(q ? q : p);
	}
	printf("usable: %d bad\n", bad);
	return bad != 0;
}

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "huge"))
		return huge();
	if (argc == 2 && !strcmp(argv[1], "usable"))
		return usable();
	if (argc == 3 && !strcmp(argv[1], "peak"))
		return peak(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "fork"))
		return forked(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "leak")) {
		leak_function(atol(argv[2]));
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "stream"))
		return stream_function(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "twoleak"))
		return twoleak(atol(argv[2]));
	if (argc == 3 && !strcmp(argv[1], "handoff"))
		return handoff(atol(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "threads"))
		return threads(atol(argv[2]), atol(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "refused")) {
		hog_until_refused(atol(argv[2]));
		refused_function();
		printf("refused: done\n");
		return 0;
	}
	fprintf(stderr, "usage: test-run-alloc huge | usable | peak MIB | "
	                "refused MIB | fork MIB | leak MIB | stream MIB | "
	                "handoff MIB | twoleak MIB | threads N MIB\n");
	return 2;
}
