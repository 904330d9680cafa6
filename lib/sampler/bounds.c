/* The documented bounds: pure functions of their arguments, no state, no
 * allocation.  With k = max(1, ceil(limit / S)) and x = n / S,
 *   ml_bound_alloc(n, limit, S) = P(Poisson(x) >= k) = P(k, x),
 * the regularized lower incomplete gamma function.  Everything is computed
 * in log space, so tails far below DBL_MIN keep their logarithm; the
 * methods and their accuracy are in docs/statistics.md ("Computing the
 * bounds").  It depends on nothing else in the library: the memlimits
 * command compiles it in directly. */
#include "memlimits.h"
#include "sampler/sampler.h"

#include <math.h>

/* From this k on, Temme's uniform expansion (two terms) is more accurate
 * than 1e-12 relative and replaces the O(sqrt(k)) summations. */
#define TEMME_K 1e5

#define LN_SQRT_2PI 0.91893853320467274178

/* log P(k, x), log Q(k, x) = log(1 - P) and log pmf(k; x). */
struct lpq {
	double lp, lq, ld;
};

/* log(x/k) - (x - k)/k, without cancellation near x = k (Loader's bd0,
 * through log(1+s) = 2 atanh(s / (2 + s))). */
static double log1pmx(double x, double k)
{
	double s = (x - k) / k;
	if (fabs(s) >= 0.5)
		return log(x / k) - s;
	double u = s / (2 + s), u2 = u * u, pow = u, sum = 0;
	for (int j = 3; j < 200; j += 2) {
		pow *= u2;
		double term = pow / j;
		sum += term;
		if (fabs(term) <= 0x1p-60 * fabs(sum))
			break;
	}
	return -s * u + 2 * sum;
}

/* log k! - ((k + 1/2) log k - k + log sqrt(2 pi)), the Stirling error. */
static double stirlerr(double k)
{
	if (k < 16) {
		int sign; /* lgamma_r: lgamma writes the global signgam */
		return lgamma_r(k + 1, &sign) -
		       ((k + 0.5) * log(k) - k + LN_SQRT_2PI);
	}
	double r = 1 / k, r2 = r * r;
	return r * (1.0 / 12 -
	            r2 * (1.0 / 360 -
	                  r2 * (1.0 / 1260 - r2 * (1.0 / 1680 - r2 / 1188))));
}

/* log(1 - e^l) for l <= 0. */
static double log1mexp(double l)
{
	return l > -0.693 ? log(-expm1(l)) : log1p(-exp(l));
}

/* erfc(z) e^(z^2), z >= 0. */
static double erfcx(double z)
{
	if (z < 20)
		return exp(z * z) * erfc(z);
	/* Asymptotic series; at z >= 20 twelve terms leave < 1e-25. */
	double r = 1 / (2 * z * z), term = 1, sum = 1;
	for (int j = 1; j <= 12; j++) {
		term *= -(2 * j - 1) * r;
		sum += term;
	}
	return sum / (z * sqrt(M_PI));
}

/* Temme's expansion (DLMF 8.12.3-8.12.10) with C0 and C1. */
static struct lpq temme(double k, double x, double ld)
{
	double m = (x - k) / k, h = -log1pmx(x, k); /* h = eta^2 / 2 */
	double eta = copysign(sqrt(2 * h), m);
	double c0, c1;
	if (fabs(eta) < 0.01) {
		/* Taylor series: the closed forms below cancel near 0. */
		double e = eta;
		c0 = -1.0 / 3 +
		     e * (1.0 / 12 +
		          e * (-2.0 / 135 +
		               e * (1.0 / 864 +
		                    e * (1.0 / 2835 - e * 139.0 / 777600))));
		c1 = -1.0 / 540 +
		     e * (-1.0 / 288 + e * (1.0 / 378 - e * 77.0 / 77760));
	} else {
		c0 = 1 / m - 1 / eta;
		c1 = 1 / (eta * eta * eta) - 1 / (m * m * m) - 1 / (m * m) -
		     1 / (12 * m);
	}
	double r = (c0 + c1 / k) / sqrt(2 * M_PI * k);
	double z = eta * sqrt(k / 2), u = -k * h;
	struct lpq o = {.ld = ld};
	if (eta <= 0) {
		o.lp = u + log(0.5 * erfcx(-z) - r);
		o.lq = log1mexp(o.lp);
	} else {
		o.lq = u + log(0.5 * erfcx(z) + r);
		o.lp = log1mexp(o.lq);
	}
	return o;
}

