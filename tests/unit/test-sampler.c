/* The sampler: sample counts are exactly Poisson(n/S), split-invariant,
 * unbiased, blind to addresses, O(1) for huge allocations, reproducible.
 *
 * Counts are observed end to end through the library: a task with no limit
 * and FLAG delivery reports samples * S in out.allocated.  The PRNG draws
 * themselves are checked directly on lib/sampler/sampler.c, compiled in.
 *
 * Every statistical check uses a fixed seed and fails for a correct
 * implementation with probability below 1e-6 (chi-square p-value < 1e-6,
 * or a deviation beyond 5 standard deviations: P < 5.7e-7). */
#include "../../lib/sampler/sampler.h"
#include "stats.h"
#include "../tap/tap.h"

#include <memlimits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define S 4096u
#define P_MIN 1e-6

/* ML_TEST_QUICK=1 (valgrind, .ci/run): a tenth of the repetitions.  The
 * thresholds stay: fewer repetitions lower the power of each test, not its
 * false-alarm rate (chi-square bins are merged to >= 5 expected). */
static unsigned quick = 1;
#define REPS(n) ((n) / quick)

static void *volatile sink;

struct stream {
	size_t size;  /* bytes per allocation */
	size_t count; /* allocations */
	void **slots; /* NULL: free at once; else keep in slots[i % nslots] */
	size_t nslots;
};

static void *run_stream(void *arg)
{
	const struct stream *s = arg;
	for (size_t i = 0; i < s->count; i++) {
		void *p = malloc(s->size);
		if (!p)
			abort();
		if (s->slots) {
			void **slot = &s->slots[i % s->nslots];
			free(*slot);
			*slot = p;
		} else {
			sink = p;
			free(p);
		}
	}
	return NULL;
}

/* Samples carried by one run of the stream. */
static uint64_t samples_of(struct stream *s)
{
	ml_limits l = ML_LIMITS_INIT;
	l.delivery = ML_DELIVER_FLAG;
	ml_outcome out;
	if (ml_run(&l, run_stream, s, &out) != ML_OK)
		tap_bail("a task without limits was interrupted");
	return out.allocated / S;
}

/* Chi-square of `reps` runs of a stream against Poisson(bytes / S). */
static void check_poisson(struct stream *s, unsigned reps, const char *what)
{
	static uint64_t counts[ST_MAX_BINS * 4];
	double lambda = (double)(s->size * s->count) / S;
	unsigned n = (unsigned)(lambda + 12 * sqrt(lambda) + 16);
	if (n > sizeof counts / sizeof counts[0])
		tap_bail("lambda too large for the histogram");
	memset(counts, 0, sizeof counts);
	double sum = 0;
	for (unsigned r = 0; r < reps; r++) {
		uint64_t k = samples_of(s);
		sum += (double)k;
		counts[k < n ? k : n - 1]++;
	}
	double chi2;
	unsigned df;
	double p = st_chi2_poisson(counts, n, reps, lambda, &chi2, &df);
	tap_ok(p > P_MIN, "%s: chi2 = %.1f on %u df, p = %.3g (lambda %.2f)",
	       what, chi2, df, p, lambda);
	/* The mean of reps Poisson(lambda) has sd sqrt(lambda / reps). */
	double z = (sum / reps - lambda) / sqrt(lambda / reps);
	tap_ok(fabs(z) < 5, "%s: mean %.4f vs %.4f, z = %.2f", what, sum / reps,
	       lambda, z);
}

static void test_poisson_counts(void)
{
	/* 64 x 256 B = 16 KiB: lambda 4. */
	struct stream small = {256, 64, NULL, 0};
	check_poisson(&small, 20000, "64 x 256 B streams");
	/* Allocations larger than S: 3 x 10000 B, lambda 7.3. */
	struct stream big = {10000, 3, NULL, 0};
	check_poisson(&big, REPS(20000), "3 x 10000 B streams");
	/* Tiny allocations, many per sample: 512 x 24 B, lambda 3. */
	struct stream tiny = {24, 512, NULL, 0};
	check_poisson(&tiny, REPS(20000), "512 x 24 B streams");
}

