/* One request, four threads, one budget.
 *
 * A request sorts a large input by splitting it across four worker
 * threads.  Each worker runs its part as a slice of the request's task
 * (ml_task_run), so the request's allocation limit counts the bytes all
 * four allocate together: a request that blows up is stopped at about its
 * limit, not at four times it, and each worker sees its own allocations
 * fail (FAIL delivery) and gives up its part.
 *
 *   $ ./fan-out
 *   normal request:  ok, ~32 MiB allocated in all by 4 threads ...
 *   runaway request: allocation limit reached, ~63 MiB allocated in all
 *                    by 4 threads (limit 64 MiB; ...)
 */
#include <memlimits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WORKERS 4

struct part {
	ml_task *task; /* the request: shared by the four workers */
	size_t items;  /* numbers to sort in this part */
	int copies;    /* scratch copies the work makes (the runaway: many) */
	size_t got;    /* bytes this worker allocated before it stopped */
};

static int cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return (x > y) - (x < y);
}

/* The work of one part: fill, copy, sort.  A refused allocation (the
 * request's limit, FAIL delivery) ends the part early. */
static void *sort_part(void *arg)
{
	struct part *p = arg;
	uint32_t seed = (uint32_t)(uintptr_t)p;
	for (int c = 0; c < p->copies; c++) {
		uint32_t *v = malloc(p->items * sizeof *v);
		if (!v)
			return NULL;
		p->got += p->items * sizeof *v;
		for (size_t i = 0; i < p->items; i++)
			v[i] = seed = seed * 1664525u + 1013904223u;
		qsort(v, p->items, sizeof *v, cmp);
		free(v);
	}
	return p;
}

static void *worker(void *arg)
{
	struct part *p = arg;
	ml_task_run(p->task, sort_part, p, NULL);
	return NULL;
}

static void request(const char *name, int copies)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = (uint64_t)64 << 20;
	l.delivery = ML_DELIVER_FAIL;
	ml_task *task = ml_task_new(&l);
	if (!task) {
		perror("ml_task_new");
		exit(1);
	}
	struct part parts[WORKERS];
	pthread_t th[WORKERS];
	for (int i = 0; i < WORKERS; i++) {
		parts[i] = (struct part){task, 1 << 18, copies, 0};
		pthread_create(&th[i], NULL, worker, &parts[i]);
	}
	size_t got = 0;
	for (int i = 0; i < WORKERS; i++) {
		pthread_join(th[i], NULL);
		got += parts[i].got;
	}
	/* The task's estimate counts qsort's own buffers too. */
	ml_status st = ml_task_status(task);
	printf("%-16s %s, ~%llu MiB allocated in all by %d threads (limit "
	       "64 MiB; %zu MiB of it the parts' arrays)\n",
	       name, st == ML_OK ? "ok" : ml_status_str(st),
	       (unsigned long long)(ml_task_allocated(task) >> 20), WORKERS,
	       got >> 20);
	ml_task_free(task);
}

int main(void)
{
	request("normal request:", 4);   /* 4 x 4 x 1 MiB = 16 MiB */
	request("runaway request:", 64); /* would be 256 MiB */
	return 0;
}