/* P(k, x) = P(Poisson(x) >= k) for integer k >= 1, x >= 0. */
static struct lpq gamma_p(double k, double x)
{
	if (x <= 0)
		return (struct lpq){-INFINITY, 0, -INFINITY};
	/* log(x^k e^-x / k!) by Loader's decomposition. */
	double ld =
	    k * log1pmx(x, k) - LN_SQRT_2PI - 0.5 * log(k) - stirlerr(k);
	if (k >= TEMME_K)
		return temme(k, x, ld);
	struct lpq o = {.ld = ld};
	double term = 1, sum = 1;
	if (x < k) {
		/* P = pmf(k) * sum_n x^n k! / (k+n)!: the ratios fall
		 * below x / k, so this ends after O(sqrt(k)) terms. */
		for (double n = 1;; n++) {
			term *= x / (k + n);
			sum += term;
			if (term <= 0x1p-56 * sum)
				break;
		}
		o.lp = ld + log(sum);
		o.lq = log1mexp(o.lp);
	} else {
		/* Q = sum_{j<k} pmf(j) = pmf(k) * sum_m k!/(k-m)! / x^m. */
		sum = 0;
		for (double m = 0; m < k; m++) {
			term *= (k - m) / x;
			sum += term;
			if (term <= 0x1p-56 * sum)
				break;
		}
		o.lq = sum > 0 ? ld + log(sum) : -INFINITY;
		o.lp = log1mexp(o.lq);
	}
	return o;
}

ML_EXPORT double ml_bound_global(uint64_t n, uint64_t interval)
{
	if (!interval)
		return NAN;
	return -expm1(-((double)n / (double)interval));
}

ML_EXPORT double ml_bound_alloc(uint64_t n, uint64_t limit, uint64_t interval)
{
	if (!interval)
		return NAN;
	if (limit == ML_NO_LIMIT)
		return 0; /* never interrupted, as in ml_run */
	double k = (double)ml__samples_needed(limit, interval);
	return exp(gamma_p(k, (double)n / (double)interval).lp);
}

/* A held limit (docs/statistics.md, "Held memory"): a task holding at
 * most n bytes at any time, its held set renewed `renewals` times, is
 * stopped early only if one generation carries k samples; a union bound
 * over the generations, each P(Poisson(n/S) >= k). */
ML_EXPORT double ml_bound_held(uint64_t n, uint64_t renewals, uint64_t limit,
                               uint64_t interval)
{
	double p = ml_bound_alloc(n, limit, interval);
	if (isnan(p))
		return p;
	double r = renewals ? (double)renewals : 1;
	return p * r < 1 ? p * r : 1;
}

ML_EXPORT uint64_t ml_bound_safe_bytes(uint64_t limit, double t,
                                       uint64_t interval)
{
	if (!interval || !(t > 0))
		return 0; /* also NaN; for t <= 0 only n = 0 is safe */
	if (t >= 1 || limit == ML_NO_LIMIT)
		return UINT64_MAX;
	double k = (double)ml__samples_needed(limit, interval), s = interval;
	double lt = log(t);
	/* Newton on y = log x: log P(k, e^y) is concave (the log-gamma
	 * density is log-concave), so after the first step the iterates rise
	 * monotonically to the root. */
	double y = log(k);
	for (int i = 0; i < 100; i++) {
		struct lpq o = gamma_p(k, exp(y));
		double slope = k * exp(o.ld - o.lp);
		double dy = (lt - o.lp) / slope;
		if (!isfinite(dy))
			break;
		y += dy;
		if (y < -740)
			y = -740;
		if (fabs(dy) <= 1e-15 * fmax(1, fabs(y)))
			break;
	}
	double guess = exp(y) * s;
	uint64_t g = guess >= 0x1p64 ? UINT64_MAX
	             : guess > 0     ? (uint64_t)guess
	                             : 0;
	/* The root is within a few bytes of g: find the exact integer with
	 * the very function users call, galloping then bisecting.  lo is
	 * always safe (n = 0 is), hi never is. */
#define SAFE(n) (ml_bound_alloc((n), limit, interval) <= t)
	uint64_t lo, hi, step = 1;
	if (SAFE(g)) {
		lo = g;
		for (;;) {
			if (lo > UINT64_MAX - step)
				return SAFE(UINT64_MAX) ? UINT64_MAX : lo;
			hi = lo + step;
			if (!SAFE(hi))
				break;
			lo = hi;
			step *= 2;
		}
	} else {
		hi = g;
		for (;;) {
			lo = hi > step ? hi - step : 0;
			if (lo == 0 || SAFE(lo))
				break;
			hi = lo;
			step *= 2;
		}
	}
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (SAFE(mid))
			lo = mid;
		else
			hi = mid;
	}
