/* The documented bounds (ml_bound_*) against reference values computed in
 * high precision and against identities that hold whatever the method:
 * closed forms, Poisson sums, differences in k, monotonicity, normal
 * approximation, and the round trips between the four functions. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "memlimits.h"

/* The contract: 1e-6 relative for values down to 1e-300. */
#define REL 1e-6
#define TINY 1e-300

static char buf[1 << 16];

static double rel_err(double got, double want)
{
	if (want == 0)
		return got == 0 ? 0 : INFINITY;
	return fabs(got - want) / fabs(want);
}

/* A reference value: below TINY (including values strtod cannot
 * represent, such as 1e-609139) only "below TINY" is required. */
static bool close_to(double got, double want)
{
	if (want < TINY)
		return got >= 0 && got < TINY;
	return rel_err(got, want) <= REL;
}

static uint64_t u64(const char *s)
{
	return strtoull(s, NULL, 10);
}

/* One row of a reference file: kind, then 3 or 4 fields. */
static void check_row(char **f, int nf, int line)
{
	const char *kind = f[0];
	if (!strcmp(kind, "global") && nf == 4) {
		double got = ml_bound_global(u64(f[1]), u64(f[2]));
		double want = strtod(f[3], NULL);
		tap_ok(close_to(got, want),
		       "line %d: global(%s, %s) = %.10g ~ %s", line, f[1], f[2],
		       got, f[3]);
	} else if (!strcmp(kind, "alloc") && nf == 5) {
		double got = ml_bound_alloc(u64(f[1]), u64(f[2]), u64(f[3]));
		errno = 0;
		double want = strtod(f[4], NULL);
		tap_ok(close_to(got, want),
		       "line %d: alloc(%s, %s, %s) = %.10g ~ %s", line, f[1],
		       f[2], f[3], got, f[4]);
	} else if (!strcmp(kind, "safe") && nf == 5) {
		uint64_t got = ml_bound_safe_bytes(
		    u64(f[1]), strtod(f[2], NULL), u64(f[3]));
		tap_ok(got == u64(f[4]),
		       "line %d: safe_bytes(%s, %s, %s) = %llu, want %s", line,
		       f[1], f[2], f[3], (unsigned long long)got, f[4]);
	} else if (!strcmp(kind, "limit_for") && nf == 5) {
		uint64_t got = ml_bound_limit_for(u64(f[1]), strtod(f[2], NULL),
		                                  u64(f[3]));
		tap_ok(got == u64(f[4]),
		       "line %d: limit_for(%s, %s, %s) = %llu, want %s", line,
		       f[1], f[2], f[3], (unsigned long long)got, f[4]);
	} else {
		tap_ok(false, "line %d: malformed row (%s, %d fields)", line,
		       kind, nf);
	}
}

/* Check every row of $top_srcdir/tests/data/NAME; returns the rows seen. */
static int check_file(const char *name)
{
	const char *top = getenv("top_srcdir");
	char path[4096];
	snprintf(path, sizeof path, "%s/tests/data/%s", top ? top : ".", name);
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		tap_bail("cannot open %s (is top_srcdir set?)", path);
	size_t len = 0;
	ssize_t r;
	while ((r = read(fd, buf + len, sizeof buf - 1 - len)) > 0)
		len += (size_t)r;
	close(fd);
	if (r < 0 || len == sizeof buf - 1)
		tap_bail("cannot read %s whole", path);
	buf[len] = 0;
	int rows = 0, line = 0;
	for (char *save = NULL, *l = strtok_r(buf, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save)) {
		line++;
		if (l[0] == '#' || !l[0])
			continue;
		char *f[8] = {0}, *fs = NULL;
		int nf = 0;
		for (char *t = strtok_r(l, "\t", &fs); t && nf < 8;
		     t = strtok_r(NULL, "\t", &fs))
			f[nf++] = t;
		if (nf)
			check_row(f, nf, line);
		rows++;
	}
	return rows;
}

/* P(Poisson(x) = j), straight from the definition. */
static double pmf(double j, double x)
{
	return exp(j * log(x) - x - lgamma(j + 1));
}

