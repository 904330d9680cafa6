/* Exact allocation budgets (ml_limits.exact_alloc, issue 16): a task is
 * interrupted at the allocation that would bring the bytes it requested
 * (all slices) to alloc_bytes, under FAIL, JUMP and FLAG delivery; nested
 * budgets each hold; two threads sharing one budget stop within the
 * documented slack ((threads - 1) x max(L / 64, 4 KiB)); every member of
 * the family is counted by the bytes it asks for; outcome.allocated and
 * ml_task_allocated are exact.  No statistics: every check is exact,
 * whatever the sampler draws (the tests run at two intervals). */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <memlimits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tap/tap.h"

static _Thread_local void *volatile sink;

/* Sizes that do not divide the budget evenly, from a fixed generator. */
static _Thread_local uint64_t rng = 42; /* each thread its own sequence */
static size_t next_size(void)
{
	rng = rng * 6364136223846793005u + 1442695040888963407u;
	return 1 + (size_t)(rng >> 33) % 3000;
}

struct run {
	uint64_t budget;
	uint64_t granted; /* bytes of the allocations that succeeded */
	int failed_at;    /* index of the first NULL, -1 if none */
	uint64_t before_fail, fail_size;
	int n;
};

/* Allocates (and frees) until an allocation fails or n are done. */
static void *spend(void *arg)
{
	struct run *r = arg;
	r->failed_at = -1;
	for (int i = 0; i < r->n; i++) {
		size_t sz = next_size();
		void *p = malloc(sz);
		if (!p) {
			r->failed_at = i;
			r->before_fail = r->granted;
			r->fail_size = sz;
			return NULL;
		}
		r->granted += sz;
		sink = p;
		free(p);
	}
	return NULL;
}

static void test_fail(void)
{
	for (int pass = 0; pass < 2; pass++) {
		/* The sampler's interval does not matter: 1 byte (a sample
		 * in every allocation) and the default. */
		ml_set_sample_interval(pass ? 80000 : 1);
		ml_limits l = ML_LIMITS_INIT;
		l.alloc_bytes = 1000000;
		l.exact_alloc = true;
		l.delivery = ML_DELIVER_FAIL;
		struct run r = {.budget = l.alloc_bytes, .n = 100000};
		ml_outcome out;
		errno = 0;
		ml_status st = ml_run(&l, spend, &r, &out);
		tap_ok(st == ML_ALLOC_LIMIT && r.failed_at > 0 &&
		           r.before_fail < l.alloc_bytes &&
		           r.before_fail + r.fail_size >= l.alloc_bytes &&
		           out.allocated == r.granted,
		       "FAIL, S = %s: the allocation that would reach 1000000 "
		       "fails (%llu granted before it, it asked %llu); "
		       "allocated = %llu exactly",
		       pass ? "80000" : "1", (unsigned long long)r.before_fail,
		       (unsigned long long)r.fail_size,
		       (unsigned long long)out.allocated);
	}
	ml_set_sample_interval(80000);
}

static _Atomic uint64_t jump_granted;
static void *spend_jump(void *arg)
{
	(void)arg;
	for (;;) {
		size_t sz = next_size();
		void *p = malloc(sz);
		/* Reached only if the allocation went through. */
		atomic_fetch_add(&jump_granted, sz);
		sink = p;
		free(p);
	}
	return NULL;
}

static void test_jump(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 777777;
	l.exact_alloc = true;
	l.delivery = ML_DELIVER_JUMP;
	ml_outcome out;
	ml_status st = ml_run(&l, spend_jump, NULL, &out);
	uint64_t g = atomic_load(&jump_granted);
	tap_ok(st == ML_ALLOC_LIMIT && g < l.alloc_bytes &&
	           g + 3000 >= l.alloc_bytes && out.allocated == g,
	       "JUMP: back in ml_run at the allocation that would reach "
	       "777777 (%llu granted, allocated = %llu)",
	       (unsigned long long)g, (unsigned long long)out.allocated);
}

static void *spend_flag(void *arg)
{
	uint64_t *crossed_at = arg;
	uint64_t total = 0;
	for (int i = 0; i < 2000; i++) {
		size_t sz = next_size();
		void *p = malloc(sz);
		if (!p)
			return NULL;
		total += sz;
		free(p);
		if (ml_is_interrupted()) {
			*crossed_at = total;
			return p;
		}
	}
	return NULL;
}

