/* The task machinery under many threads, for ThreadSanitizer.
 *
 * Sanitizer runtimes replace malloc, so under TSan the library's malloc is
 * bypassed: everything here feeds the sampler through ml_note_alloc /
 * ml_note_free, which works the same with or without the interposer (the
 * ordinary `make check` runs this program too).  8 worker threads run
 * nested tasks of all three deliveries with allocation limits, tokens and
 * the global limit; a controller thread sets the workers' tokens, flips the
 * global limit on and off and changes the seed, while the workers mask,
 * unmask, push and pop cleanup handlers and poll.  .ci/run builds it with
 * -fsanitize=thread together with the library's sources and requires zero
 * reports. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <memlimits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WORKERS 8
#define S 4096u

static unsigned rounds = 400;
static ml_token **tokens; /* WORKERS x rounds, freed at the end */
static atomic_int stop;
static atomic_uint published[WORKERS]; /* round each worker is in */

struct worker {
	int id;
	unsigned by_status[4]; /* ML_OK .. ML_CANCELLED */
	unsigned bad, cleanups_run, flagged, refused;
	unsigned precancelled_ok;
	uint64_t rng;
};

static uint64_t next(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

static void count_cleanup(void *arg)
{
	struct worker *w = arg;
	w->cleanups_run++;
}

struct frame {
	struct worker *w;
	int depth;
	unsigned round;
};

static void *work(void *arg);

/* Allocate through ml_note_alloc, sometimes nesting another task. */
static void *work(void *arg)
{
	struct frame *f = arg;
	struct worker *w = f->w;
	ml_cleanup_push(count_cleanup, w);
	for (int i = 0; i < 400; i++) {
		size_t n = 16 + next(&w->rng) % 2048;
		if (ml_note_alloc(n))
			ml_note_free(n);
		else
			w->refused++;
		switch (next(&w->rng) % 64) {
		case 0:
			if (f->depth < 3) {
				struct frame in = {w, f->depth + 1, f->round};
				ml_limits l = ML_LIMITS_INIT;
				l.alloc_bytes = (next(&w->rng) % 8) * S * 16;
				l.delivery = (ml_delivery)(next(&w->rng) % 3);
				l.global = next(&w->rng) % 2;
				ml_status st = ml_run(&l, work, &in, NULL);
				if (st < ML_OK || st > ML_CANCELLED)
					w->bad++;
			}
			break;
		case 1:
			ml_mask();
			for (int k = 0; k < 10; k++)
				if (ml_note_alloc(512))
					ml_note_free(512);
			ml_unmask();
			break;
		case 2:
			ml_check();
			break;
		case 3:
			if (ml_is_interrupted()) {
				w->flagged++;
				ml_cleanup_pop(false);
				return w;
			}
			break;
		}
	}
	ml_cleanup_pop(false);
	return w;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	for (unsigned r = 0; r < rounds; r++) {
		ml_token *t = tokens[w->id * rounds + r];
		atomic_store(&published[w->id], r);
		ml_limits l = ML_LIMITS_INIT;
		switch (next(&w->rng) % 4) {
		case 0:
			l.alloc_bytes = 0; /* interrupted at the first sample */
			break;
		case 1:
			l.alloc_bytes = ML_NO_LIMIT;
			break;
		default:
			l.alloc_bytes = (1 + next(&w->rng) % 256) * S;
		}
		l.delivery = (ml_delivery)(r % 3);
		l.global = r % 2;
		l.token = t;
		struct frame f = {w, 0, r};
		bool was_set = ml_token_is_set(t);
		ml_outcome out;
		ml_status st = ml_run(&l, work, &f, &out);
		if (st < ML_OK || st > ML_CANCELLED || out.status != st)
			w->bad++;
		else
			w->by_status[st]++;
		if (was_set && st != ML_CANCELLED)
			w->bad++;
		if (was_set)
			w->precancelled_ok++;
		if (ml_is_interrupted() || ml_is_masked())
			w->bad++;
	}
	return w;
}

static void *controller(void *arg)
{
	uint64_t x = 0x9e3779b97f4a7c15u;
	unsigned flips = 0, sets = 0;
	while (!atomic_load(&stop)) {
		int w = (int)(next(&x) % WORKERS);
		unsigned r = atomic_load(&published[w]);
		/* The worker's current round, or a later one (set before it
		 * starts: the task must not run at all). */
		unsigned pick = r + (unsigned)(next(&x) % 3);
		if (pick < rounds && next(&x) % 8 == 0) {
			ml_token_set(tokens[w * rounds + pick]);
			sets++;
		}
		switch (next(&x) % 16) {
		case 0:
			ml_set_global_memory_limit(
			    next(&x) % 2 ? ML_NO_LIMIT : next(&x) % (1u << 20));
			flips++;
			break;
		case 1:
			ml_set_seed(next(&x));
			break;
		case 2:
			(void)ml_global_memory_usage();
			(void)ml_global_memory_limit();
			break;
		}
		sched_yield();
	}
	ml_set_global_memory_limit(ML_NO_LIMIT);
	unsigned *res = arg;
	res[0] = flips;
	res[1] = sets;
	return NULL;
}

int main(void)
{
	const char *q = getenv("ML_TEST_QUICK");
	if (q && *q && strcmp(q, "0"))
		rounds = 60;
	ml_set_sample_interval(S);
	tokens = calloc((size_t)WORKERS * rounds, sizeof *tokens);
	if (!tokens)
		tap_bail("calloc");
	for (unsigned i = 0; i < WORKERS * rounds; i++)
		if (!(tokens[i] = ml_token_new()))
			tap_bail("ml_token_new");
	static struct worker w[WORKERS];
	pthread_t th[WORKERS], ctl;
	unsigned ctl_res[2] = {0};
	for (int i = 0; i < WORKERS; i++) {
		w[i] = (struct worker){.id = i, .rng = 0x1234567u + 77u * i};
		if (pthread_create(&th[i], NULL, worker_main, &w[i]))
			tap_bail("pthread_create");
	}
	if (pthread_create(&ctl, NULL, controller, ctl_res))
		tap_bail("pthread_create");
	for (int i = 0; i < WORKERS; i++)
		pthread_join(th[i], NULL);
	atomic_store(&stop, 1);
	pthread_join(ctl, NULL);

	unsigned bad = 0, by[4] = {0}, cleanups = 0, flagged = 0, pre = 0;
	unsigned refused = 0;
	for (int i = 0; i < WORKERS; i++) {
		bad += w[i].bad;
		for (int s = 0; s < 4; s++)
			by[s] += w[i].by_status[s];
		cleanups += w[i].cleanups_run;
		flagged += w[i].flagged;
		pre += w[i].precancelled_ok;
		refused += w[i].refused;
	}
	tap_diag("statuses: %u ok, %u alloc limit, %u global, %u cancelled "
	         "(%u before start); %u cleanups run on jumps, %u flagged "
	         "returns, %u refused notes; controller: %u global flips, %u "
	         "token sets",
	         by[0], by[1], by[2], by[3], pre, cleanups, flagged, refused,
	         ctl_res[0], ctl_res[1]);
	tap_is(bad, 0,
	       "every ml_run returned a valid status, tokens set "
	       "before start gave ML_CANCELLED, nothing left masked "
	       "or interrupted");
	tap_is(by[0] + by[1] + by[2] + by[3], WORKERS * rounds,
	       "every round accounted for");
	tap_ok(by[1] > 0 && by[3] > 0,
	       "allocation limits and tokens both interrupted tasks");
	tap_ok(cleanups > 0, "cleanup handlers ran on jumps");
	tap_ok(ctl_res[0] > 0 && ctl_res[1] > 0,
	       "the controller flipped the global limit and set tokens");
	for (unsigned i = 0; i < WORKERS * rounds; i++)
		ml_token_free(tokens[i]);
	free(tokens);
	return tap_done();
}