static void test_edges(void)
{
	tap_ok(isnan(ml_bound_global(1, 0)), "global: interval 0 is NaN");
	tap_ok(isnan(ml_bound_alloc(1, 1, 0)), "alloc: interval 0 is NaN");
	tap_is(ml_bound_safe_bytes(1000, 1e-9, 0), 0, "safe_bytes: interval 0");
	tap_is(ml_bound_limit_for(1000, 1e-9, 0), 0, "limit_for: interval 0");
	tap_ok(ml_bound_global(0, 80000) == 0, "global(0) = 0");
	tap_ok(ml_bound_alloc(0, 1 << 20, 80000) == 0, "alloc(0) = 0");
	tap_ok(ml_bound_alloc(UINT64_MAX, ML_NO_LIMIT, 1) == 0,
	       "no limit: never interrupted");
	tap_ok(ml_bound_alloc(UINT64_MAX, 1 << 20, 80000) == 1,
	       "alloc(UINT64_MAX) = 1");
	tap_ok(ml_bound_safe_bytes(ML_NO_LIMIT, 1e-9, 80000) == UINT64_MAX,
	       "safe_bytes(no limit) = UINT64_MAX");
	tap_ok(ml_bound_safe_bytes(1 << 20, 1, 80000) == UINT64_MAX,
	       "safe_bytes(t = 1) = UINT64_MAX");
	tap_is(ml_bound_safe_bytes(1 << 20, 0, 80000), 0, "safe_bytes(t = 0)");
	tap_is(ml_bound_safe_bytes(1 << 20, -1, 80000), 0, "safe_bytes(t < 0)");
	tap_is(ml_bound_safe_bytes(1 << 20, NAN, 80000), 0, "safe_bytes(NaN)");
	tap_is(ml_bound_limit_for(0, 1e-9, 80000), 80000, "limit_for(0) = S");
	tap_is(ml_bound_limit_for(1 << 20, 1, 80000), 80000,
	       "limit_for(t = 1) = S");
	tap_ok(ml_bound_limit_for(1 << 20, 0, 80000) == ML_NO_LIMIT,
	       "limit_for(t = 0) = no limit");
	tap_is(ml_bound_limit_for(1 << 20, NAN, 80000), 0, "limit_for(NaN)");
	tap_ok(ml_bound_limit_for(UINT64_MAX - 1000, 1e-9, 1 << 20) ==
	           ML_NO_LIMIT,
	       "limit_for: no representable limit -> no limit");
	/* limit 0 and limit <= S both mean k = 1. */
	tap_ok(ml_bound_alloc(5000, 0, 4096) ==
	           ml_bound_alloc(5000, 4096, 4096),
	       "limit 0 behaves as k = 1");
	tap_ok(ml_bound_alloc(5000, 4097, 4096) ==
	           ml_bound_alloc(5000, 8192, 4096),
	       "k = ceil(limit / S)");
}

/* k = 1: P = 1 - exp(-n/S), and the global bound is the same function. */
static void test_k1(void)
{
	const uint64_t s = 80000;
	double worst = 0, worst_g = 0;
	for (uint64_t n = 1; n < 100 * s; n = n * 3 / 2 + 7) {
		double want = -expm1(-(double)n / s);
		worst = fmax(worst, rel_err(ml_bound_alloc(n, s, s), want));
		worst_g = fmax(worst_g, rel_err(ml_bound_global(n, s), want));
	}
	tap_ok(worst < 1e-12, "k = 1: alloc = 1 - exp(-n/S) (worst %.2g)",
	       worst);
	tap_ok(worst_g < 1e-15, "global = 1 - exp(-n/S) (worst %.2g)", worst_g);
	/* Complement: P + exp(-n/S) = 1 where both are representable. */
	double g = ml_bound_global(100000, 80000);
	tap_ok(fabs(g + exp(-1.25) - 1) < 1e-15, "global + survival = 1");
}

