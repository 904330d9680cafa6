/* Task semantics: statuses, the three deliveries, nesting, tokens (other
 * thread, signal handler), masking, cleanup handlers, invalid arguments,
 * thread exit and fork inside a task, flat footprint over a million tasks.
 * Jump safety inside libc lives in test-jump-safety.c. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <memlimits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define S 4096u

static _Thread_local void *volatile sink;

/* Allocate (and free) `bytes` in blocks of `block`; count what succeeded
 * and the first failure. */
struct spend {
	size_t bytes, block;
	volatile size_t done; /* bytes allocated successfully */
	volatile int failed;  /* an allocation returned NULL */
	volatile int failed_errno;
	volatile int flagged;  /* ml_is_interrupted() turned true */
	volatile int finished; /* fn ran to its end */
	int stop_on_flag;
};

static void *spend(void *arg)
{
	struct spend *s = arg;
	while (s->done < s->bytes) {
		void *p = malloc(s->block);
		if (!p) {
			s->failed++;
			s->failed_errno = errno;
			if (s->failed > 100)
				break;
			continue;
		}
		sink = p;
		free(p);
		s->done += s->block;
		if (ml_is_interrupted()) {
			s->flagged = 1;
			if (s->stop_on_flag)
				break;
		}
	}
	s->finished = 1;
	return s;
}

static ml_limits limits(uint64_t bytes, ml_delivery d)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = bytes;
	l.delivery = d;
	return l;
}

static void test_statuses(void)
{
	ml_outcome out;
	struct spend s = {.bytes = 100000, .block = 100};
	ml_limits l = limits(ML_NO_LIMIT, ML_DELIVER_JUMP);
	tap_is(ml_run(&l, spend, &s, &out), ML_OK, "no limit: ML_OK");
	tap_ok(out.status == ML_OK && out.ret == &s && s.finished,
	       "ML_OK: out.ret is fn's value");

	s = (struct spend){.bytes = 100u << 20, .block = 1000};
	l = limits(1u << 20, ML_DELIVER_JUMP);
	tap_is(ml_run(&l, spend, &s, &out), ML_ALLOC_LIMIT,
	       "JUMP: allocation limit");
	tap_ok(out.ret == NULL && !s.finished && s.done < (100u << 20),
	       "JUMP: fn abandoned after %zu bytes, out.ret NULL", s.done);
	tap_ok(out.allocated >= (1u << 20) &&
	           out.allocated < (1u << 20) + 64 * S,
	       "JUMP: out.allocated %llu reaches the limit",
	       (unsigned long long)out.allocated);

	s = (struct spend){.bytes = 4u << 20, .block = 1000};
	l = limits(1u << 20, ML_DELIVER_FAIL);
	tap_is(ml_run(&l, spend, &s, &out), ML_ALLOC_LIMIT, "FAIL: status");
	tap_ok(s.failed > 0 && s.failed_errno == ENOMEM && out.ret == &s,
	       "FAIL: allocations fail with ENOMEM, fn returns (%d failures)",
	       s.failed);
	tap_ok(out.allocated < (1u << 20) + 64 * S,
	       "FAIL: refused allocations are not counted (%llu)",
	       (unsigned long long)out.allocated);

	s = (struct spend){.bytes = 4u << 20, .block = 1000, .stop_on_flag = 1};
	l = limits(1u << 20, ML_DELIVER_FLAG);
	tap_is(ml_run(&l, spend, &s, &out), ML_ALLOC_LIMIT, "FLAG: status");
	tap_ok(s.flagged && !s.failed && out.ret == &s && s.done < (4u << 20),
	       "FLAG: only the flag, fn stopped itself at %zu", s.done);
	tap_ok(!ml_is_interrupted(), "outside tasks nothing is interrupted");

	/* A zero limit: the first sample interrupts. */
	s = (struct spend){.bytes = 1u << 20, .block = 64};
	l = limits(0, ML_DELIVER_JUMP);
	tap_is(ml_run(&l, spend, &s, NULL), ML_ALLOC_LIMIT, "limit 0");
	tap_ok(s.done < 40 * S, "limit 0: stopped at the first sample (%zu)",
	       s.done);
}

