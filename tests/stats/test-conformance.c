/* Conformance of the real library to its documented bounds
 * (docs/statistics.md), at a small sample interval so that it runs fast.
 *
 * Every task allocates a fixed sequence of sizes m_0, m_1, ... (the same
 * for all tasks, independent of the sampler), so allocation j covers the
 * bytes (b_j, b_{j+1}] with b_j = m_0 + ... + m_{j-1}.  The task is
 * interrupted by the allocation that holds the k-th point T of the
 * sampler's Poisson process, T ~ Gamma(k, S); so the index J of the
 * interrupted allocation has exactly the distribution
 *     P(J <= j) = P(T <= b_{j+1}) = ml_bound_alloc(b_{j+1}, limit, S),
 * whatever the sizes (large ones included): no discretisation error to
 * allow for.  The tests compare the observed J with that distribution by
 * Kolmogorov-Smirnov.  For n observations the two-sided statistic exceeds
 * sqrt(ln(2/alpha) / (2n)) with probability at most alpha (Dvoretzky-
 * Kiefer-Wolfowitz with Massart's constant; for a discrete distribution
 * such as J's the statistic is only smaller).  Each threshold below sets
 * alpha = 1e-6: a correct library fails it with probability below 1e-6
 * over the choice of the seed. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "memlimits.h"

#define S 4096
#define ALPHA 1e-6
#define MAX_TASKS 10000

/* ML_TEST_QUICK=1 (valgrind in .ci/run): a tenth of the tasks.  The
 * critical values are computed from n, so the false-alarm probability stays
 * below 1e-6; only the power drops. */
static size_t quick = 1;
#define N_TASKS(n) ((n) / quick)

/* ---- allocation patterns ----------------------------------------------- */

enum pattern { ONE_SIZE, MIXED };

struct plan {
	enum pattern pattern;
	uint64_t size;  /* ONE_SIZE: every allocation; MIXED: the largest */
	uint64_t limit; /* ML_NO_LIMIT: global-limit tasks */
	bool global;
	ml_delivery delivery;
	uint64_t stop;     /* bytes after which the task ends (0: far away) */
	uint64_t interval; /* the task's own interval (0: the process's) */
	bool outer;        /* run inside a task at the process's interval */
};

/* When not 0, the outer task (plan.outer) has this interval of its own
 * (set around one case of test_own_interval). */
static uint64_t outer_interval;

/* Size of allocation j: a fixed function of j, never of the sampler. */
static uint64_t size_of(const struct plan *p, uint64_t j)
{
	if (p->pattern == ONE_SIZE)
		return p->size;
	/* A hash of j, spread log-uniformly over [1, size]. */
	uint64_t h = (j + 1) * 0x9e3779b97f4a7c15u;
	h ^= h >> 29;
	h *= 0xbf58476d1ce4e5b9u;
	h ^= h >> 32;
	double u = (double)(h >> 11) * 0x1.0p-53;
	uint64_t m = (uint64_t)exp(u * log((double)p->size + 1));
	return m < 1 ? 1 : m > p->size ? p->size : m;
}

/* ---- one task ------------------------------------------------------------ */

/* Where the task was when interrupted.  Written before each allocation,
 * read after ml_run: volatile, so that a jump cannot lose the stores. */
static volatile uint64_t cur_index;
static volatile uint64_t cur_start; /* b_j */
static volatile bool flagged, failed;
static _Thread_local void *volatile sink;

static void *task(void *arg)
{
	const struct plan *p = arg;
	/* Without a stop, a cap no correct run reaches: P(Gamma(k, S) >
	 * 2000 k S) is below 1e-300. */
	uint64_t si = p->interval ? p->interval : S;
	uint64_t k = p->limit == ML_NO_LIMIT ? 1 : p->limit / si + 1;
	uint64_t total = 0, limit = p->stop ? p->stop : 2000 * k * si;
	for (uint64_t j = 0; total < limit; j++) {
		uint64_t m = size_of(p, j);
		cur_index = j;
		cur_start = total;
		void *q = malloc(m);
		if (!q) {
			failed = true; /* FAIL delivery: this one was refused */
			return NULL;
		}
		sink = q;
		free(q);
		total += m;
		if (p->delivery == ML_DELIVER_FLAG && ml_is_interrupted()) {
			flagged = true;
			return NULL;
		}
	}
	cur_index = UINT64_MAX; /* ran to its end */
	return NULL;
}

