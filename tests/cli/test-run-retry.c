/* A program for tests/cli/test-run-retry.sh: a program that retries a
 * failed malloc, as Lua's allocator does after its emergency collection
 * and Ruby's after a GC (issue 41, item 5).
 *
 *   test-run-retry keep TRIES BLOCK MIB [THREADS]
 *       each of THREADS threads (1 by default) asks for MIB MiB in blocks
 *       of BLOCK bytes, keeping and touching what it gets; a NULL is
 *       retried TRIES times (0: the program goes on to the next block).
 *       Prints "kept MIB refused N hwm KIB": the MiB kept by all threads,
 *       the blocks given up, the process's peak RSS (VmHWM).
 *   test-run-retry after BLOCK MIB AGAIN
 *       as keep 1 BLOCK MIB, then: a kept block realloc'd to half its size
 *       (must succeed: a shrinking realloc grows nothing), every block
 *       freed, and AGAIN MiB asked for again in the same blocks, until one
 *       is refused.  Prints "kept MIB shrunk 0|1 again MIB".
 * Output through write(2) from a static buffer: stdio's buffer is a
 * malloc, which the limit refuses once reached. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>

#define MAX_THREADS 4

struct worker {
	int tries;
	size_t block;
	size_t count; /* blocks to ask for */
	void **kept;  /* count slots */
	size_t got, refused;
};

static void *keep(void *arg)
{
	struct worker *w = arg;
	for (size_t i = 0; i < w->count; i++) {
		char *p = malloc(w->block);
		for (int r = 0; !p && r < w->tries; r++)
			p = malloc(w->block);
		if (!p) {
			w->refused++;
			continue;
		}
		memset(p, 1, w->block);
		w->kept[w->got++] = p;
	}
	return NULL;
}

/* VmHWM in KiB, read without allocating; 0 when unreadable. */
static long hwm_kib(void)
{
	static char buf[8192];
	int fd = open("/proc/self/status", O_RDONLY);
	if (fd < 0)
		return 0;
	ssize_t k = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (k <= 0)
		return 0;
	buf[k] = 0;
	char *s = strstr(buf, "VmHWM:");
	return s ? strtol(s + 6, NULL, 10) : 0;
}

static void say(const char *fmt, long a, long b, long c)
{
	static char out[256];
	int k = snprintf(out, sizeof out, fmt, a, b, c);
	if (k > 0 && write(1, out, (size_t)k) < 0)
		_exit(1);
}

/* MiB of k blocks of b bytes. */
static long mib(size_t k, size_t b)
{
	return (long)((k * b) >> 20);
}

int main(int argc, char **argv)
{
	if (argc >= 5 && !strcmp(argv[1], "keep")) {
		int threads = argc > 5 ? atoi(argv[5]) : 1;
		if (threads < 1 || threads > MAX_THREADS)
			return 2;
		static struct worker w[MAX_THREADS];
		static pthread_t th[MAX_THREADS];
		size_t block = strtoul(argv[3], NULL, 10);
		size_t count = (strtoul(argv[4], NULL, 10) << 20) / block;
		for (int i = 0; i < threads; i++) {
			w[i].tries = atoi(argv[2]);
			w[i].block = block;
			w[i].count = count;
			/* Before any limit is reached. */
			w[i].kept = calloc(count, sizeof(void *));
			if (!w[i].kept)
				return 2;
		}
		for (int i = 1; i < threads; i++)
			if (pthread_create(&th[i], NULL, keep, &w[i]))
				return 2;
		keep(&w[0]);
		size_t got = w[0].got, refused = w[0].refused;
		for (int i = 1; i < threads; i++) {
			pthread_join(th[i], NULL);
			got += w[i].got;
			refused += w[i].refused;
		}
		say("kept %ld refused %ld hwm %ld\n", mib(got, block),
		    (long)refused, hwm_kib());
		return 0;
	}
	if (argc == 5 && !strcmp(argv[1], "after")) {
		struct worker w = {.tries = 1,
		                   .block = strtoul(argv[2], NULL, 10)};
		w.count = (strtoul(argv[3], NULL, 10) << 20) / w.block;
		w.kept = calloc(w.count, sizeof(void *));
		if (!w.kept || w.block < 2)
			return 2;
		keep(&w);
		long kept = mib(w.got, w.block);
		int shrunk = 0;
		if (w.got) {
			void *q = realloc(w.kept[0], w.block / 2);
			shrunk = q != NULL;
			if (q)
				w.kept[0] = q;
		}
		for (size_t i = 0; i < w.got; i++)
			free(w.kept[i]);
		size_t again = 0,
		       more = (strtoul(argv[4], NULL, 10) << 20) / w.block;
		for (size_t i = 0; i < more && i < w.count; i++) {
			char *p = malloc(w.block);
			if (!p)
				break;
			memset(p, 1, w.block);
			w.kept[again++] = p;
		}
		say("kept %ld shrunk %ld again %ld\n", kept, shrunk,
		    mib(again, w.block));
		return 0;
	}
	return 2;
}