/* Small k: P(X >= k) against sums of Poisson terms, both ways. */
static void test_poisson_sums(void)
{
	const uint64_t s = 4096;
	double worst_up = 0, worst_down = 0;
	for (int k = 2; k <= 40; k++) {
		for (double r = 0.001; r < 4; r *= 1.7) {
			uint64_t n = (uint64_t)(r * k * s);
			double x = (double)n / s;
			double p = ml_bound_alloc(n, (uint64_t)k * s, s);
			/* Upward tail sum: no cancellation, any size. */
			double up = 0;
			for (int j = k; j < k + 400; j++)
				up += pmf(j, x);
			worst_up = fmax(worst_up, rel_err(p, up));
			/* 1 - lower sum: only where P is not small. */
			if (p > 0.01) {
				double low = 0;
				for (int j = 0; j < k; j++)
					low += pmf(j, x);
				worst_down =
				    fmax(worst_down, rel_err(p, 1 - low));
			}
		}
	}
	tap_ok(worst_up < 1e-10, "k <= 40: P = sum_{j>=k} pmf(j) (worst %.2g)",
	       worst_up);
	tap_ok(worst_down < 1e-10,
	       "k <= 40: P = 1 - sum_{j<k} pmf(j) (worst %.2g)", worst_down);
}

/* P(k, x) - P(k+1, x) = pmf(k; x): consecutive limits, including across
 * the switch between summation and the asymptotic expansion. */
static void test_differences(void)
{
	static const double ks[] = {1,     2,     10,     300, 5000,
	                            99998, 99999, 100000, 1e6, 1e7};
	const uint64_t s = 4096;
	for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
		double k = ks[i], worst = 0;
		for (double z = -3; z <= 3; z += 0.5) {
			double v = (k + z * sqrt(k)) * s;
			if (v < 1)
				continue;
			uint64_t n = (uint64_t)v;
			double x = (double)n / s;
			double d = ml_bound_alloc(n, (uint64_t)k * s, s) -
			           ml_bound_alloc(n, (uint64_t)(k + 1) * s, s);
			/* The subtraction itself loses P / pmf ~ sqrt(k). */
			worst = fmax(worst, rel_err(d, pmf(k, x)));
		}
		tap_ok(worst < 1e-6,
		       "k = %g: P(k) - P(k+1) = pmf(k) (worst %.2g)", k, worst);
	}
}

static void test_monotone(void)
{
	static const uint64_t ks[] = {1,     2,      10,      839,
	                              99999, 100000, 1000000, 10000000};
	const uint64_t s = 80000;
	for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
		uint64_t k = ks[i], lim = k * s, bad = 0;
		double prev = 0;
		/* A coarse sweep to 3 k S, then byte by byte across x = k,
		 * where the methods switch. */
		for (int j = 0; j <= 3000; j++) {
			double p = ml_bound_alloc(lim / 1000 * j, lim, s);
			bad += p < prev || p > 1;
			prev = p;
		}
		prev = 0;
		for (uint64_t n = lim - 2000; n <= lim + 2000; n++) {
			double p = ml_bound_alloc(n, lim, s);
			bad += p < prev;
			prev = p;
		}
		tap_ok(bad == 0, "k = %llu: non-decreasing in n (%llu drops)",
		       (unsigned long long)k, (unsigned long long)bad);
	}
	/* Non-increasing in the limit. */
	static const uint64_t ns[] = {4000, 80000, 8000000, 8000000000};
	for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
		uint64_t n = ns[i], bad = 0;
		double prev = 2;
		for (uint64_t lim = 0; lim < 3 * n + 1000000;
		     lim += n / 500 + 997) {
			double p = ml_bound_alloc(n, lim, s);
			bad += p > prev;
			prev = p;
		}
		tap_ok(bad == 0, "n = %llu: non-increasing in the limit",
		       (unsigned long long)n);
	}
}

/* Gamma(k, 1) at k + z sqrt(k): Phi(z) minus the first Edgeworth term;
 * the rest is O(1/k) (about 0.063 / k). */
static void test_normal(void)
{
	static const double ks[] = {1e3, 1e5, 1e6, 1e7};
	const uint64_t s = 4096;
	for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
		double k = ks[i], worst = 0;
		for (double z = -5; z <= 5; z += 0.125) {
			uint64_t n = (uint64_t)llround((k + z * sqrt(k)) * s);
			double x = (double)n / s, zz = (x - k) / sqrt(k);
			double phi = exp(-zz * zz / 2) / sqrt(2 * M_PI);
			double f = 0.5 * erfc(-zz / sqrt(2)) -
			           phi * (zz * zz - 1) / (3 * sqrt(k));
			double p = ml_bound_alloc(n, (uint64_t)k * s, s);
			worst = fmax(worst, fabs(p - f) * k);
		}
		tap_ok(worst < 0.1,
		       "k = %g: P ~ Phi - Edgeworth, error %.3f / k < 0.1 / k",
		       k, worst);
	}
}

