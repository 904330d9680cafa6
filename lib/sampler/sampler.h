/* Layer 2, the sampler (docs/internals.md, "Layers").
 *
 * The per-thread Poisson sampler: pure arithmetic on its own state, it
 * knows nothing of tasks, threads or the allocator.
 *
 * Samples are the points of a Poisson process of rate 1/S on the line of
 * bytes a thread allocates; an allocation of n bytes covers the next n
 * bytes of that line and carries the points inside them.  The state is the
 * distance r (a real) from the current position to the next point, kept as
 * the integer countdown c = ceil(r) - 1 plus the fraction
 * frac = ceil(r) - r, so that "the next n bytes hold no point" is the
 * integer test n <= c and the fast path never touches a double.  See
 * docs/statistics.md, "The sampler". */
#ifndef ML_SAMPLER_H
#define ML_SAMPLER_H

#include "util/util.h"

#include <stdint.h>

#pragma GCC visibility push(hidden)

/* ---- The thread's countdown: the allocation fast path's whole state ----
 *
 * One more than the bytes the thread may still allocate before the next
 * sample (the gap c of struct ml__sampler's draws plus one), or 0 to send
 * every allocation, malloc(0) included, to the slow path.  An allocation
 * of n bytes goes to the slow path iff n >= countdown: with c + 1 stored
 * that is n > c, the sampler's exact test ("The sampler" in
 * docs/statistics.md), and a countdown of 0 catches a 0-byte allocation
 * too (an exact budget of 0 must see it).  Owned here, in its own
 * initial-exec TLS word (zero in a new thread: its first allocation takes
 * the slow path, which starts the thread); the tasks layer writes it
 * downward (a fresh gap, forcing the slow path, an exact budget's clip). */
extern ML__TLS uint64_t ml__countdown;

/* Take n bytes from the countdown: true when the allocation must take the
 * slow path (n >= countdown).  The countdown is then n less, modulo 2^64,
 * as the slow path expects (it adds n back).  An unsigned borrow is taken
 * whatever n is, so even malloc(SIZE_MAX) cannot wrap the countdown into
 * a huge value.  On x86-64 one memory-operand subtraction and one branch
 * (jbe: a borrow or a zero result); gcc would load, subtract and store. */
static inline __attribute__((always_inline)) bool ml__countdown_take(uint64_t n)
{
#if defined(__x86_64__) && defined(HAVE_ASM_GOTO) && !defined(ML_NO_ASM) && \
    defined(__PIC__)
	__asm__ goto("movq ml__countdown@gottpoff(%%rip), %%rax\n\t"
	             "subq %0, %%fs:(%%rax)\n\t"
	             "jbe %l[slow]"
	             :
	             : "r"(n)
	             : "rax", "cc", "memory"
	             : slow);
	return false;
slow:
	return true;
#else
	uint64_t c = ml__countdown;
	ml__countdown = c - n;
	return n >= c;
#endif
}

/* The mean sample interval S when none is set (MEMLIMITS_SAMPLE_INTERVAL,
 * ml_set_sample_interval, memlimits --interval).  A plain literal: the
 * command's help texts quote it (ML__INTERVAL_TEXT). */
#define ML__DEFAULT_INTERVAL 80000

/* Samples that reach a limit of `limit` bytes at interval s > 0:
 * k = max(1, ceil(limit / s)). */
static inline uint64_t ml__samples_needed(uint64_t limit, uint64_t s)
{
	uint64_t k = limit / s + (limit % s != 0);
	return k ? k : 1;
}

struct ml__sampler {
	uint64_t rng[4]; /* xoshiro256** */
	double frac;     /* ceil(r) - r for the current countdown */
	double interval; /* S, as a double */
};

void ml__sampler_seed(struct ml__sampler *s, uint64_t seed, uint64_t stream);
/* Draw a fresh gap ~ Exp(S); returns the countdown c. */
uint64_t ml__sampler_gap(struct ml__sampler *s);
/* An allocation of n bytes with n > c (c = the countdown before it): the
 * number of points inside it (>= 1, Poisson-distributed beyond the first by
 * memorylessness).  Draws the gap to the point after it into *c. */
uint64_t ml__sampler_hit(struct ml__sampler *s, uint64_t *c, uint64_t n);

/* P(a limit fires outside +-a of itself at this interval), and its two
 * tails (bounds.c). */
double ml__bound_outside(uint64_t limit, double a, uint64_t interval,
                         double *early, double *late);

uint64_t ml__rng_next(uint64_t st[4]);
double ml__rng_unit(uint64_t st[4]); /* uniform in [0, 1) */
uint64_t ml__poisson(uint64_t st[4], double lambda);
uint64_t ml__splitmix64(uint64_t *x);

#pragma GCC visibility pop

#endif