static void test_flag(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 500000;
	l.exact_alloc = true;
	l.delivery = ML_DELIVER_FLAG;
	uint64_t crossed = 0;
	ml_outcome out;
	ml_status st = ml_run(&l, spend_flag, &crossed, &out);
	tap_ok(st == ML_ALLOC_LIMIT && crossed >= l.alloc_bytes &&
	           crossed < l.alloc_bytes + 3000 && out.allocated == crossed,
	       "FLAG: the allocation reaching 500000 goes through and "
	       "flags the task (at %llu bytes, allocated %llu)",
	       (unsigned long long)crossed, (unsigned long long)out.allocated);
}

struct nest {
	ml_status inner;
	uint64_t inner_alloc;
	struct run after;
};

static void *outer_fn(void *arg)
{
	struct nest *x = arg;
	ml_limits in = ML_LIMITS_INIT;
	in.alloc_bytes = 100000;
	in.exact_alloc = true;
	in.delivery = ML_DELIVER_FAIL;
	struct run r = {.n = 100000};
	ml_outcome o;
	x->inner = ml_run(&in, spend, &r, &o);
	x->inner_alloc = o.allocated;
	x->after.n = 100000;
	spend(&x->after);
	return NULL;
}

static void test_nested(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 300000;
	l.exact_alloc = true;
	l.delivery = ML_DELIVER_FAIL;
	struct nest x = {0};
	ml_outcome out;
	ml_status st = ml_run(&l, outer_fn, &x, &out);
	uint64_t total = x.inner_alloc + x.after.granted;
	tap_ok(x.inner == ML_ALLOC_LIMIT && x.inner_alloc < 100000 &&
	           x.inner_alloc + 3000 >= 100000,
	       "nested: the inner 100000-byte budget stops the inner task "
	       "(%llu)",
	       (unsigned long long)x.inner_alloc);
	tap_ok(st == ML_ALLOC_LIMIT && out.allocated == total &&
	           total < 300000 && total + 3000 >= 300000,
	       "nested: the outer budget counts the inner task's bytes and "
	       "stops at 300000 (%llu)",
	       (unsigned long long)total);
}

struct share {
	ml_task *task;
	uint64_t granted;
};

static void *slice_spend(void *arg)
{
	struct run *r = arg;
	return spend(r);
}

static void *share_thread(void *arg)
{
	struct share *s = arg;
	struct run r = {.n = 1000000};
	ml_task_run(s->task, slice_spend, &r, NULL);
	s->granted = r.granted;
	return NULL;
}

static void test_two_threads(void)
{
	const uint64_t budget = 10u << 20;
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = budget;
	l.exact_alloc = true;
	l.delivery = ML_DELIVER_FAIL;
	ml_task *t = ml_task_new(&l);
	struct share s[2] = {{t, 0}, {t, 0}};
	pthread_t th[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&th[i], NULL, share_thread, &s[i]);
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	uint64_t total = s[0].granted + s[1].granted;
	/* The other thread's reservation at most: max(L / 64, 4 KiB). */
	uint64_t slack = budget / 64;
	tap_ok(ml_task_status(t) == ML_ALLOC_LIMIT && total < budget &&
	           total + slack + 3000 >= budget &&
	           ml_task_allocated(t) == total,
	       "two threads, one 10 MiB budget: %llu bytes granted (%.2f %% "
	       "short of it; the bound is 1.56 %%), ml_task_allocated exact",
	       (unsigned long long)total,
	       100.0 * (double)(budget - total) / (double)budget);
	ml_task_free(t);
}

/* Every member counts the bytes it asks for. */
static void *family(void *arg)
{
	uint64_t *asked = arg;
	void *p = calloc(10, 100);
	*asked += 1000;
	void *r = realloc(p, 5000);
	*asked += 5000;
	if (r)
		p = r;
	free(p);
	p = memalign(64, 3000);
	*asked += 3000;
	free(p);
	void *q = NULL;
	if (posix_memalign(&q, 128, 2000) == 0)
		*asked += 2000;
	free(q);
	p = aligned_alloc(256, 4096);
	*asked += 4096;
	free(p);
	p = valloc(100);
	*asked += 100;
	free(p);
	p = reallocarray(NULL, 7, 11);
	*asked += 77;
	free(p);
	return NULL;
}