static void test_round_trips(void)
{
	static const uint64_t limits[] = {
	    1, 80000, 80001, 160000, 1 << 20, 64 << 20, 1u << 30, 800000000000};
	static const double ts[] = {0.5, 1e-3, 1e-9, 4e-15, 1e-50, 1e-300};
	const uint64_t s = 80000;
	int bad = 0, checked = 0;
	for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
		uint64_t prev = UINT64_MAX;
		for (size_t j = 0; j < sizeof ts / sizeof ts[0]; j++) {
			uint64_t n = ml_bound_safe_bytes(limits[i], ts[j], s);
			/* n is the largest safe count. */
			if (ml_bound_alloc(n, limits[i], s) > ts[j] ||
			    ml_bound_alloc(n + 1, limits[i], s) <= ts[j]) {
				bad++;
				tap_diag(
				    "safe_bytes(%llu, %g) = %llu is not the "
				    "crossing",
				    (unsigned long long)limits[i], ts[j],
				    (unsigned long long)n);
			}
			/* Smaller targets, fewer safe bytes. */
			bad += n > prev;
			prev = n;
			checked++;
		}
	}
	tap_ok(bad == 0, "safe_bytes is the crossing, monotone in t (%d cases)",
	       checked);

	static const uint64_t safes[] = {1,         1000,       80000,
	                                 1000000,   16777216,   1000000000,
	                                 123456789, 50000000000};
	bad = 0;
	checked = 0;
	for (size_t i = 0; i < sizeof safes / sizeof safes[0]; i++)
		for (size_t j = 1; j < sizeof ts / sizeof ts[0]; j++) {
			uint64_t l = ml_bound_limit_for(safes[i], ts[j], s);
			bool ok =
			    l % s == 0 &&
			    ml_bound_safe_bytes(l, ts[j], s) >= safes[i] &&
			    (l == s ||
			     ml_bound_safe_bytes(l - s, ts[j], s) < safes[i]);
			if (!ok)
				tap_diag("limit_for(%llu, %g) = %llu",
				         (unsigned long long)safes[i], ts[j],
				         (unsigned long long)l);
			bad += !ok;
			checked++;
		}
	tap_ok(
	    bad == 0,
	    "limit_for is the smallest k S with enough safe bytes (%d cases)",
	    checked);
	/* More safe bytes need a larger limit; smaller targets too. */
	tap_ok(ml_bound_limit_for(1000000, 1e-9, s) <
	               ml_bound_limit_for(2000000, 1e-9, s) &&
	           ml_bound_limit_for(1000000, 1e-9, s) <
	               ml_bound_limit_for(1000000, 1e-50, s),
	       "limit_for grows with safe and with smaller t");
}

/* Huge k and huge safe sizes give sane answers.  What they cost (so a
 * regression to scans over k) is `make bench`'s (bench/run-costs.sh):
 * no speed is judged here. */
static void test_huge(void)
{
	uint64_t a = ml_bound_safe_bytes(800000000000, 1e-50, 80000);
	uint64_t b = ml_bound_limit_for(1ull << 30, 1e-9, 80000);
	uint64_t c = ml_bound_limit_for(UINT64_MAX / 4, 1e-9, 1);
	tap_diag("safe_bytes(k = 1e7) = %llu, limit_for(1 GiB) = %llu, "
	         "limit_for(2^62, S = 1) = %llu",
	         (unsigned long long)a, (unsigned long long)b,
	         (unsigned long long)c);
	/* k = 1e7 at 1e-50 (z = -14.9333): the Gamma quantile by
	 * Wilson-Hilferty, k (1 - 1/(9k) + z/(3 sqrt k))^3, whose error
	 * here is far below one sample; and above the normal quantile
	 * k + z sqrt(k), as docs/statistics.md says (the left tail is
	 * lighter). */
	const double k = 1e7, z50 = -14.933337534788;
	double wh = k * pow(1 - 1 / (9 * k) + z50 / (3 * sqrt(k)), 3);
	tap_ok(fabs((double)a / 80000 - wh) < 1 &&
	           (double)a / 80000 > k + z50 * sqrt(k),
	       "safe_bytes(k = 1e7, 1e-50) = %.3f S: the Wilson-Hilferty "
	       "quantile %.3f within one sample",
	       (double)a / 80000, wh);
	tap_is(b, 1129840000,
	       "docs/statistics.md: 1 GiB safe at 1e-9 needs a limit of "
	       "1 129 840 000 bytes");
	/* k = 2^62: the normal quantile, z = 5.997807 for 1e-9, within
	 * 1e-3 of its sqrt(k) = 2^31 term (the skew moves it by about
	 * z^2/3 samples, nothing beside 2^31). */
	double zc = ((double)c - 0x1p62) / 0x1p31;
	tap_ok(fabs(zc - 5.997807) < 1e-3,
	       "limit_for(2^62, 1e-9, S = 1) = 2^62 + %.6f sqrt(2^62)", zc);
}

