/* Small statistics helpers for the tests: Poisson pmf, chi-square
 * goodness of fit with an exact p-value for even degrees of freedom.
 * Header-only so every statistical test can include it. */
#ifndef ML_TEST_STATS_H
#define ML_TEST_STATS_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

static inline double st_poisson_logpmf(uint64_t k, double lambda)
{
	return -lambda + (double)k * log(lambda) - lgamma((double)k + 1);
}

/* P(chi2_df > x) for even df: P(Poisson(x/2) < df/2), summed exactly. */
static inline double st_chi2_sf_even(double x, unsigned df)
{
	double term = exp(-x / 2), sum = term;
	for (unsigned i = 1; i < df / 2; i++) {
		term *= (x / 2) / i;
		sum += term;
	}
	return sum > 1 ? 1 : sum;
}

#define ST_MAX_BINS 256

/* Chi-square test of counts[0..n) (counts[i] = how often value i came up;
 * values >= n must have been clamped into counts[n-1]) against
 * Poisson(lambda).  Adjacent values are pooled until every bin expects at
 * least 5, and the number of bins is made odd so that df = bins - 1 is
 * even.  Returns the p-value; *chi2 and *df get the statistic. */
static inline double st_chi2_poisson(const uint64_t *counts, unsigned n,
                                     uint64_t total, double lambda,
                                     double *chi2, unsigned *df)
{
	double obs[ST_MAX_BINS], exp_[ST_MAX_BINS];
	unsigned bins = 0;
	double o = 0, e = 0, cum = 0;
	for (unsigned i = 0; i < n; i++) {
		double p = (i + 1 < n) ? exp(st_poisson_logpmf(i, lambda))
		                       : 1 - cum; /* the tail */
		cum += p;
		o += (double)counts[i];
		e += p * (double)total;
		bool last = i + 1 == n;
		if ((e >= 5 && (1 - cum) * (double)total >= 5) || last) {
			if (bins < ST_MAX_BINS) {
				obs[bins] = o;
				exp_[bins] = e;
				bins++;
			}
			o = e = 0;
		}
	}
	if (bins % 2 == 0 && bins >= 2) { /* pool the last two bins */
		obs[bins - 2] += obs[bins - 1];
		exp_[bins - 2] += exp_[bins - 1];
		bins--;
	}
	double x = 0;
	for (unsigned i = 0; i < bins; i++)
		/* Bins [0, bins) were all written above (bins = 0 when n = 0):
		 * cppcheck assumes the first loop may not run. */
		// cppcheck-suppress uninitvar
		x += (obs[i] - exp_[i]) * (obs[i] - exp_[i]) / exp_[i];
	*chi2 = x;
	*df = bins - 1;
	return st_chi2_sf_even(x, bins - 1);
}

#endif