struct result {
	uint64_t index, start, end; /* the interrupted allocation */
	ml_status status;
	bool interrupted;
};

struct inner {
	const struct plan *p;
	ml_status st;
};

static void *run_inner(void *arg)
{
	struct inner *in = arg;
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = in->p->limit;
	l.global = in->p->global;
	l.delivery = in->p->delivery;
	l.interval = in->p->interval;
	in->st = ml_run(&l, task, (void *)in->p, NULL);
	return NULL;
}

static struct result run_one(const struct plan *p)
{
	flagged = failed = false;
	cur_index = 0;
	struct inner in = {p, ML_OK};
	if (p->outer) {
		/* The thread samples at the process's interval for the outer
		 * task: the inner one keeps its samples by thinning. */
		ml_limits outer = ML_LIMITS_INIT;
		outer.interval = outer_interval;
		ml_run(&outer, run_inner, &in, NULL);
	} else {
		run_inner(&in);
	}
	ml_status st = in.st;
	struct result r = {.status = st};
	r.interrupted = cur_index != UINT64_MAX;
	if (r.interrupted) {
		r.index = cur_index;
		r.start = cur_start;
		r.end = cur_start + size_of(p, cur_index);
	}
	/* How the interruption was seen must match the delivery. */
	if (p->delivery == ML_DELIVER_FLAG && r.interrupted && !flagged)
		r.status = ML_EINVAL;
	if (p->delivery == ML_DELIVER_FAIL && r.interrupted && !failed)
		r.status = ML_EINVAL;
	return r;
}

/* ---- statistics ---------------------------------------------------------- */

static uint64_t idx[MAX_TASKS];

static void sort_u64(uint64_t *a, size_t n)
{
	/* Shell sort: no allocation (qsort may call malloc). */
	static const size_t gaps[] = {1750, 701, 301, 132, 57, 23, 10, 4, 1};
	for (size_t g = 0; g < sizeof gaps / sizeof gaps[0]; g++)
		for (size_t i = gaps[g]; i < n; i++) {
			uint64_t v = a[i];
			size_t j = i;
			for (; j >= gaps[g] && a[j - gaps[g]] > v; j -= gaps[g])
				a[j] = a[j - gaps[g]];
			a[j] = v;
		}
}

static double ks_critical(size_t n)
{
	return sqrt(log(2 / ALPHA) / (2.0 * (double)n));
}

/* The CDF of T: Gamma(k, S) through the documented bound itself. */
static double cdf_t(const struct plan *p, uint64_t x)
{
	uint64_t si = p->interval ? p->interval : S;
	return p->global ? ml_bound_global(x, si)
	                 : ml_bound_alloc(x, p->limit, si);
}

/* KS distance between the observed indices a[0..n) (sorted) and
 * P(J <= j) = F(b_{j+1}).  Both are step functions on the integers, so
 * the supremum is a maximum over j = 0 .. max observed. */
static double ks_index(const struct plan *p, const uint64_t *a, size_t n)
{
	double d = 0;
	uint64_t b = 0;
	size_t seen = 0;
	for (uint64_t j = 0; j <= a[n - 1]; j++) {
		b += size_of(p, j);
		while (seen < n && a[seen] <= j)
			seen++;
		double e = (double)seen / (double)n;
		d = fmax(d, fabs(e - cdf_t(p, b)));
	}
	return d;
}

/* Run n tasks of plan p with seed `seed`; checks that every one was
 * interrupted for the right reason, then the KS test.  The indices stay
 * in idx[] (in task order) for the caller. */
static double run_ks(const char *name, const struct plan *p, size_t n,
                     uint64_t seed)
{
	ml_set_seed(seed);
	ml_status want = p->global ? ML_GLOBAL_LIMIT : ML_ALLOC_LIMIT;
	size_t wrong = 0;
	for (size_t i = 0; i < n; i++) {
		struct result r = run_one(p);
		if (!r.interrupted || r.status != want)
			wrong++;
		idx[i] = r.interrupted ? r.index : UINT64_MAX / 2;
	}
	/* P(T > 1000 k S) is below 1e-300 for the k used here, so every
	 * task must have been interrupted, by its own limit. */
	tap_ok(wrong == 0,
	       "%s: all %zu tasks interrupted with status %d (%zu not)", name,
	       n, (int)want, wrong);
	static uint64_t sorted[MAX_TASKS];
	memcpy(sorted, idx, n * sizeof idx[0]);
	sort_u64(sorted, n);
	double d = wrong ? 1 : ks_index(p, sorted, n), c = ks_critical(n);
	tap_ok(
	    d <= c,
	    "%s: interrupted allocation ~ P(T <= b_j+1): KS D = %.4f <= %.4f "
	    "(n = %zu, alpha = 1e-6)",
	    name, d, c, n);
	return d;
}