static void test_reference_files(void)
{
	int rows = check_file("bounds-reference.tsv");
	tap_ok(rows == 88, "shared reference: %d rows", rows);
	rows = check_file("bounds-mpmath.tsv");
	tap_ok(rows == 251, "mpmath reference: %d rows of 251", rows);
}

/* ml_bound_interval_for: the interval it gives keeps both tails within
 * t (checked through ml_bound_alloc, the function users call), one
 * sample fewer does not, and bad arguments give 0. */
static void test_interval_for(void)
{
	static const struct {
		uint64_t limit;
		double a, t;
	} cases[] = {{1 << 20, 0.1, 1e-9},
	             {16 << 20, 0.1, 1e-9},
	             {1 << 30, 0.05, 1e-6},
	             {100000, 0.5, 1e-3},
	             {1 << 20, 0.01, 1e-3}};
	int bad = 0;
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		uint64_t l = cases[i].limit,
		         s = ml_bound_interval_for(l, cases[i].a, cases[i].t);
		if (!s) {
			bad++;
			continue;
		}
		uint64_t k = l / s + (l % s != 0);
		double early = ml_bound_alloc(
		    (uint64_t)((1 - cases[i].a) * (double)l), l, s);
		double late =
		    1 - ml_bound_alloc((uint64_t)((1 + cases[i].a) * (double)l),
		                       l, s);
		/* late in double loses what is below 1e-16 of 1: allow
		 * that much. */
		if (early + late > cases[i].t + 1e-15)
			bad++;
		/* Near the fewest samples: 5 % fewer (a 5 % longer
		 * interval) miss t. */
		uint64_t s2 = s + s / 20 + 1;
		double e2 = ml_bound_alloc(
		    (uint64_t)((1 - cases[i].a) * (double)l), l, s2);
		double l2 =
		    1 - ml_bound_alloc((uint64_t)((1 + cases[i].a) * (double)l),
		                       l, s2);
		if (e2 + l2 <= cases[i].t)
			bad++;
		(void)k;
	}
	tap_ok(bad == 0,
	       "ml_bound_interval_for: tails within t, 5 %% fewer "
	       "samples not (%d bad)",
	       bad);
	tap_ok(ml_bound_interval_for(1 << 20, 0, 1e-9) == 0 &&
	           ml_bound_interval_for(1 << 20, 1, 1e-9) == 0 &&
	           ml_bound_interval_for(1 << 20, 0.1, 0) == 0 &&
	           ml_bound_interval_for(1 << 20, 0.1, 1) == 0 &&
	           ml_bound_interval_for(0, 0.1, 1e-9) == 0 &&
	           ml_bound_interval_for(ML_NO_LIMIT, 0.1, 1e-9) == 0 &&
	           ml_bound_interval_for(1 << 20, NAN, 1e-9) == 0,
	       "ml_bound_interval_for: bad arguments give 0");
	tap_is(ml_bound_interval_for(1 << 20, 0.1, 1e-9), 271,
	       "1 MiB +-10 %% at 1e-9: interval 271 (k = 3870)");
}

int main(void)
{
	TAP_RUN(test_reference_files);
	TAP_RUN(test_edges);
	TAP_RUN(test_k1);
	TAP_RUN(test_poisson_sums);
	TAP_RUN(test_differences);
	TAP_RUN(test_monotone);
	TAP_RUN(test_normal);
	TAP_RUN(test_round_trips);
	TAP_RUN(test_huge);
	TAP_RUN(test_interval_for);
	return tap_done();
}