static void test_family(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	l.exact_alloc = true;
	uint64_t asked = 0;
	ml_outcome out;
	ml_status st = ml_run(&l, family, &asked, &out);
	tap_ok(st == ML_OK && out.allocated == asked,
	       "calloc, realloc, memalign, posix_memalign, aligned_alloc, "
	       "valloc, reallocarray: %llu bytes counted for %llu asked",
	       (unsigned long long)out.allocated, (unsigned long long)asked);
	l.alloc_bytes = 0;
	l.delivery = ML_DELIVER_FAIL;
	errno = 0;
	struct run r = {.n = 10};
	st = ml_run(&l, spend, &r, &out);
	tap_ok(st == ML_ALLOC_LIMIT && r.failed_at == 0 && errno == ENOMEM &&
	           out.allocated == 0,
	       "a budget of 0: the first allocation fails with ENOMEM");
	ml_set_sample_interval(12345);
	l.alloc_bytes = 64;
	ml_run(&l, spend, &r, &out);
	tap_ok(ml_sample_interval() == 12345,
	       "the process interval is untouched by exact tasks");
	ml_set_sample_interval(80000);
}

/* ---- At the budget, to the byte (issue 24) ----------------------------
 *
 * Allocations of one size s into a budget of m x s: the m-th allocation
 * brings the task's bytes to the budget exactly and is the one
 * interrupted; with one byte more of budget all m go through.  (0.2 let
 * the m-th through: the countdown, clipped to the reservation, let an
 * allocation of exactly the reservation pass the fast path.) */
struct steady {
	size_t size;
	int n;             /* allocations to try */
	_Atomic int done;  /* allocations that went through */
	int flagged_after; /* FLAG: allocations done when first flagged */
	int failed_at;     /* FAIL: index of the first NULL, -1 if none */
	int err;           /* its errno */
};

static void *steady_fn(void *arg)
{
	struct steady *x = arg;
	x->failed_at = x->flagged_after = -1;
	for (int i = 0; i < x->n; i++) {
		errno = 0;
		void *p = malloc(x->size);
		if (!p) {
			x->failed_at = i;
			x->err = errno;
			return NULL;
		}
		sink = p;
		free(p);
		atomic_fetch_add(&x->done, 1);
		if (x->flagged_after < 0 && ml_is_interrupted())
			x->flagged_after = i + 1;
	}
	return NULL;
}

static const char *const dname[] = {"JUMP", "FAIL", "FLAG"};

/* One run: budget m x s + extra, m + 1 allocations of s tried.  Returns
 * whether the run did what the contract says. */
static bool at_budget(size_t s, int m, uint64_t extra, ml_delivery d,
                      char *what, size_t len)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = (uint64_t)s * (uint64_t)m + extra;
	l.exact_alloc = true;
	l.delivery = d;
	struct steady x = {.size = s, .n = m + 1};
	ml_outcome out;
	ml_status st = ml_run(&l, steady_fn, &x, &out);
	int done = atomic_load(&x.done);
	bool ok;
	if (extra) {
		/* One byte to spare: the m allocations fit, the m + 1-th
		 * does not. */
		if (d == ML_DELIVER_FLAG)
			ok = st == ML_ALLOC_LIMIT && done == m + 1 &&
			     x.flagged_after == m + 1;
		else if (d == ML_DELIVER_FAIL)
			ok = st == ML_ALLOC_LIMIT && done == m &&
			     x.failed_at == m && x.err == ENOMEM;
		else
			ok = st == ML_ALLOC_LIMIT && done == m;
	} else if (d == ML_DELIVER_FLAG) {
		/* The allocation reaching the budget goes through and
		 * flags the task. */
		ok = st == ML_ALLOC_LIMIT && x.flagged_after == m;
	} else if (d == ML_DELIVER_FAIL) {
		ok = st == ML_ALLOC_LIMIT && done == m - 1 &&
		     x.failed_at == m - 1 && x.err == ENOMEM;
	} else {
		ok = st == ML_ALLOC_LIMIT && done == m - 1;
	}
	uint64_t granted = (uint64_t)done * s;
	ok = ok && out.allocated == granted;
	snprintf(what, len,
	         "%s, budget %llu, %d x %zu bytes: %d went through, "
	         "flagged after %d, allocated %llu",
	         dname[d], (unsigned long long)l.alloc_bytes, m + 1, s, done,
	         x.flagged_after, (unsigned long long)out.allocated);
	return ok;
}

