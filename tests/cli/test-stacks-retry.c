/* A program for tests/cli/test-stacks.sh and bench/run-costs.sh: retries a
 * refused allocation at two stack depths, as perl does after every failure.
 * Under `memlimits run --alloc-limit 1` every allocation is refused.  It
 * times nothing: test-stacks.sh checks that every try was refused (or, in
 * capture mode, succeeded), and `make bench` counts its instructions under
 * callgrind at each depth to show that the cost of a refusal does not grow
 * with the depth of the stack (docs/performance.md).
 *
 *   test-stacks-retry SHALLOW DEEP N    N malloc(64) at each depth, all
 *                                       refused: prints "refused N at
 *                                       depths SHALLOW and DEEP"
 *                                       (exit 1: one was not refused)
 *   test-stacks-retry SHALLOW DEEP N task   the same inside ml_run, with an
 *                                       allocation limit and fail delivery
 *   test-stacks-retry SHALLOW DEEP N capture   allocations that succeed
 *                                       (under --interval 1 each captures a
 *                                       stack): "allocated N at ..." */
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink; /* keeps the allocations from being optimised out */
static long retries;
static int want_refused = 1;

/* Whether all `retries` malloc(64) here were refused (or all succeeded). */
static int retry_here(void)
{
	long refused = 0;
	for (long i = 0; i < retries; i++) {
		void *p = malloc(64);
		refused += p == NULL;
		sink = p;
		free(p);
	}
	return refused == (want_refused ? retries : 0);
}

/* Recursion the compiler may neither flatten nor turn into a loop. */
__attribute__((noinline)) static int at_depth(int d)
{
	if (d <= 0)
		return retry_here();
	volatile int keep = d;
	int r = at_depth(d - 1);
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
	if (!at_depth(shallow) || !at_depth(deep)) {
		printf(want_refused ? "allocations were not refused\n"
		                    : "allocations were refused\n");
		return NULL;
	}
	printf("%s %ld at depths %d and %d\n",
	       want_refused ? "refused" : "allocated", retries, shallow, deep);
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
