/* A program for tests/test-stacks.sh: retries a refused allocation at two
 * stack depths, as perl does after every failure, and prints the ratio of
 * the costs per refusal (deep / shallow).  Under `memlimits run
 * --alloc-limit 0` every allocation is refused; the cost of a refusal must
 * not grow with the depth of the stack.
 *
 *   test-stacks-retry SHALLOW DEEP N    prints "ratio R shallow_ns S deep_ns D"
 *                                       (exit 1: no allocation was refused) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void *volatile sink; /* keeps the allocations from being optimised out */
static long retries;

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
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
	return refused == retries ? t / (double)retries : -1;
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

int main(int argc, char **argv)
{
	if (argc != 4)
		return 2;
	int shallow = atoi(argv[1]), deep = atoi(argv[2]);
	retries = atol(argv[3]);
	/* Spend the budget: the first sample trips the limit. */
	for (int i = 0; i < 1 << 20 && (sink = malloc(4096)) != NULL; i++)
		;
	/* Interleaved rounds, the best of each (other load only adds). */
	double s = 1e300, d = 1e300;
	for (int round = 0; round < 3; round++) {
		double a = at_depth(shallow), b = at_depth(deep);
		if (a < 0 || b < 0) {
			printf("allocations were not refused\n");
			return 1;
		}
		s = a < s ? a : s;
		d = b < d ? b : d;
	}
	printf("ratio %.2f shallow_ns %.0f deep_ns %.0f\n", d / s, s, d);
	return 0;
}