/* ---- (a) allocation limits: Gamma(k, S) --------------------------------- */

static void test_gamma(void)
{
	/* k = ceil(limit / S): 10 from a limit just under 10 S. */
	struct plan one = {ONE_SIZE, 24, 10 * S - 100, false, ML_DELIVER_JUMP,
	                   0,        0,  false};
	run_ks("one size (24 B), k = 10", &one, N_TASKS(10000), 1);
	/* Mixed sizes from 1 byte to 3 S: many allocations carry a sample
	 * in the middle, some several. */
	struct plan mixed = {MIXED,           3 * S, 16 * S, false,
	                     ML_DELIVER_JUMP, 0,     0,      false};
	run_ks("mixed sizes (1 B .. 3 S), k = 16", &mixed, N_TASKS(10000), 2);
	/* Larger than S: k = 11 from a limit just over 10 S. */
	struct plan big = {ONE_SIZE,        3 * S + 5, 10 * S + 1, false,
	                   ML_DELIVER_JUMP, 0,         0,          false};
	run_ks("size 3 S + 5, k = 11", &big, N_TASKS(10000), 3);
	/* Much larger than S: about 8 samples per allocation, so the
	 * Poisson count inside an allocation decides where it stops. */
	struct plan huge = {ONE_SIZE,        8 * S + 3, 40 * S, false,
	                    ML_DELIVER_JUMP, 0,         0,      false};
	run_ks("size 8 S + 3, k = 40", &huge, N_TASKS(10000), 4);
	/* k = 1: the first sample. */
	struct plan k1 = {ONE_SIZE,        100, 1, false,
	                  ML_DELIVER_JUMP, 0,   0, false};
	run_ks("size 100 B, k = 1", &k1, N_TASKS(10000), 5);
}

/* ---- (e) one task, slices on 2 and 4 threads ---------------------------
 *
 * The allocations of the plan are made by m threads in turn (allocation j
 * by thread j mod m), each inside its own slice of one task object
 * (ml_task_run).  Each thread's samples are a Poisson process over its own
 * bytes; their superposition over the interleaved sequence is one Poisson
 * process of rate 1/S, so the refused allocation J has the same law as
 * for one thread: P(J <= j) = P(Gamma(k, S) <= b_{j+1}). */

struct turns {
	const struct plan *plan;
	ml_task *task;
	int m;
	atomic_ullong turn;  /* the allocation to make next */
	atomic_ullong stop;  /* UINT64_MAX, or the refused index */
	atomic_int go, done; /* task generation started / workers done */
};

static void *turn_slice(void *arg)
{
	void **a = arg;
	struct turns *tt = a[0];
	int me = (int)(intptr_t)a[1];
	for (;;) {
		uint64_t j = atomic_load(&tt->turn);
		if (atomic_load(&tt->stop) != UINT64_MAX)
			return NULL;
		if ((int)(j % (uint64_t)tt->m) != me) {
			sched_yield();
			continue;
		}
		void *q = malloc(size_of(tt->plan, j));
		if (!q) {
			atomic_store(&tt->stop, j);
			return NULL;
		}
		sink = q;
		free(q);
		atomic_store(&tt->turn, j + 1);
	}
}

static void *turn_worker(void *arg)
{
	void **a = arg;
	struct turns *tt = a[0];
	for (int gen = 1;; gen++) {
		while (atomic_load(&tt->go) < gen)
			sched_yield();
		if (!tt->task)
			return NULL;
		ml_task_run(tt->task, turn_slice, arg, NULL);
		atomic_fetch_add(&tt->done, 1);
	}
}