static void test_split_invariance(void)
{
	/* One 1 MiB block and 16384 blocks of 64 B: both Poisson(256). */
	struct stream one = {1u << 20, 1, NULL, 0};
	struct stream many = {64, 16384, NULL, 0};
	check_poisson(&one, REPS(4000), "1 x 1 MiB");
	check_poisson(&many, REPS(2000), "16384 x 64 B");
}

static void test_unbiased(void)
{
	/* Mixed sizes, 64 MiB in all: samples * S estimates the bytes. */
	uint64_t bytes = 0, samples = 0;
	static const size_t sizes[] = {8, 40, 100, 333, 1024, 5000, 70000};
	for (unsigned r = 0; r < 64; r++)
		for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
			struct stream s = {
			    sizes[i], (1u << 20) / (sizes[i] * 7) + 1, NULL, 0};
			bytes += s.size * s.count;
			samples += samples_of(&s);
		}
	double lambda = (double)bytes / S;
	double z = ((double)samples - lambda) / sqrt(lambda);
	tap_ok(fabs(z) < 5, "unbiased: %llu bytes estimated as %llu, z = %.2f",
	       (unsigned long long)bytes, (unsigned long long)samples * S, z);
}

static void test_address_reuse(void)
{
	/* Same sizes and byte count; one workload cycles 100 slots (the same
	 * addresses again and again), the other keeps everything live (fresh
	 * addresses).  Both must be sampled at the rate of their bytes. */
	enum { N = 400000, SZ = 200 };
	static void *reuse[100], *fresh[N];
	struct stream a = {SZ, N, reuse, 100};
	struct stream b = {SZ, N, fresh, N};
	uint64_t ka = samples_of(&a), kb = samples_of(&b);
	for (unsigned i = 0; i < 100; i++)
		free(reuse[i]);
	for (unsigned i = 0; i < N; i++)
		free(fresh[i]);
	double lambda = (double)N * SZ / S;
	double za = ((double)ka - lambda) / sqrt(lambda);
	double zb = ((double)kb - lambda) / sqrt(lambda);
	double zd = ((double)ka - (double)kb) / sqrt(2 * lambda);
	tap_ok(fabs(za) < 5, "100 reused slots: %llu samples, z = %.2f",
	       (unsigned long long)ka, za);
	tap_ok(fabs(zb) < 5, "fresh addresses: %llu samples, z = %.2f",
	       (unsigned long long)kb, zb);
	tap_ok(fabs(zd) < 5, "reuse vs fresh differ by z = %.2f", zd);
}

static void *note_huge(void *arg)
{
	ml_note_alloc(*(size_t *)arg);
	return NULL;
}

static void test_huge(void)
{
	/* 2^40 bytes at S = 4096: lambda = 2^28, one O(1) draw. */
	size_t n = (size_t)1 << 40;
	ml_limits l = ML_LIMITS_INIT;
	l.delivery = ML_DELIVER_FLAG;
	ml_outcome out;
	ml_run(&l, note_huge, &n, &out);
	double lambda = (double)n / S;
	double z = ((double)(out.allocated / S) - lambda) / sqrt(lambda);
	tap_ok(fabs(z) < 5, "2^40 bytes in one note: z = %.2f", z);
}

static void test_reproducible(void)
{
	struct stream s = {100, 5000, NULL, 0};
	uint64_t a[8], b[8];
	ml_set_seed(12345);
	for (int i = 0; i < 8; i++)
		a[i] = samples_of(&s);
	ml_set_seed(12345);
	for (int i = 0; i < 8; i++)
		b[i] = samples_of(&s);
	tap_ok(!memcmp(a, b, sizeof a), "same seed, same samples");
	ml_set_seed(54321);
	for (int i = 0; i < 8; i++)
		b[i] = samples_of(&s);
	tap_ok(memcmp(a, b, sizeof a) != 0, "another seed, other samples");
}