static void test_allocated_estimate(void)
{
	/* 64 MiB at S = 4096: 16384 expected samples, sd 128. */
	struct spend s = {.bytes = 64u << 20, .block = 3000};
	ml_limits l = limits(ML_NO_LIMIT, ML_DELIVER_JUMP);
	ml_outcome out;
	ml_run(&l, spend, &s, &out);
	double lambda = (double)s.done / S;
	double z = ((double)out.allocated / S - lambda) / sqrt(lambda);
	/* |z| < 5: false alarm below 5.7e-7. */
	tap_ok(fabs(z) < 5, "out.allocated %llu for %zu bytes, z = %.2f",
	       (unsigned long long)out.allocated, s.done, z);
}

/* ---- Nesting ---------------------------------------------------------- */

struct nest {
	ml_limits inner;
	struct spend s;
	ml_status inner_status;
	volatile int inner_returned;
	ml_token *outer_token; /* set from inside the inner task */
};

static void *set_token_then_spend(void *arg)
{
	struct nest *n = arg;
	if (n->outer_token)
		ml_token_set(n->outer_token);
	return spend(&n->s);
}

static void *run_inner(void *arg)
{
	struct nest *n = arg;
	n->inner_status = ml_run(&n->inner, set_token_then_spend, n, NULL);
	n->inner_returned = 1;
	/* Keep allocating in the outer task after the inner one. */
	struct spend more = {.bytes = 64 * 1024, .block = 100};
	spend(&more);
	return n;
}

static void test_nesting(void)
{
	struct nest n;
	ml_limits outer;

	/* Inner limit smaller: the inner task stops, the outer goes on. */
	memset(&n, 0, sizeof n);
	n.inner = limits(1u << 20, ML_DELIVER_JUMP);
	n.s = (struct spend){.bytes = 64u << 20, .block = 500};
	outer = limits(32u << 20, ML_DELIVER_JUMP);
	tap_is(ml_run(&outer, run_inner, &n, NULL), ML_OK,
	       "inner limit smaller: outer ML_OK");
	tap_ok(n.inner_returned && n.inner_status == ML_ALLOC_LIMIT,
	       "inner limit smaller: inner ML_ALLOC_LIMIT");

	/* Inner limit larger: the outer trips while the inner runs; the
	 * jump lands in the outer ml_run, the inner never returns. */
	memset(&n, 0, sizeof n);
	n.inner = limits(64u << 20, ML_DELIVER_JUMP);
	n.s = (struct spend){.bytes = 128u << 20, .block = 500};
	outer = limits(1u << 20, ML_DELIVER_JUMP);
	tap_is(ml_run(&outer, run_inner, &n, NULL), ML_ALLOC_LIMIT,
	       "inner limit larger: outer interrupted");
	tap_ok(!n.inner_returned, "inner ml_run never returned");
	tap_ok(!ml_is_interrupted() && !ml_is_masked(),
	       "thread state clean after the jump");

	/* Outer FAIL, inner FLAG without limit: the outer trips while the
	 * inner runs; the inner's allocations fail (they are the outer's
	 * too), and the inner reports only its own status: ML_OK. */
	memset(&n, 0, sizeof n);
	n.inner = limits(ML_NO_LIMIT, ML_DELIVER_FLAG);
	n.s = (struct spend){.bytes = 8u << 20, .block = 500};
	outer = limits(1u << 20, ML_DELIVER_FAIL);
	tap_is(ml_run(&outer, run_inner, &n, NULL), ML_ALLOC_LIMIT,
	       "outer FAIL: interrupted");
	tap_ok(n.inner_returned && n.inner_status == ML_OK && n.s.failed,
	       "inner FLAG under interrupted FAIL: allocations failed, inner "
	       "ML_OK");

	/* Outer FLAG, inner JUMP with a smaller limit: the outer's flag
	 * does not stop the inner, which still jumps at its own limit. */
	memset(&n, 0, sizeof n);
	n.inner = limits(2u << 20, ML_DELIVER_JUMP);
	n.s = (struct spend){.bytes = 64u << 20, .block = 500};
	outer = limits(1u << 20, ML_DELIVER_FLAG);
	tap_is(ml_run(&outer, run_inner, &n, NULL), ML_ALLOC_LIMIT,
	       "outer FLAG: interrupted");
	tap_ok(n.inner_returned && n.inner_status == ML_ALLOC_LIMIT &&
	           n.s.flagged,
	       "inner JUMP under flagged outer: jumped at its own limit");

	/* Outer interrupted by its token while the inner runs. */
	memset(&n, 0, sizeof n);
	n.outer_token = ml_token_new();
	n.inner = limits(ML_NO_LIMIT, ML_DELIVER_JUMP);
	n.s = (struct spend){.bytes = 64u << 20, .block = 500};
	outer = limits(ML_NO_LIMIT, ML_DELIVER_JUMP);
	outer.token = n.outer_token;
	tap_is(ml_run(&outer, run_inner, &n, NULL), ML_CANCELLED,
	       "outer token set inside the inner task: outer cancelled");
	tap_ok(!n.inner_returned, "inner abandoned by the outer's jump");
	ml_token_free(n.outer_token);
}