static void test_threads_m(int m, size_t n, uint64_t seed)
{
	struct plan mixed = {MIXED,           3 * S, 16 * S, false,
	                     ML_DELIVER_FAIL, 0,     0,      false};
	static struct turns tt;
	pthread_t th[4];
	void *args[4][2];
	tt.plan = &mixed;
	tt.m = m;
	atomic_store(&tt.go, 0);
	ml_set_seed(seed);
	for (int i = 0; i < m; i++) {
		args[i][0] = &tt;
		args[i][1] = (void *)(intptr_t)i;
		pthread_create(&th[i], NULL, turn_worker, args[i]);
	}
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = mixed.limit;
	l.delivery = ML_DELIVER_FAIL;
	size_t wrong = 0;
	for (size_t i = 0; i < n; i++) {
		tt.task = ml_task_new(&l);
		atomic_store(&tt.turn, 0);
		atomic_store(&tt.stop, UINT64_MAX);
		atomic_store(&tt.done, 0);
		atomic_fetch_add(&tt.go, 1);
		while (atomic_load(&tt.done) < m)
			sched_yield();
		uint64_t j = atomic_load(&tt.stop);
		wrong += j == UINT64_MAX ||
		         ml_task_status(tt.task) != ML_ALLOC_LIMIT;
		idx[i] = j == UINT64_MAX ? UINT64_MAX / 2 : j;
		ml_task_free(tt.task);
	}
	tt.task = NULL;
	atomic_fetch_add(&tt.go, 1);
	for (int i = 0; i < m; i++)
		pthread_join(th[i], NULL);
	tap_ok(wrong == 0,
	       "%d threads, one task: all %zu tasks stopped by their limit "
	       "(%zu not)",
	       m, n, wrong);
	static uint64_t sorted[MAX_TASKS];
	memcpy(sorted, idx, n * sizeof idx[0]);
	sort_u64(sorted, n);
	double d = wrong ? 1 : ks_index(&mixed, sorted, n), c = ks_critical(n);
	tap_ok(d <= c,
	       "%d threads, one task: the refused allocation ~ P(T <= "
	       "b_j+1), T ~ Gamma(16, S): KS D = %.4f <= %.4f (n = %zu, "
	       "alpha = 1e-6)",
	       m, d, c, n);
}

static void test_threads(void)
{
	test_threads_m(2, N_TASKS(3000), 41);
	test_threads_m(4, N_TASKS(3000), 43);
}

/* ---- (f) the held-limit bound ------------------------------------------
 *
 * A task renews a held set of N bytes R times (allocates N bytes, frees
 * them all) under a held limit L, FAIL delivery.  Within a generation the
 * estimate only grows, and generations are disjoint bytes, so the task is
 * stopped with probability exactly 1 - (1 - p)^R, p = P(Poisson(N/S) >= k):
 * the observed fraction must match it (5.5 standard deviations: P < 4e-8)
 * and stay under the documented bound ml_bound_held(N, R, L, S). */

#define HELD_BLOCKS 8

static void *renew(void *arg)
{
	const uint64_t *rounds = arg;
	void *b[HELD_BLOCKS];
	for (uint64_t r = 0; r < *rounds; r++) {
		int got = 0;
		for (; got < HELD_BLOCKS; got++)
			if (!(b[got] = malloc(S)))
				break;
		for (int i = 0; i < got; i++)
			free(b[i]);
		if (got < HELD_BLOCKS)
			return NULL; /* stopped by the held limit */
	}
	return (void *)1;
}

static void test_held_bound(void)
{
	uint64_t rounds = 50, n_bytes = HELD_BLOCKS * S, limit = 16 * S;
	size_t n = N_TASKS(2000), stopped = 0, wrong = 0;
	ml_set_seed(61);
	for (size_t i = 0; i < n; i++) {
		ml_limits l = ML_LIMITS_INIT;
		l.held_bytes = limit;
		l.delivery = ML_DELIVER_FAIL;
		ml_outcome out;
		ml_status st = ml_run(&l, renew, &rounds, &out);
		if (out.ret == NULL) {
			stopped++;
			wrong += st != ML_HELD_LIMIT;
		}
	}
	double p = ml_bound_alloc(n_bytes, limit, S);
	double exact = 1 - pow(1 - p, (double)rounds);
	double bound = ml_bound_held(n_bytes, rounds, limit, S);
	double f = (double)stopped / (double)n;
	double sd = sqrt(exact * (1 - exact) / (double)n);
	tap_ok(wrong == 0, "held bound: every stop is ML_HELD_LIMIT (%zu not)",
	       wrong);
	tap_ok(fabs(f - exact) <= 5.5 * sd,
	       "held bound: %zu of %zu tasks renewing 8 S bytes 50 times "
	       "stopped (%.4f; exactly 1 - (1 - p)^R = %.4f, sd %.4f)",
	       stopped, n, f, exact, sd);
	tap_ok(f <= bound + 5.5 * sd,
	       "held bound: %.4f <= ml_bound_held = %.4f", f, bound);
}