static void test_at_budget(void)
{
	/* Sizes below, at and above the refill chunk (max(L / 64, 4 KiB)),
	 * a prime, and one byte. */
	static const struct {
		size_t size;
		int m;
	} cases[] = {{1000, 1000}, {1, 5000},    {7, 3001},
	             {4096, 256},  {100003, 40}, {16, 1}};
	static const uint64_t intervals[] = {1, 80000};
	for (int iv = 0; iv < 2; iv++) {
		ml_set_sample_interval(intervals[iv]);
		for (int d = 0; d < 3; d++)
			for (int extra = 0; extra < 2; extra++) {
				int bad = 0;
				char what[200] = "", first[200] = "";
				for (size_t c = 0;
				     c < sizeof cases / sizeof *cases; c++)
					if (!at_budget(
					        cases[c].size, cases[c].m,
					        (uint64_t)extra, (ml_delivery)d,
					        what, sizeof what) &&
					    !bad++)
						memcpy(first, what,
						       sizeof what);
				tap_ok(
				    !bad,
				    "S = %llu, %s: %s (%d of 6 sizes wrong%s%s)",
				    (unsigned long long)intervals[iv], dname[d],
				    extra
				        ? "one byte under the budget, every "
				          "allocation goes through"
				        : "the allocation reaching the budget "
				          "exactly is the one interrupted",
				    bad, bad ? "; first: " : "", first);
			}
	}
	ml_set_sample_interval(80000);
}

static void *zero_fn(void *arg)
{
	void **p = arg;
	p[0] = malloc(0);
	p[1] = malloc(1);
	return NULL;
}

/* The contract: the allocation that brings the task's bytes to the budget
 * or beyond is interrupted; with a budget of 0 that is the first, even
 * malloc(0) (0.2 let malloc(0) through: 0 never borrowed). */
static void test_budget_zero(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 0;
	l.exact_alloc = true;
	l.delivery = ML_DELIVER_FAIL;
	for (int iv = 0; iv < 2; iv++) {
		ml_set_sample_interval(iv ? 80000 : 1);
		void *p[2] = {NULL, NULL};
		ml_outcome out;
		ml_status st = ml_run(&l, zero_fn, p, &out);
		tap_ok(st == ML_ALLOC_LIMIT && p[0] == NULL && p[1] == NULL &&
		           out.allocated == 0,
		       "S = %d, a budget of 0: malloc(0) is interrupted, "
		       "malloc(1) refused too, allocated = 0",
		       iv ? 80000 : 1);
		free(p[0]);
		free(p[1]);
	}
	ml_set_sample_interval(80000);
}

struct pair_share {
	ml_task *task;
	struct steady x;
};

static void *pair_thread(void *arg)
{
	struct pair_share *s = arg;
	ml_task_run(s->task, steady_fn, &s->x, NULL);
	return NULL;
}

/* Two threads, one budget of a whole number of 4096-byte blocks (so every
 * reservation is too): the task never reaches the budget.  It stops short
 * by at most the other slice's reservation (a chunk, max(L / 64, 4 KiB),
 * plus the block it reserved for and was then refused at a sample that saw
 * the interruption) and the block that interrupted it. */