/* ---- Tokens ----------------------------------------------------------- */

struct setter {
	ml_token *t;
	unsigned delay_ms;
};

static void *set_later(void *arg)
{
	struct setter *st = arg;
	struct timespec ts = {0, (long)st->delay_ms * 1000000};
	/* not ordering: the task spins until the token is set, before it
	 * starts or during; the delay only varies which */
	nanosleep(&ts, NULL);
	ml_token_set(st->t);
	return NULL;
}

static ml_token *alarm_token;
static void on_alarm(int sig)
{
	(void)sig;
	ml_token_set(alarm_token); /* async-signal-safe */
}

static void *spin_alloc(void *arg)
{
	/* Allocates until interrupted: a loop with no end of its own. */
	(void)arg;
	for (;;) {
		void *p = malloc(256);
		sink = p;
		free(p);
	}
	return NULL;
}

static int called;
static void *mark_called(void *arg)
{
	called = 1;
	return arg;
}

static void free_null_child(void *arg)
{
	(void)arg;
	ml_token *t = ml_token_new();
	ml_token_free(NULL);
	/* The token beside it is untouched, and a task still sees it. */
	ml_token_set(t);
	ml_limits l = ML_LIMITS_INIT;
	l.token = t;
	called = 0;
	bool cancelled = ml_run(&l, mark_called, NULL, NULL) == ML_CANCELLED;
	_exit(t && ml_token_is_set(t) && cancelled && !called ? 0 : 1);
}

static void test_tokens(void)
{
	ml_token *t = ml_token_new();
	tap_ok(t && !ml_token_is_set(t), "new token is clear");

	struct setter st = {t, 20};
	pthread_t th;
	pthread_create(&th, NULL, set_later, &st);
	ml_outcome out;
	tap_is(ml_limit_with_token(t, spin_alloc, NULL, &out), ML_CANCELLED,
	       "token set from another thread");
	pthread_join(th, NULL);
	tap_ok(ml_token_is_set(t), "token stays set");

	called = 0;
	tap_is(ml_limit_with_token(t, mark_called, NULL, &out), ML_CANCELLED,
	       "token already set: ML_CANCELLED at once");
	tap_ok(!called && out.status == ML_CANCELLED && out.allocated == 0,
	       "token already set: fn not run");
	ml_token_free(t);

	alarm_token = ml_token_new();
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, NULL);
	alarm(1);
	tap_is(ml_limit_with_token(alarm_token, spin_alloc, NULL, NULL),
	       ML_CANCELLED, "token set from a signal handler");
	ml_token_free(alarm_token);
	tap_is(tap_child(free_null_child, NULL, 10), 0,
	       "ml_token_free(NULL) returns and changes nothing");
}

static ml_token *check_token;
static volatile int after_check;
static void *cancel_then_check(void *arg)
{
	ml_token_set(check_token);
	ml_check(); /* jumps: the token was set */
	after_check = 1;
	return arg;
}

/* Outside any task, after one that ended interrupted (FAIL, whose
 * allocations were refused): ml_check returns, and nothing is left
 * interrupted, masked or refused. */
static void check_outside_child(void *arg)
{
	(void)arg;
	struct spend s = {.bytes = 4u << 20, .block = 1000};
	ml_limits l = limits(1u << 20, ML_DELIVER_FAIL);
	if (ml_run(&l, spend, &s, NULL) != ML_ALLOC_LIMIT || !s.failed)
		_exit(2);
	ml_check();
	void *p = malloc(1000);
	sink = p;
	free(p);
	_exit(p && !ml_is_interrupted() && !ml_is_masked() ? 0 : 1);
}

static void test_check(void)
{
	check_token = ml_token_new();
	ml_limits l = limits(ML_NO_LIMIT, ML_DELIVER_JUMP);
	l.token = check_token;
	after_check = 0;
	tap_is(ml_run(&l, cancel_then_check, NULL, NULL), ML_CANCELLED,
	       "ml_check delivers a cancellation without allocating");
	tap_ok(!after_check, "ml_check did not return");
	ml_token_free(check_token);
	tap_is(tap_child(check_outside_child, NULL, 10), 0,
	       "ml_check outside a task returns and changes nothing");
}

