/* memlimits accuracy: the documented law of the stop points and the tests
 * of a sample against it (docs/statistics.md, "Testing a limit on your
 * program", has the derivations).  The law comes from ml_bound_* and
 * ml__bound_outside, the code behind memlimits bounds, so that the command
 * tests what the library documents and not a second copy of it. */
#include "config.h"

#define _GNU_SOURCE

#include <math.h>
#include <stdlib.h>

#include "../lib/sampler/sampler.h"
#include "accuracy.h"
#include "memlimits.h"

const double ml__acc_qs[ML__ACC_NQ] = {0.01, 0.10, 0.50, 0.90, 0.99};

double ml__acc_cdf(const struct ml__acc_model *m, double x)
{
	if (!(x > 0))
		return 0;
	if (m->kind == ML__ACC_HEAP) {
		/* The heap limit refuses the first sampled allocation past
		 * L: the overshoot is the Exp(S) gap to the next point. */
		double l = (double)m->limit;
		if (x <= l)
			return 0;
		return ml_bound_global((uint64_t)(x - l), m->interval);
	}
	if (x >= 0x1p64)
		return 1;
	return ml_bound_alloc((uint64_t)x, m->limit, m->interval);
}

uint64_t ml__acc_quantile(const struct ml__acc_model *m, double p)
{
	if (m->kind == ML__ACC_HEAP)
		return m->limit +
		       (uint64_t)ceil(-(double)m->interval * log1p(-p));
	/* safe_bytes is the largest n with P(stop <= n) <= p: the next byte
	 * is the first whose probability passes p. */
	return ml_bound_safe_bytes(m->limit, p, m->interval) + 1;
}

void ml__acc_tails(const struct ml__acc_model *m, double a, double *early,
                   double *late)
{
	if (m->kind != ML__ACC_HEAP) {
		ml__bound_outside(m->limit, a, m->interval, early, late);
		return;
	}
	*early = 0;
	*late = 1 - ml__acc_cdf(m, (1 + a) * (double)m->limit);
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

/* P(Binomial(n, p) >= c), summed in log space. */
static double binom_upper(size_t n, double p, size_t c)
{
	if (c == 0)
		return 1;
	if (!(p > 0))
		return 0;
	if (p >= 1)
		return 1;
	double s = 0, lp = log(p), lq = log1p(-p), ln = lgamma((double)n + 1);
	for (size_t j = c; j <= n; j++) {
		double t = ln - lgamma((double)j + 1) -
		           lgamma((double)(n - j) + 1) + (double)j * lp +
		           (double)(n - j) * lq;
		s += exp(t);
	}
	return s > 1 ? 1 : s;
}

/* The Kolmogorov distribution's tail Q(lambda) = P(K > lambda): the
 * alternating series converges fast for large lambda, the Jacobi-transformed
 * one for small lambda. */
static double kolmogorov_q(double lambda)
{
	if (lambda <= 0)
		return 1;
	double s = 0;
	if (lambda < 1.18) {
		const double c = M_PI * M_PI / (8 * lambda * lambda);
		for (int j = 1; j <= 50; j += 2)
			s += exp(-(double)j * j * c);
		double q = 1 - sqrt(2 * M_PI) / lambda * s;
		return q < 0 ? 0 : q > 1 ? 1 : q;
	}
	for (int j = 1; j <= 100; j++) {
		double t = exp(-2.0 * j * j * lambda * lambda);
		s += (j & 1) ? t : -t;
		if (t < 1e-300)
			break;
	}
	s *= 2;
	return s < 0 ? 0 : s > 1 ? 1 : s;
}

void ml__acc_compare(const struct ml__acc_model *m, uint64_t *x, size_t n,
                     double a, double alpha, struct ml__acc_result *r)
{
	qsort(x, n, sizeof *x, by_value);
	*r = (struct ml__acc_result){.n = n,
	                             .min = x[0],
	                             .max = x[n - 1],
	                             .accuracy = a,
	                             .alpha = alpha};
	for (int i = 0; i < ML__ACC_NQ; i++) {
		/* The empirical quantile of type 1: the smallest stop point
		 * with at least p n points at or below it. */
		size_t j = (size_t)ceil(ml__acc_qs[i] * (double)n);
		r->emp[i] = x[j ? j - 1 : 0];
		r->theo[i] = ml__acc_quantile(m, ml__acc_qs[i]);
	}
	ml__acc_tails(m, a, &r->early_p, &r->late_p);
	double lo = (1 - a) * (double)m->limit, hi = (1 + a) * (double)m->limit;
	for (size_t i = 0; i < n; i++) {
		r->early_n += (double)x[i] < lo;
		r->late_n += (double)x[i] > hi;
	}
	r->early_pv = binom_upper(n, r->early_p, r->early_n);
	r->late_pv = binom_upper(n, r->late_p, r->late_n);
	double nn = (double)n;
	for (size_t i = 0; i < n; i++) {
		double f = ml__acc_cdf(m, (double)x[i]);
		double above = (double)(i + 1) / nn - f,
		       below = f - (double)i / nn;
		if (above > r->ks_d) {
			r->ks_d = above;
			r->ks_at = x[i];
			r->ks_earlier = true;
		}
		if (below > r->ks_d) {
			r->ks_d = below;
			r->ks_at = x[i];
			r->ks_earlier = false;
		}
	}
	double sq = sqrt(nn);
	r->ks_pv = kolmogorov_q((sq + 0.12 + 0.11 / sq) * r->ks_d);
	double each = alpha / 3;
	r->agree =
	    r->ks_pv >= each && r->early_pv >= each && r->late_pv >= each;
}
