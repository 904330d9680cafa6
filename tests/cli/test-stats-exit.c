/* For test-stats-exit.sh: 8 threads allocate and free in a loop while the
 * main thread calls exit(), so run mode writes its statistics file while
 * they still allocate (issue 24: 2 files in 60 were refused by
 * `memlimits stats`, the histogram taken at another moment than the
 * allocation count). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#define THREADS 8

static _Thread_local void *volatile sink;
static _Atomic int started;

static void *worker(void *arg)
{
	/* A different size sequence per thread, several histogram buckets;
	 * some blocks above 1 KiB so samples come too. */
	uint64_t x = (uint64_t)(uintptr_t)arg * 2654435761u + 1;
	atomic_fetch_add(&started, 1);
	for (;;) {
		x = x * 6364136223846793005u + 1442695040888963407u;
		void *p =
		    malloc(1 + (size_t)(x >> 33) % ((x >> 60) ? 200 : 5000));
		sink = p;
		free(p);
	}
	return NULL;
}

int main(void)
{
	pthread_t t;
	for (uintptr_t i = 0; i < THREADS; i++)
		if (pthread_create(&t, NULL, worker, (void *)i) != 0)
			return 2;
	while (atomic_load(&started) < THREADS)
		;
	/* Let them all be in their loops. */
	/* Its own block, not sink read back (sink is per thread now; a
	 * shared one was a double free, 3 runs in 60 under CI's load). */
	for (int i = 0; i < 2000; i++) {
		void *q = malloc(16);
		sink = q;
		free(q);
	}
	exit(0);
}