#undef SAFE
	return lo;
}

/* The smallest k in [1, max] for which pred(k, ctx) holds, pred being
 * false below some k and true from it on; 0 when pred(max) is false.
 * Gallop up from 1, then bisect: the bounds' searches over a sample
 * count. */
static uint64_t first_true(bool (*pred)(uint64_t k, const void *ctx),
                           const void *ctx, uint64_t max)
{
	uint64_t lo = 0, hi = 1; /* pred(lo) false (k = 0: by definition) */
	while (!pred(hi, ctx)) {
		lo = hi;
		if (hi >= max)
			return 0;
		hi = hi > max / 2 ? max : hi * 2;
	}
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;
		if (pred(mid, ctx))
			hi = mid;
		else
			lo = mid;
	}
	return hi;
}

struct limit_for {
	double x, t; /* safe / S, the target */
};

/* safe_bytes(k S) >= safe  <=>  P(k, safe / S) <= t; P falls with k. */
static bool limit_ok(uint64_t k, const void *ctx)
{
	const struct limit_for *c = ctx;
	return exp(gamma_p((double)k, c->x).lp) <= c->t;
}

ML_EXPORT uint64_t ml_bound_limit_for(uint64_t safe, double t,
                                      uint64_t interval)
{
	if (!interval || isnan(t))
		return 0;
	if (safe == 0 || t >= 1)
		return interval; /* k = 1 */
	if (!(t > 0))
		return ML_NO_LIMIT; /* only no limit is never interrupted */
	struct limit_for c = {(double)safe / (double)interval, t};
	uint64_t k = first_true(limit_ok, &c, UINT64_MAX / interval);
	return k ? k * interval : ML_NO_LIMIT;
}

/* P(a limit of `limit` bytes at interval S fires outside [(1 - a) limit,
 * (1 + a) limit]): the k-th point T of the Poisson process lies below
 * (1 - a) limit with P(Poisson((1 - a) limit / S) >= k), beyond (1 + a)
 * limit with P(Poisson((1 + a) limit / S) < k) (docs/statistics.md,
 * "Choosing a limit and an interval"). */
double ml__bound_outside(uint64_t limit, double a, uint64_t interval,
                         double *early, double *late)
{
	double k = (double)ml__samples_needed(limit, interval);
	double l = (double)limit, s = (double)interval;
	double e = exp(gamma_p(k, (1 - a) * l / s).lp);
	double z = exp(gamma_p(k, (1 + a) * l / s).lq);
	if (early)
		*early = e;
	if (late)
		*late = z;
	return e + z;
}

struct interval_for {
	uint64_t limit;
	double accuracy, t;
};

/* The two tails at interval limit / k fall with k. */
static bool interval_ok(uint64_t k, const void *ctx)
{
	const struct interval_for *c = ctx;
	return ml__bound_outside(c->limit, c->accuracy, c->limit / k, NULL,
	                         NULL) <= c->t;
}

ML_EXPORT uint64_t ml_bound_interval_for(uint64_t limit, double accuracy,
                                         double t)
{
	if (!(accuracy > 0 && accuracy < 1) || !(t > 0 && t < 1) ||
	    limit == 0 || limit == ML_NO_LIMIT)
		return 0;
	/* The fewest samples k (interval limit / k) that keep the limit
	 * within +-a except with probability t; 0: not even at one byte. */
	struct interval_for c = {limit, accuracy, t};
	uint64_t k = first_true(interval_ok, &c, limit);
	return k ? limit / k : 0;
}