/* ---- Masking and cleanup ---------------------------------------------- */

static char order[16];
static int norder;
static int masked_in_handler;

static void note(void *arg)
{
	order[norder++] = *(const char *)arg;
	masked_in_handler &= ml_is_masked();
}

static void note_now(void *arg)
{
	order[norder++] = *(const char *)arg;
}

static void *push_and_run(void *arg)
{
	ml_cleanup_push(note, "b");
	ml_cleanup_push(note, "c");
	ml_cleanup_push(note, "x");
	ml_cleanup_pop(false); /* x never runs */
	ml_cleanup_push(note_now, "p");
	ml_cleanup_pop(true); /* p runs now, unmasked */
	return spend(arg);
}

static void *outer_push(void *arg)
{
	ml_cleanup_push(note, "a");
	ml_limits in = limits(ML_NO_LIMIT, ML_DELIVER_JUMP);
	ml_run(&in, push_and_run, arg, NULL);
	return NULL;
}

static void *push_null_spend(void *arg)
{
	ml_cleanup_push(note_now, "a");
	ml_cleanup_push(NULL, NULL);
	ml_cleanup_push(note_now, "e");
	return spend(arg);
}

static void test_cleanup(void)
{
	struct spend s = {.bytes = 64u << 20, .block = 1000};
	ml_limits l = limits(1u << 20, ML_DELIVER_JUMP);
	norder = 0;
	masked_in_handler = 1;
	tap_is(ml_run(&l, outer_push, &s, NULL), ML_ALLOC_LIMIT,
	       "cleanup: task interrupted");
	order[norder] = 0;
	tap_ok(!strcmp(order, "pcba"),
	       "handlers ran innermost first, popped ones not again: %s",
	       order);
	tap_ok(masked_in_handler, "handlers ran masked");
	ml_cleanup_pop(true); /* nothing pushed: no-op */
	tap_ok(norder == 4, "pop without push is a no-op");

	/* A NULL handler is an empty place: its pop runs nothing and the
	 * next pop still finds the handler below it. */
	norder = 0;
	ml_cleanup_push(note_now, "n");
	ml_cleanup_push(NULL, "ignored");
	ml_cleanup_pop(true);
	int after_empty = norder;
	ml_cleanup_pop(true);
	tap_ok(after_empty == 0 && norder == 1 && order[0] == 'n',
	       "push(NULL) pushes an empty place: its pop runs nothing, the "
	       "next pop runs the handler below (%d, %d)",
	       after_empty, norder);
	norder = 0;
	s = (struct spend){.bytes = 64u << 20, .block = 1000};
	tap_is(ml_run(&l, push_null_spend, &s, NULL), ML_ALLOC_LIMIT,
	       "a task with an empty place on its stack is interrupted");
	order[norder] = 0;
	tap_ok(!strcmp(order, "ea"),
	       "the jump skips the empty place and runs the others, innermost "
	       "first: %s",
	       order);
}

struct masked {
	struct spend s;
	volatile int tripped_while_masked;
	volatile int unmasked;
};

static void *mask_then_spend(void *arg)
{
	struct masked *m = arg;
	ml_mask();
	ml_mask();
	spend(&m->s); /* well past the limit */
	m->tripped_while_masked = ml_is_interrupted() && ml_is_masked();
	ml_unmask(); /* still masked: depth 1 */
	m->unmasked = 1;
	ml_unmask(); /* safe point: the jump happens here */
	m->unmasked = 2;
	return m;
}

/* A token set while masked, with no allocation after it: the outermost
 * ml_unmask must look at it (ml_mask(3)) and jump. */
struct token_mask {
	ml_token *token;
	volatile int after_unmask;
};

static void *token_while_masked(void *arg)
{
	struct token_mask *m = arg;
	ml_mask();
	ml_token_set(m->token);
	ml_unmask(); /* safe point: polls the token, jumps */
	m->after_unmask = 1;
	return m;
}

