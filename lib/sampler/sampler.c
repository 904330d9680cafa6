/* Poisson sampling over allocated bytes.  The math is in
 * docs/statistics.md ("The sampler"); this file only draws numbers. */
#define _GNU_SOURCE
#include "sampler/sampler.h"

#include <math.h>

ML__TLS uint64_t ml__countdown;

uint64_t ml__splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15u);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
	return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t ml__rng_next(uint64_t st[4])
{
	uint64_t result = rotl(st[1] * 5, 7) * 9;
	uint64_t t = st[1] << 17;
	st[2] ^= st[0];
	st[3] ^= st[1];
	st[1] ^= st[2];
	st[0] ^= st[3];
	st[2] ^= t;
	st[3] = rotl(st[3], 45);
	return result;
}

double ml__rng_unit(uint64_t st[4])
{
	return (double)(ml__rng_next(st) >> 11) * 0x1.0p-53;
}

void ml__sampler_seed(struct ml__sampler *s, uint64_t seed, uint64_t stream)
{
	/* Streams must differ even for adjacent seeds: mix both through
	 * splitmix64 (the seeding xoshiro's authors recommend). */
	uint64_t x = seed ^ ml__splitmix64(&stream);
	for (int i = 0; i < 4; i++)
		s->rng[i] = ml__splitmix64(&x);
}

/* Exp(S): -S log(1 - U), with 1 - U in (0, 1]. */
static double exp_gap(struct ml__sampler *s)
{
	return -s->interval * log1p(-ml__rng_unit(s->rng));
}

/* Store distance r as c = ceil(r) - 1 and frac = ceil(r) - r. */
static uint64_t set_gap(struct ml__sampler *s, double r)
{
	if (!(r < 0x1.0p62)) /* also catches NaN: sample (almost) never */
		r = 0x1.0p62;
	double up = ceil(r);
	if (up < 1) /* r == 0 has probability 0; keep c >= 0 */
		up = 1;
	s->frac = up - r;
	return (uint64_t)up - 1;
}

uint64_t ml__sampler_gap(struct ml__sampler *s)
{
	return set_gap(s, exp_gap(s));
}

/* Below this many intervals past the first point, the further points of
 * an allocation are found gap by gap (one draw each, 1 + rest/S draws on
 * average); beyond it, one Poisson draw and a fresh gap. */
#define STEP_INTERVALS 2.0

uint64_t ml__sampler_hit(struct ml__sampler *s, uint64_t *c, uint64_t n)
{
	/* The first point lies r = c + 1 - frac bytes in (n >= r, since
	 * n > c).  docs/statistics.md, "The sampler", point 2. */
	double r = (double)*c + 1.0 - s->frac;
	double rest = (double)n - r;
	uint64_t k = 1;
	if (rest < STEP_INTERVALS * s->interval) {
		/* The points after it are Exp(S) apart: count those within
		 * the allocation; the one past its end is the next. */
		double g = exp_gap(s);
		while (g <= rest) {
			k++;
			rest -= g;
			g = exp_gap(s);
		}
		*c = set_gap(s, g - rest);
		return k;
	}
	/* The rest holds Poisson(rest / S) more, and the next point is
	 * Exp(S) past the end (memorylessness). */
	k += ml__poisson(s->rng, rest / s->interval);
	*c = set_gap(s, exp_gap(s));
	return k;
}

/* Poisson(lambda) in O(1) expected time: inversion by sequential search
 * for small lambda, Hörmann's PTRS transformed rejection for large
 * (W. Hörmann, "The transformed rejection method for generating Poisson
 * random variables", Insurance: Mathematics and Economics 12, 1993). */
uint64_t ml__poisson(uint64_t st[4], double lambda)
{
	if (!(lambda > 0))
		return 0;
	if (lambda < 10) {
		double u = ml__rng_unit(st);
		double p = exp(-lambda), cdf = p;
		uint64_t k = 0;
		while (u > cdf) {
			k++;
			p *= lambda / (double)k;
			double next = cdf + p;
			if (next ==
			    cdf) /* u in the last ulp: the tail is done */
				break;
			cdf = next;
		}
		return k;
	}
	double slam = sqrt(lambda), loglam = log(lambda);
	double b = 0.931 + 2.53 * slam;
	double a = -0.059 + 0.02483 * b;
	double invalpha = 1.1239 + 1.1328 / (b - 3.4);
	double vr = 0.9277 - 3.6224 / (b - 2);
	for (;;) {
		double u = ml__rng_unit(st) - 0.5;
		double v = ml__rng_unit(st);
		double us = 0.5 - fabs(u);
		double k = floor((2 * a / us + b) * u + lambda + 0.43);
		if (us >= 0.07 && v <= vr)
			return (uint64_t)k;
		if (k < 0 || (us < 0.013 && v > us))
			continue;
		int sign;
		double lg = lgamma_r(k + 1, &sign);
		if (log(v) + log(invalpha) - log(a / (us * us) + b) <=
		    -lambda + k * loglam - lg)
			return (uint64_t)k;
	}
}
