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
 * reports.  Then task objects across threads: one freed while its slice
 * runs on another thread, one described while another thread trips it,
 * tokens set from another thread while slices run, and an ml_run's task
 * run by a helper thread (ml_task_current). */
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

/* ---- Task objects across threads --------------------------------------- */

#define TASK_ROUNDS 200

static atomic_int xstep;

static void *note_some(void *arg)
{
	unsigned n = (unsigned)(uintptr_t)arg;
	for (unsigned i = 0; i < n; i++)
		if (ml_note_alloc(256))
			ml_note_free(256);
	return arg;
}

/* Signals that the slice runs, then allocates: nothing orders its end
 * after the free on the other thread. */
static void *body_while_freed(void *arg)
{
	(void)arg;
	atomic_store(&xstep, 1);
	return note_some((void *)(uintptr_t)64);
}

static void *slice_of(void *arg)
{
	ml_outcome out;
	ml_task_run(arg, body_while_freed, NULL, &out);
	return out.ret;
}

/* ml_task_free while the task's slice runs on another thread (allowed):
 * the slice's end reads what the free wrote. */
static unsigned free_while_running(void)
{
	unsigned ok = 0;
	ml_limits l = ML_LIMITS_INIT;
	for (int r = 0; r < TASK_ROUNDS; r++) {
		ml_task *t = ml_task_new(&l);
		pthread_t th;
		void *ret;
		atomic_store(&xstep, 0);
		if (!t || pthread_create(&th, NULL, slice_of, t))
			tap_bail("ml_task_new or pthread_create");
		while (atomic_load(&xstep) != 1)
			sched_yield();
		ml_task_free(t);
		pthread_join(th, &ret);
		ok += ret == (void *)(uintptr_t)64;
	}
	return ok;
}

/* Allocates until its task is interrupted (FLAG delivery). */
static void *until_tripped(void *arg)
{
	(void)arg;
	while (!ml_is_interrupted())
		if (ml_note_alloc(1024))
			ml_note_free(1024);
	return NULL;
}

static void *tripping_slice(void *arg)
{
	ml_task_run(arg, until_tripped, NULL, NULL);
	return NULL;
}

/* ml_task_describe on one thread while another trips the task: the
 * estimates of the interruption are read as the winner writes them. */
static unsigned describe_while_tripping(void)
{
	unsigned ok = 0;
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 16 * S;
	l.delivery = ML_DELIVER_FLAG;
	for (int r = 0; r < TASK_ROUNDS; r++) {
		ml_task *t = ml_task_new(&l);
		pthread_t th;
		char line[512];
		if (!t || pthread_create(&th, NULL, tripping_slice, t))
			tap_bail("ml_task_new or pthread_create");
		int n;
		do
			n = ml_task_describe(t, line, sizeof line);
		while (n > 0 && ml_task_status(t) == ML_OK);
		n = ml_task_describe(t, line, sizeof line);
		pthread_join(th, NULL);
		ok += n > 0 &&
		      strncmp(line, ml_status_str(ML_ALLOC_LIMIT),
		              strlen(ml_status_str(ML_ALLOC_LIMIT))) == 0;
		ml_task_free(t);
	}
	return ok;
}

/* Slices on two threads poll until a third sets their task's token. */
static void *until_cancelled(void *arg)
{
	(void)arg;
	for (;;) {
		if (ml_note_alloc(128))
			ml_note_free(128);
		ml_check();
		if (ml_is_interrupted())
			return NULL;
	}
}

static void *cancelled_slice(void *arg)
{
	ml_outcome out;
	return (void *)(uintptr_t)ml_task_run(arg, until_cancelled, NULL, &out);
}

static unsigned token_from_another_thread(void)
{
	unsigned ok = 0;
	for (int r = 0; r < TASK_ROUNDS; r++) {
		ml_token *tok = ml_token_new();
		ml_limits l = ML_LIMITS_INIT;
		l.token = tok;
		l.delivery = (ml_delivery)(r % 3);
		ml_task *t = tok ? ml_task_new(&l) : NULL;
		pthread_t th[2];
		void *st[2];
		if (!t || pthread_create(&th[0], NULL, cancelled_slice, t) ||
		    pthread_create(&th[1], NULL, cancelled_slice, t))
			tap_bail("ml_task_new or pthread_create");
		for (int i = 0; i < r % 7; i++)
			sched_yield();
		ml_token_set(tok);
		pthread_join(th[0], &st[0]);
		pthread_join(th[1], &st[1]);
		ok += st[0] == (void *)(uintptr_t)ML_CANCELLED &&
		      st[1] == (void *)(uintptr_t)ML_CANCELLED &&
		      ml_task_status(t) == ML_CANCELLED;
		ml_task_free(t);
		ml_token_free(tok);
	}
	return ok;
}

/* An ml_run's task, run by a helper thread while the ml_run allocates;
 * ml_run waits for the helper's slice before it returns. */
static atomic_int helper_in; /* its slice began, or ml_task_run returned */

static void *helper_body(void *arg)
{
	atomic_store(&helper_in, 1);
	return note_some(arg);
}

static void *helper_slice(void *arg)
{
	ml_outcome out;
	ml_task_run(arg, helper_body, (void *)(uintptr_t)200, &out);
	atomic_store(&helper_in, 1);
	return out.ret;
}

static void *hand_to_helper(void *arg)
{
	pthread_t *th = arg;
	atomic_store(&helper_in, 0);
	if (pthread_create(th, NULL, helper_slice, ml_task_current()))
		tap_bail("pthread_create");
	void *r = note_some((void *)(uintptr_t)200);
	/* The task may be run elsewhere only while this ml_run runs: the
	 * helper's ml_task_run must have begun. */
	while (!atomic_load(&helper_in))
		sched_yield();
	return r;
}

static unsigned run_task_on_helper(void)
{
	unsigned ok = 0;
	for (int r = 0; r < TASK_ROUNDS; r++) {
		ml_limits l = ML_LIMITS_INIT;
		l.alloc_bytes = (r % 4) * 64 * S;
		l.delivery = ML_DELIVER_FLAG;
		pthread_t th;
		void *hret;
		ml_outcome out;
		ml_status st = ml_run(&l, hand_to_helper, &th, &out);
		pthread_join(th, &hret);
		/* A slice of a task already interrupted does not run. */
		ok += (st == ML_OK && hret == (void *)(uintptr_t)200) ||
		      (st == ML_ALLOC_LIMIT &&
		       (hret == (void *)(uintptr_t)200 || hret == NULL));
	}
	return ok;
}

static void test_task_objects(void)
{
	tap_is(free_while_running(), TASK_ROUNDS,
	       "a task freed while its slice runs on another thread: every "
	       "slice ends normally");
	tap_is(describe_while_tripping(), TASK_ROUNDS,
	       "ml_task_describe while another thread trips the task: once "
	       "tripped, it names the allocation limit");
	tap_is(token_from_another_thread(), TASK_ROUNDS,
	       "a token set from a third thread cancels both running slices");
	tap_is(run_task_on_helper(), TASK_ROUNDS,
	       "an ml_run's task run by a helper thread: the helper's slice "
	       "ends before ml_run returns");
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
	test_task_objects();
	return tap_done();
}
