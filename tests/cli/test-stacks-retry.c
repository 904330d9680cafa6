/* A program for tests/cli/test-stacks.sh: retries a refused allocation at two
 * stack depths, as perl does after every failure, and prints the ratio of
 * the costs per refusal (deep / shallow).  Under `memlimits run
 * --alloc-limit 0` every allocation is refused; the cost of a refusal must
 * not grow with the depth of the stack.
 *
 *   test-stacks-retry SHALLOW DEEP N    prints "ratio R shallow_ns S deep_ns D"
 *                                       (exit 1: no allocation was refused)
 *   test-stacks-retry SHALLOW DEEP N task   the same inside ml_run, with an
 *                                       allocation limit and fail delivery
 *   test-stacks-retry SHALLOW DEEP N capture   allocations that succeed
 *                                       (under --interval 1 each captures a
 *                                       stack); prints "frame_ns F ..." too,
 *                                       the cost of capturing one frame */
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void *volatile sink; /* keeps the allocations from being optimised out */
static long retries;
static int want_refused = 1;

static double now_ns(void)
{
	struct timespec ts;
	/* Not the time others ran. */
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* ns per refused malloc(64), over `retries` tries, at this depth. */
static double retry_here(void)
{
	double t0 = now_ns();
	long refused = 0;
	for (long i = 0; i < retries; i++) {
		void *p = malloc(64);
		refused += p == NULL;
		free(p);
	}
	double t = now_ns() - t0;
	return refused == (want_refused ? retries : 0) ? t / (double)retries
	                                               : -1;
}

/* Recursion the compiler may neither flatten nor turn into a loop. */
__attribute__((noinline)) static double at_depth(int d)
{
	if (d <= 0)
		return retry_here();
	volatile int keep = d;
	double r = at_depth(d - 1);
	sink = (void *)(long)keep;
	return r;
}

static int shallow, deep;

static void *measure(void *arg)
{
	(void)arg;
	/* Spend the budget: the first sample trips the limit. */
	for (int i = 0; want_refused && i < 1 << 20 && (sink = malloc(4096));
	     i++)
		;
	/* Interleaved rounds, the best of each (cache misses only add). */
	double s = 1e300, d = 1e300;
	for (int round = 0; round < 3; round++) {
		double a = at_depth(shallow), b = at_depth(deep);
		if (a < 0 || b < 0) {
			printf(want_refused ? "allocations were not refused\n"
			                    : "allocations were refused\n");
			return NULL;
		}
		s = a < s ? a : s;
		d = b < d ? b : d;
	}
	printf("ratio %.2f shallow_ns %.0f deep_ns %.0f", d / s, s, d);
	if (!want_refused)
		printf(" frame_ns %.1f", (d - s) / (deep - shallow));
	printf("\n");
	return &shallow;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5)
		return 2;
	shallow = atoi(argv[1]);
	deep = atoi(argv[2]);
	retries = atol(argv[3]);
	if (argc == 5 && !strcmp(argv[4], "capture"))
		want_refused = 0;
	if (argc == 4 || !want_refused)
		return measure(NULL) ? 0 : 1;
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1;
	l.delivery = ML_DELIVER_FAIL;
	ml_outcome out;
	ml_run(&l, measure, NULL, &out);
	return out.ret ? 0 : 1;
}