static void test_two_threads_at_budget(void)
{
	const uint64_t budget = 256 * 4096;
	const uint64_t slack = budget / 64 + 2 * 4096;
	int bad = 0;
	uint64_t worst_hi = 0, worst_lo = budget;
	for (int round = 0; round < 40; round++) {
		ml_set_sample_interval(round % 2 ? 80000 : 1);
		ml_limits l = ML_LIMITS_INIT;
		l.alloc_bytes = budget;
		l.exact_alloc = true;
		l.delivery = ML_DELIVER_FAIL;
		ml_task *t = ml_task_new(&l);
		struct pair_share s[2];
		pthread_t th[2];
		for (int i = 0; i < 2; i++) {
			s[i] = (struct pair_share){.task = t};
			s[i].x.size = 4096;
			s[i].x.n = 1000;
			pthread_create(&th[i], NULL, pair_thread, &s[i]);
		}
		for (int i = 0; i < 2; i++)
			pthread_join(th[i], NULL);
		uint64_t total = 4096 * (uint64_t)(atomic_load(&s[0].x.done) +
		                                   atomic_load(&s[1].x.done));
		if (total > worst_hi)
			worst_hi = total;
		if (total < worst_lo)
			worst_lo = total;
		if (ml_task_status(t) != ML_ALLOC_LIMIT || total >= budget ||
		    total + slack < budget || ml_task_allocated(t) != total)
			bad++;
		ml_task_free(t);
	}
	ml_set_sample_interval(80000);
	tap_ok(!bad,
	       "two threads, 40 runs of a %llu-byte budget in 4096-byte "
	       "blocks: never reached, short by at most %llu (granted "
	       "%llu-%llu; %d wrong)",
	       (unsigned long long)budget, (unsigned long long)slack,
	       (unsigned long long)worst_lo, (unsigned long long)worst_hi, bad);
}

/* A program that retries a refused allocation (issue 41, item 5: Lua after
 * its emergency collection, Ruby after a GC) gets nothing more from an
 * exact budget: after the first NULL, a retry of the same block (once, or
 * ten times as a collection loop does), a smaller one and a single byte
 * all fail, whatever the sampler draws, as the budget is spent. */
#define RETRY_MAX 10000
struct retry {
	size_t block;
	int kept, retries_got, after_got;
	/* Every block got, freed after the task (valgrind's leak check). */
	void *got[RETRY_MAX + 13];
	int ngot;
};

static void *retry_keep(struct retry *r, void *p)
{
	if (p)
		r->got[r->ngot++] = p;
	return p;
}

static void *retry_fn(void *arg)
{
	struct retry *r = arg;
	for (int i = 0; i < RETRY_MAX; i++) {
		if (retry_keep(r, malloc(r->block))) {
			r->kept++;
			continue; /* kept: never freed inside the task */
		}
		for (int k = 0; k < 11; k++)
			r->retries_got +=
			    retry_keep(r, malloc(r->block)) != NULL;
		void *q = retry_keep(r, malloc(r->block / 2));
		void *b = retry_keep(r, malloc(1));
		r->after_got = (q != NULL) + (b != NULL);
		return NULL;
	}
	return NULL;
}

static void test_retry(void)
{
	static const uint64_t intervals[] = {1, 80000};
	for (int iv = 0; iv < 2; iv++) {
		ml_set_sample_interval(intervals[iv]);
		ml_limits l = ML_LIMITS_INIT;
		l.alloc_bytes = 1 << 20;
		l.exact_alloc = true;
		l.delivery = ML_DELIVER_FAIL;
		static struct retry r;
		memset(&r, 0, sizeof r);
		r.block = 4096;
		ml_status st = ml_run(&l, retry_fn, &r, NULL);
		for (int i = 0; i < r.ngot; i++)
			free(r.got[i]);
		/* 255 blocks of 4096 stay below 1 MiB; the 256th reaches it. */
		tap_ok(st == ML_ALLOC_LIMIT && r.kept == 255 &&
		           r.retries_got == 0 && r.after_got == 0,
		       "S = %llu: after the refusal at the budget, 11 retries "
		       "of the block, half of it and 1 byte all fail (kept %d "
		       "of 255, %d retries and %d smaller got)",
		       (unsigned long long)intervals[iv], r.kept, r.retries_got,
		       r.after_got);
	}
	ml_set_sample_interval(80000);
}

int main(void)
{
	tap_case("test_fail", test_fail, 60);
	tap_case("test_jump", test_jump, 60);
	tap_case("test_flag", test_flag, 60);
	tap_case("test_nested", test_nested, 60);
	tap_case("test_two_threads", test_two_threads, 60);
	tap_case("test_family", test_family, 60);
	tap_case("test_at_budget", test_at_budget, 120);
	tap_case("test_budget_zero", test_budget_zero, 60);
	tap_case("test_two_threads_at_budget", test_two_threads_at_budget, 120);
	tap_case("test_retry", test_retry, 60);
	return tap_done();
}