/* ---- (d) deliveries ------------------------------------------------------ */

static uint64_t by_delivery[3][MAX_TASKS];

static void test_deliveries(void)
{
	static const char *names[] = {"JUMP", "FAIL", "FLAG"};
	const size_t n = N_TASKS(4000);
	for (int d = 0; d < 3; d++) {
		struct plan p = {MIXED,          2 * S, 12 * S, false,
		                 (ml_delivery)d, 0,     0,      false};
		char name[64];
		snprintf(name, sizeof name, "%s delivery, mixed sizes, k = 12",
		         names[d]);
		/* The same seed for the three: the same points. */
		run_ks(name, &p, n, 42);
		memcpy(by_delivery[d], idx, n * sizeof idx[0]);
	}
	/* Not a documented guarantee, but with one seed and one allocation
	 * sequence the sampler sees the same bytes whatever the delivery,
	 * so the interruption points should coincide exactly. */
	size_t same_fail = 0, same_flag = 0;
	for (size_t i = 0; i < n; i++) {
		same_fail += by_delivery[1][i] == by_delivery[0][i];
		same_flag += by_delivery[2][i] == by_delivery[0][i];
	}
	tap_diag("same seed: FAIL stops where JUMP does in %zu of %zu tasks, "
	         "FLAG in %zu",
	         same_fail, n, same_flag);
}

/* ---- (b) memprof-limits triples ------------------------------------------ */

static void test_triple(uint64_t safe, uint64_t chunk, size_t n)
{
	const double t = 1e-9;
	uint64_t limit = ml_bound_limit_for(safe, t, S);
	/* stop: every task allocating it is interrupted but with probability
	 * <= 1e-9 (the smallest n with P(n) > 1 - 1e-9). */
	uint64_t stop = ml_bound_safe_bytes(limit, 1 - t, S) + 1;
	struct plan p = {ONE_SIZE,        chunk, limit, false,
	                 ML_DELIVER_JUMP, stop,  0,     false};
	ml_set_seed(safe ^ chunk);
	size_t early = 0, late = 0;
	uint64_t first_end = UINT64_MAX, last_end = 0;
	for (size_t i = 0; i < n; i++) {
		struct result r = run_one(&p);
		if (!r.interrupted || r.status != ML_ALLOC_LIMIT) {
			late++;
			continue;
		}
		/* The k-th point lies in (start, end]: end <= safe would put
		 * it at or before safe bytes. */
		early += r.end <= safe;
		first_end = r.end < first_end ? r.end : first_end;
		last_end = r.end > last_end ? r.end : last_end;
	}
	tap_diag("safe %llu, t = 1e-9 -> limit %llu (k = %llu), stop %llu; "
	         "interrupted between %llu and %llu bytes",
	         (unsigned long long)safe, (unsigned long long)limit,
	         (unsigned long long)(limit / S), (unsigned long long)stop,
	         (unsigned long long)first_end, (unsigned long long)last_end);
	/* Each: probability <= n * 1e-9 = 4e-7 < 1e-6 for n = 400. */
	tap_ok(early == 0,
	       "triple (%llu, %llu, %llu): no task of %zu interrupted before "
	       "the safe bytes (%zu were)",
	       (unsigned long long)safe, (unsigned long long)limit,
	       (unsigned long long)stop, n, early);
	tap_ok(late == 0,
	       "triple (%llu, %llu, %llu): every task of %zu interrupted by "
	       "the stop bytes (%zu were not)",
	       (unsigned long long)safe, (unsigned long long)limit,
	       (unsigned long long)stop, n, late);
}

