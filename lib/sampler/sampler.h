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

#include <stdint.h>

#pragma GCC visibility push(hidden)

/* The mean sample interval S when none is set (MEMLIMITS_INTERVAL,
 * ml_set_interval, memlimits --interval).  A plain literal: the command's
 * help texts quote it (ML__INTERVAL_TEXT). */
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