static void test_masking(void)
{
	struct masked m = {.s = {.bytes = 4u << 20, .block = 1000}};
	ml_limits l = limits(1u << 20, ML_DELIVER_JUMP);
	tap_is(ml_run(&l, mask_then_spend, &m, NULL), ML_ALLOC_LIMIT,
	       "masked JUMP task: interrupted");
	tap_ok(m.s.finished && m.tripped_while_masked,
	       "no delivery while masked; samples still counted");
	tap_ok(m.unmasked == 1, "delivered at the outermost ml_unmask");
	tap_ok(!ml_is_masked(), "mask depth restored after the jump");

	struct token_mask tm = {.token = ml_token_new()};
	ml_limits lt = ML_LIMITS_INIT;
	lt.token = tm.token;
	ml_status ts =
	    tm.token ? ml_run(&lt, token_while_masked, &tm, NULL) : ML_ENOMEM;
	tap_ok(ts == ML_CANCELLED && tm.after_unmask == 0,
	       "a token set while masked: the outermost ml_unmask jumps "
	       "(status %d, returned %d)",
	       ts, tm.after_unmask);
	ml_token_free(tm.token);

	/* FAIL: allocations succeed while masked, fail after. */
	m = (struct masked){.s = {.bytes = 4u << 20, .block = 1000}};
	l = limits(1u << 20, ML_DELIVER_FAIL);
	ml_mask();
	ml_status st = ml_run(&l, spend, &m.s, NULL);
	ml_unmask();
	tap_ok(st == ML_ALLOC_LIMIT && !m.s.failed,
	       "FAIL while masked: interrupted, no allocation failed");

	ml_unmask(); /* without mask: harmless */
	tap_ok(!ml_is_masked(), "unmask without mask is a no-op");
}

/* ---- Invalid arguments ------------------------------------------------ */

static void test_einval(void)
{
	ml_outcome out = {.status = ML_OK, .ret = (void *)1, .allocated = 42};
	ml_limits l = limits(1000, ML_DELIVER_JUMP);
	called = 0;
	tap_is(ml_run(NULL, mark_called, NULL, &out), ML_EINVAL, "NULL limits");
	tap_is(ml_run(&l, NULL, NULL, &out), ML_EINVAL, "NULL fn");
	l.delivery = (ml_delivery)7;
	tap_is(ml_run(&l, mark_called, NULL, &out), ML_EINVAL, "bad delivery");
	tap_is(ml_limit_with_token(NULL, mark_called, NULL, &out), ML_EINVAL,
	       "NULL token");
	tap_is(ml_limit_allocations(10, NULL, NULL, &out), ML_EINVAL,
	       "shorthand with NULL fn");
	tap_ok(!called && out.ret == (void *)1 && out.allocated == 42,
	       "nothing ran and out is untouched");
	tap_is(ml_set_default_delivery((ml_delivery)3), ML_EINVAL,
	       "bad default delivery");
	tap_is(ml_default_delivery(), ML_DELIVER_JUMP, "default unchanged");
	tap_ok(!strcmp(ml_status_str(ML_EINVAL), "invalid argument") &&
	           ml_status_str((ml_status)99) != NULL,
	       "ml_status_str covers every value");
}

static void test_default_delivery(void)
{
	struct spend s = {.bytes = 4u << 20, .block = 1000};
	ml_set_default_delivery(ML_DELIVER_FAIL);
	tap_is(ml_limit_allocations(1u << 20, spend, &s, NULL), ML_ALLOC_LIMIT,
	       "shorthand with FAIL default");
	tap_ok(s.failed && s.finished, "the shorthand used FAIL delivery");
	ml_set_default_delivery(ML_DELIVER_JUMP);
}

/* ---- Threads and fork inside tasks ------------------------------------ */

/* Handlers a thread leaves pushed when it calls pthread_exit in a task:
 * enough records (32 bytes each) that a leak of them shows in VmRSS. */
#define EXIT_HANDLERS 1000
static atomic_int exit_handler_runs;

static void count_exit_handler(void *arg)
{
	(void)arg;
	atomic_fetch_add(&exit_handler_runs, 1);
}

static void *exit_inside(void *arg)
{
	(void)arg;
	for (int i = 0; i < EXIT_HANDLERS; i++)
		ml_cleanup_push(count_exit_handler, NULL);
	struct spend s = {.bytes = 1u << 20, .block = 100};
	spend(&s);
	pthread_exit(NULL);
}

static void *thread_with_task(void *arg)
{
	ml_limits l = limits(64u << 20, ML_DELIVER_JUMP);
	ml_run(&l, exit_inside, arg, NULL);
	return (void *)1; /* never reached */
}

/* n threads that each call pthread_exit inside a task; false if one of
 * them came back any other way. */
static bool exit_threads(int n)
{
	for (int i = 0; i < n; i++) {
		pthread_t th;
		void *ret = (void *)1;
		if (pthread_create(&th, NULL, thread_with_task, NULL) != 0 ||
		    pthread_join(th, &ret) != 0 || ret != NULL)
			return false;
	}
	return true;
}