static void test_triples(void)
{
	test_triple(64 << 10, 256, 400);
	test_triple(1 << 20, 256, 400);
	test_triple(1 << 20, 3 * S + 1, 400); /* chunks larger than S */
}

/* ---- (c) the global limit ------------------------------------------------ */

static void test_global(void)
{
	/* Keep 8 MiB live and put the limit 4 MiB below the usage: every
	 * sample of a global task then finds the heap over the limit. */
	void *volatile ballast = malloc(8 << 20);
	if (!ballast)
		tap_bail("no memory for the ballast");
	memset(ballast, 1, 8 << 20);
	uint64_t usage = ml_global_memory_usage();
	ml_set_global_memory_limit(usage - (4 << 20));
	tap_ok(ml_global_memory_usage() > ml_global_memory_limit(),
	       "global: usage %llu over the limit %llu",
	       (unsigned long long)ml_global_memory_usage(),
	       (unsigned long long)ml_global_memory_limit());

	const size_t n = N_TASKS(10000);
	struct plan p = {ONE_SIZE,        64, ML_NO_LIMIT, true,
	                 ML_DELIVER_JUMP, 0,  0,           false};
	run_ks("global limit, 64 B: bytes past the limit ~ Exp(S)", &p, n, 7);
	/* The table: interrupted within x bytes with probability at least
	 * 1 - exp(-x/S).  x is a multiple of 64, so "interrupted within x"
	 * is exactly J < x / 64.  One-sided Hoeffding: the observed fraction
	 * falls eps below its mean with probability <= exp(-2 n eps^2);
	 * alpha = 1e-6 shared by the three rows. */
	static const uint64_t xs[] = {S / 10 / 64 * 64, S, 5 * S};
	double eps = sqrt(log(3 / ALPHA) / (2.0 * (double)n));
	for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
		uint64_t x = xs[i];
		size_t within = 0;
		for (size_t j = 0; j < n; j++)
			within += idx[j] < x / 64;
		double frac = (double)within / (double)n,
		       bound = -expm1(-(double)x / S);
		tap_ok(frac >= bound - eps,
		       "global: interrupted within %llu bytes: %.4f >= 1 - "
		       "exp(-x/S) = %.4f (- %.4f)",
		       (unsigned long long)x, frac, bound, eps);
	}
	/* memprof-limits' "1e-9 after 1.62 MiB" row, at our interval: not
	 * interrupted within 23 S has probability exp(-23) = 1.0e-10 per
	 * task, n * 1.0e-10 = 1.0e-6 for all of them: 24 S, 3.8e-7. */
	size_t late = 0;
	for (size_t j = 0; j < n; j++)
		late += idx[j] >= 24 * S / 64;
	tap_ok(
	    late == 0,
	    "global: every task interrupted within 24 S = %d bytes (%zu not)",
	    24 * S, late);
	ml_set_global_memory_limit(ML_NO_LIMIT);
	free(ballast);
}

/* ---- (g) a task's own interval -----------------------------------------
 *
 * A task with ml_limits.interval = S_t is interrupted at the k-th point of
 * a Poisson process of mean gap S_t (k = ceil(limit / S_t)): sampled at
 * S_t when its interval is the smallest on the stack, by independent
 * thinning of the thread's samples when a task at the process's interval
 * is under it.  Meanwhile another thread's tasks keep the process's
 * interval: the mean of their estimates is their bytes. */

static atomic_bool bg_stop;
static atomic_ullong bg_sum, bg_runs;
#define BG_BYTES (64 * 1024)

static void *bg_work(void *arg)
{
	(void)arg;
	for (int i = 0; i < BG_BYTES / 64; i++) {
		void *volatile q = malloc(64); /* sink is the main thread's */
		free(q);
	}
	return NULL;
}

static void *bg_thread(void *arg)
{
	(void)arg;
	ml_limits l = ML_LIMITS_INIT;
	while (!atomic_load(&bg_stop)) {
		ml_outcome out;
		ml_run(&l, bg_work, NULL, &out);
		atomic_fetch_add(&bg_sum, out.allocated);
		atomic_fetch_add(&bg_runs, 1);
	}
	return NULL;
}