/* ---- The draws themselves (lib/sampler/sampler.c compiled in)
 * ---------------- */

static void test_poisson_draws(void)
{
	static const double lambdas[] = {0.3, 4, 9.99, 10, 37.5, 400};
	struct ml__sampler s;
	ml__sampler_seed(&s, 99, 1);
	static uint64_t counts[ST_MAX_BINS * 4];
	for (unsigned j = 0; j < sizeof lambdas / sizeof lambdas[0]; j++) {
		double lambda = lambdas[j];
		unsigned n = (unsigned)(lambda + 12 * sqrt(lambda) + 16);
		unsigned reps = REPS(200000);
		memset(counts, 0, sizeof counts);
		for (unsigned r = 0; r < reps; r++) {
			uint64_t k = ml__poisson(s.rng, lambda);
			counts[k < n ? k : n - 1]++;
		}
		double chi2;
		unsigned df;
		double p = st_chi2_poisson(counts, n, reps, lambda, &chi2, &df);
		tap_ok(p > P_MIN,
		       "Poisson(%g) draws: chi2 = %.1f on %u df, p = %.3g",
		       lambda, chi2, df, p);
	}
	/* Far beyond any histogram: mean and variance at lambda = 1e12. */
	double lambda = 1e12, sum = 0, sq = 0;
	unsigned reps = REPS(100000);
	for (unsigned r = 0; r < reps; r++) {
		double k = (double)ml__poisson(s.rng, lambda) - lambda;
		sum += k;
		sq += k * k;
	}
	double z = (sum / reps) / sqrt(lambda / reps);
	tap_ok(fabs(z) < 5, "Poisson(1e12) mean z = %.2f", z);
	/* Var of the sample variance ~ 2 lambda^2 / reps (normal limit). */
	double zv = (sq / reps - lambda) / (lambda * sqrt(2.0 / reps));
	tap_ok(fabs(zv) < 5, "Poisson(1e12) variance z = %.2f", zv);
}

static void test_gap_exponential(void)
{
	/* The countdown plus its fraction is Exp(S): mean S, and
	 * P(gap > S) = e^-1. */
	struct ml__sampler s;
	ml__sampler_seed(&s, 7, 3);
	s.interval = S;
	unsigned reps = REPS(400000), over = 0;
	double sum = 0;
	for (unsigned r = 0; r < reps; r++) {
		double gap = (double)ml__sampler_gap(&s) + 1 - s.frac;
		sum += gap;
		over += gap > S;
	}
	double z = (sum / reps - S) / (S / sqrt(reps));
	tap_ok(fabs(z) < 5, "gap mean %.1f vs %u, z = %.2f", sum / reps, S, z);
	double p = exp(-1), zp = (over - reps * p) / sqrt(reps * p * (1 - p));
	tap_ok(fabs(zp) < 5, "P(gap > S) z = %.2f", zp);
}

int main(void)
{
	const char *q = getenv("ML_TEST_QUICK");
	if (q && *q && strcmp(q, "0"))
		quick = 10;
	ml_set_sample_interval(S);
	ml_set_seed(1);
	TAP_RUN(test_poisson_counts);
	TAP_RUN(test_split_invariance);
	TAP_RUN(test_unbiased);
	TAP_RUN(test_address_reuse);
	TAP_RUN(test_huge);
	TAP_RUN(test_reproducible);
	TAP_RUN(test_poisson_draws);
	TAP_RUN(test_gap_exponential);
	tap_ok(ml_set_sample_interval(0) == ML_EINVAL &&
	           ml_sample_interval() == S,
	       "interval 0 is refused and changes nothing");
	return tap_done();
}