static void test_thread_exit(void)
{
	/* pthread_exit inside ml_run with handlers pushed: they are
	 * discarded, not run, and their records reused.  Warm-up first:
	 * glibc's thread stacks and arenas, our first slabs. */
	bool ok = exit_threads(20);
	long rss0 = tap_proc_kb("VmRSS"), data0 = tap_proc_kb("VmData");
	ok = ok && exit_threads(200);
	long rss1 = tap_proc_kb("VmRSS"), data1 = tap_proc_kb("VmData");
	tap_ok(ok && atomic_load(&exit_handler_runs) == 0,
	       "pthread_exit inside ml_run, 220 threads: each exited, none of "
	       "their %d handlers ran (%d did)",
	       220 * EXIT_HANDLERS, atomic_load(&exit_handler_runs));
	if (tap_under_valgrind()) {
		tap_skip(1, "VmRSS over thread exits: not under valgrind");
		return;
	}
	/* Leaked records would be 200 * EXIT_HANDLERS * 32 bytes = 6250 kB. */
	tap_ok(rss0 > 0 && rss1 - rss0 < 1024,
	       "no growth over 200 thread exits with %d handlers each: VmRSS "
	       "%ld -> %ld kB (VmData %ld -> %ld kB)",
	       EXIT_HANDLERS, rss0, rss1, data0, data1);
}

static void child_task(void *arg)
{
	(void)arg;
	struct spend s = {.bytes = 64u << 20, .block = 1000};
	ml_limits l = limits(1u << 20, ML_DELIVER_JUMP);
	_exit(ml_run(&l, spend, &s, NULL) == ML_ALLOC_LIMIT ? 0 : 1);
}

static void *fork_inside(void *arg)
{
	int *status = arg;
	struct spend s = {.bytes = 512u << 10, .block = 1000};
	spend(&s); /* below the limit */
	pid_t pid = fork();
	if (pid == 0) {
		/* The child continues the task and runs over its limit. */
		struct spend more = {.bytes = 64u << 20, .block = 1000};
		spend(&more);
		_exit(3); /* not reached: the jump lands in ml_run */
	}
	int st = 0;
	waitpid(pid, &st, 0);
	*status = st;
	return arg;
}

static void test_fork(void)
{
	tap_is(tap_child(child_task, NULL, 20), 0,
	       "fork: a child runs a task that trips");
	int st = -1;
	ml_limits l = limits(2u << 20, ML_DELIVER_JUMP);
	/* In the child the interrupted ml_run returns and main's code after
	 * it runs: make the child exit from there with a marker. */
	pid_t me = getpid();
	ml_status r = ml_run(&l, fork_inside, &st, NULL);
	if (getpid() != me)
		_exit(r == ML_ALLOC_LIMIT ? 42 : 43);
	tap_is(r, ML_OK, "fork inside a task: parent's task unaffected");
	tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 42,
	       "fork inside a task: the child's jump landed in ml_run (%d)",
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* ---- Footprint -------------------------------------------------------- */

static void *tiny(void *arg)
{
	ml_cleanup_push(note, "q");
	void *p = malloc(32);
	sink = p;
	free(p);
	ml_cleanup_pop(false);
	return arg;
}

static void test_million(void)
{
	if (tap_under_valgrind()) {
		tap_skip(1, "RSS of a million tasks: not under valgrind");
		return;
	}
	long before = tap_proc_kb("VmRSS");
	ml_limits l = limits(1u << 20, ML_DELIVER_JUMP);
	for (int i = 0; i < 1000000; i++) {
		ml_token *t = ml_token_new();
		l.token = t;
		ml_run(&l, tiny, NULL, NULL);
		ml_token_free(t);
	}
	long after = tap_proc_kb("VmRSS");
	tap_ok(before > 0 && after - before < 512,
	       "a million tasks with tokens and cleanups: RSS %ld -> %ld KiB",
	       before, after);
}

int main(void)
{
	ml_set_sample_interval(S);
	ml_set_seed(3);
	TAP_RUN(test_statuses);
	TAP_RUN(test_allocated_estimate);
	TAP_RUN(test_nesting);
	TAP_RUN(test_tokens);
	TAP_RUN(test_check);
	TAP_RUN(test_cleanup);
	TAP_RUN(test_masking);
	TAP_RUN(test_einval);
	TAP_RUN(test_default_delivery);
	TAP_RUN(test_thread_exit);
	TAP_RUN(test_fork);
	TAP_RUN(test_million);
	return tap_done();
}