static void test_own_interval(void)
{
	pthread_t bg;
	pthread_create(&bg, NULL, bg_thread, NULL);
	/* Smaller than the process's: the thread samples at 1024. */
	struct plan small = {
	    ONE_SIZE, 24,   10 * 1024 - 100, false, ML_DELIVER_JUMP, 0,
	    1024,     false};
	run_ks("own interval 1024 (process 4096), k = 10", &small,
	       N_TASKS(5000), 71);
	/* Larger, under a task at the process's interval: thinned. */
	struct plan large = {MIXED,           3 * S, 12 * 16384, false,
	                     ML_DELIVER_JUMP, 0,     16384,      true};
	run_ks("own interval 16384 under a 4096 task (thinned), k = 12", &large,
	       N_TASKS(5000), 72);
	/* Larger, alone on the stack: the thread samples at 16384. */
	large.outer = false;
	run_ks("own interval 16384 alone, k = 12", &large, N_TASKS(5000), 73);
	/* A task at the process's interval under one with a longer interval
	 * of its own: the thread samples at the process's again (the slice
	 * entering without an interval of its own must recompute it: 0.2
	 * kept 16384, and the inner task fired at 4x its limit). */
	struct plan under = {MIXED,           3 * S, 12 * S, false,
	                     ML_DELIVER_JUMP, 0,     0,      true};
	outer_interval = 16384;
	run_ks("process interval 4096 under an own-interval 16384 task, "
	       "k = 12",
	       &under, N_TASKS(5000), 74);
	outer_interval = 0;
	atomic_store(&bg_stop, true);
	pthread_join(bg, NULL);
	/* Another thread's tasks at S = 4096: estimate of B bytes has
	 * variance B S; the mean of R runs within 5.5 sd (P < 4e-8). */
	double runs = (double)atomic_load(&bg_runs);
	double mean = (double)atomic_load(&bg_sum) / runs;
	double sd = sqrt((double)BG_BYTES * S / runs);
	tap_ok(runs > 10 && fabs(mean - BG_BYTES) < 5.5 * sd,
	       "meanwhile another thread's tasks estimate %.0f for %d bytes "
	       "(%.0f runs, sd %.0f): still the process's interval",
	       mean, BG_BYTES, runs, sd);
	tap_ok(ml_sample_interval() == S,
	       "the process interval is still %d afterwards", S);
}

/* A 1 MiB limit at interval L/4000 (k = 4000) fires between 0.9 and 1.1
 * MiB: outside with probability 2.6e-10 per task (two normal tails at
 * 6.3 sd), below 1e-7 for all 300. */
static void *accurate_task(void *arg)
{
	uint64_t *at = arg;
	uint64_t total = 0;
	for (;;) {
		void *mine = malloc(64);
		sink = mine;
		free(mine);
		total += 64;
		if (ml_is_interrupted()) {
			*at = total;
			return NULL;
		}
	}
}

static void test_accuracy(void)
{
	const uint64_t limit = 1 << 20;
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = limit;
	l.interval = limit / 4000;
	l.delivery = ML_DELIVER_FLAG;
	size_t n = 300 / quick, outside = 0;
	uint64_t lo = UINT64_MAX, hi = 0;
	ml_set_seed(81);
	for (size_t i = 0; i < n; i++) {
		uint64_t at = 0;
		ml_run(&l, accurate_task, &at, NULL);
		outside += at < limit * 9 / 10 || at > limit * 11 / 10;
		lo = at < lo ? at : lo;
		hi = at > hi ? at : hi;
	}
	tap_ok(outside == 0,
	       "1 MiB at interval L/4000: all %zu tasks stopped within "
	       "+-10 %% (%.4f .. %.4f of the limit)",
	       n, (double)lo / (double)limit, (double)hi / (double)limit);
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
	double t0 = now();
	const char *q = getenv("ML_TEST_QUICK");
	if (q && *q == '1')
		quick = 10;
	if (ml_set_sample_interval(S) != 0)
		tap_bail("cannot set the sample interval");
	tap_ok(ml_sample_interval() == S, "sample interval %d", S);
	TAP_RUN(test_gamma);
	TAP_RUN(test_deliveries);
	TAP_RUN(test_triples);
	TAP_RUN(test_global);
	TAP_RUN(test_threads);
	TAP_RUN(test_held_bound);
	TAP_RUN(test_own_interval);
	TAP_RUN(test_accuracy);
	tap_diag("conformance tests took %.2f s", now() - t0);
	return tap_done();
}
