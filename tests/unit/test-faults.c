/* Faults around the library: glibc's allocator failing under it (the test
 * hook MEMLIMITS_FAULT=libc:N, built with --enable-fault-injection: each
 * call fails with probability 1/N), its own pool running dry
 * (MEMLIMITS_FAULT=pool), the diagnostics for a bad MEMLIMITS_FAULT,
 * signal storms while threads are in the slow path, ml_token_set from a
 * signal handler during a jump, pthread_cancel of a thread inside a task,
 * exit() and _exit() while tasks run on other threads.  Every case that
 * could crash or hang runs in a child process with a time limit
 * (tap_child, or this program re-executed with the fault switch in its
 * environment: the library reads it once, at start). */
#define _GNU_SOURCE
#include "config.h" /* ML_FAULT_INJECTION */
#include "../tap/tap.h"

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <memlimits.h>
#include <pthread.h>
#include <signal.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static _Thread_local void *volatile sink;

/* Allocate and free a block; sink keeps the pair from being optimised
 * away (sink is per thread; the pointer freed is our own all the same). */
static void churn(size_t n)
{
	void *p = malloc(n);
	sink = p;
	free(p);
}
static const char *self_exe;
static bool quick; /* ML_TEST_QUICK: fewer rounds (valgrind) */

static unsigned rounds(unsigned full)
{
	return quick ? (full / 10 ? full / 10 : 1) : full;
}

static ml_limits lim(uint64_t bytes, ml_delivery d)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = bytes;
	l.delivery = d;
	return l;
}

/* Exit codes of the children: 0 = all good, else the first check that
 * failed (each has its own code, printed by the parent). */
#define FAIL_IF(cond, code, ...)               \
	do {                                   \
		if (cond) {                    \
			tap_diag(__VA_ARGS__); \
			_exit(code);           \
		}                              \
	} while (0)

/* ---- glibc's allocator failing: MEMLIMITS_FAULT=libc:3 ---------------- */

struct libc_run {
	unsigned calls, nulls, bad_errno, interrupted_seen;
};

/* Allocate through every member of the family; every NULL must come with
 * errno ENOMEM (posix_memalign: the return value) and nothing may look
 * like an interruption. */
static void *family_round(void *arg)
{
	struct libc_run *r = arg;
	for (unsigned i = 0; i < 3000; i++) {
		void *p = NULL;
		int err = 0;
		errno = 0;
		size_t n = 16 + (i * 37) % 2000;
		switch (i % 7) {
		case 0:
			p = malloc(n);
			err = errno;
			break;
		case 1:
			p = calloc(n, 3);
			err = errno;
			break;
		case 2: {
			void *q = malloc(64);
			if (!q) { /* counted below, as the call that failed */
				err = errno;
				break;
			}
			memset(q, 0x5a, 64);
			errno = 0;
			p = realloc(q, n + 4096);
			err = errno;
			if (!p) {
				/* The old block is still ours, intact. */
				const unsigned char *c = q;
				for (int j = 0; j < 64; j++)
					r->bad_errno += c[j] != 0x5a;
				free(q);
			}
			break;
		}
		case 3:
			err = posix_memalign(&p, 64, n);
			if (err)
				p = NULL;
			break;
		case 4:
			p = aligned_alloc(256, n);
			err = errno;
			break;
		case 5:
			p = memalign(4096, n);
			err = errno;
			break;
		case 6:
			p = valloc(n);
			err = errno;
			break;
		}
		r->calls++;
		if (!p) {
			r->nulls++;
			r->bad_errno += err != ENOMEM;
		} else {
			sink = p;
			free(p);
		}
		r->interrupted_seen += ml_is_interrupted();
	}
	return r;
}

/* The nested case: an outer JUMP task with a distant limit runs an inner
 * FAIL task that allocates through the whole family. */
static void *nested_family(void *arg)
{
	struct libc_run *r = arg;
	ml_limits l = lim((uint64_t)1 << 40, ML_DELIVER_FAIL);
	ml_outcome out;
	ml_status st = ml_run(&l, family_round, r, &out);
	FAIL_IF(st != ML_OK || out.ret != r, 33, "inner FAIL task: status %d",
	        st);
	r->interrupted_seen += ml_is_interrupted();
	return r;
}

static void libc_child(void)
{
	struct libc_run r = {0};
	family_round(&r);
	tap_diag("outside tasks: %u calls, %u NULL", r.calls, r.nulls);
	FAIL_IF(r.nulls < r.calls / 10, 10,
	        "the fault hook did not fire (%u of %u)", r.nulls, r.calls);
	FAIL_IF(r.bad_errno, 11, "%u failures without ENOMEM", r.bad_errno);

	static const ml_delivery dl[] = {ML_DELIVER_JUMP, ML_DELIVER_FAIL,
	                                 ML_DELIVER_FLAG};
	/* No limit, and a limit far above what the rounds allocate; each
	 * local and global. */
	static const uint64_t limits[] = {ML_NO_LIMIT, (uint64_t)1 << 40};
	for (int d = 0; d < 3; d++)
		for (int k = 0; k < 4; k++) {
			struct libc_run t = {0};
			ml_limits l = lim(limits[k % 2], dl[d]);
			l.global = k / 2;
			ml_outcome out;
			ml_status st = ml_run(&l, family_round, &t, &out);
			FAIL_IF(st != ML_OK || out.ret != &t, 20 + d,
			        "delivery %d limit %d global %d: status %d", d,
			        k % 2, k / 2, st);
			FAIL_IF(t.nulls < t.calls / 10, 30,
			        "no injected failure inside the task");
			FAIL_IF(t.bad_errno, 31,
			        "delivery %d: %u NULL without ENOMEM", d,
			        t.bad_errno);
			FAIL_IF(t.interrupted_seen, 32,
			        "delivery %d: a failure looked like an "
			        "interruption",
			        d);
		}
	/* Nested: the inner FAIL task, the outer JUMP one, both ML_OK. */
	struct libc_run t = {0};
	ml_limits l = lim((uint64_t)1 << 40, ML_DELIVER_JUMP);
	ml_outcome out;
	ml_status st = ml_run(&l, nested_family, &t, &out);
	FAIL_IF(st != ML_OK || out.ret != &t, 34, "outer JUMP task: status %d",
	        st);
	FAIL_IF(t.nulls < t.calls / 10, 35,
	        "nested: no injected failure (%u of %u)", t.nulls, t.calls);
	FAIL_IF(t.bad_errno || t.interrupted_seen, 36,
	        "nested: %u NULL without ENOMEM, %u interruptions seen",
	        t.bad_errno, t.interrupted_seen);
	_exit(0);
}

/* ---- Each function at the configured rate: MEMLIMITS_FAULT=libc:N ----- */

enum {
	F_MALLOC,
	F_CALLOC,
	F_REALLOC,
	F_POSIX_MEMALIGN,
	F_ALIGNED_ALLOC,
	F_MEMALIGN,
	F_VALLOC,
	F_PVALLOC,
	NFN
};
#define RATE_CALLS 20000u

struct rate {
	unsigned calls, fails;
	unsigned bad_errno;  /* a NULL without ENOMEM */
	unsigned misaligned; /* a block not aligned as the function promises */
	unsigned bad_data;   /* calloc not zeroed, realloc lost the contents */
};

static bool all_bytes(const unsigned char *p, size_t n, unsigned char c)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return false;
	return true;
}

/* One function, RATE_CALLS calls in a row, nothing else allocating in
 * between; every block returned is written whole before it is freed. */
static void rate_one(int f, struct rate *r)
{
	const size_t page = (size_t)sysconf(_SC_PAGESIZE);
	unsigned char *cur = NULL; /* realloc's block, cur_n bytes of cur_c */
	size_t cur_n = 0;
	unsigned char cur_c = 0;
	for (unsigned i = 0; i < RATE_CALLS; i++) {
		size_t n = 1 + (i * 7919u) % 3000, a = (size_t)16 << (i % 9);
		size_t len = n, want_align = 16; /* max_align_t */
		void *p = NULL;
		int err = 0;
		errno = 0;
		switch (f) {
		case F_MALLOC:
			p = malloc(n);
			break;
		case F_CALLOC:
			len = 3 * n;
			p = calloc(3, n);
			if (p && !all_bytes(p, len, 0))
				r->bad_data++;
			break;
		case F_REALLOC: {
			unsigned char c = (unsigned char)(i | 1);
			p = realloc(cur, n);
			if (!p) {
				/* The old block stays ours, intact. */
				r->bad_data += !all_bytes(cur, cur_n, cur_c);
				break;
			}
			r->bad_data +=
			    !all_bytes(p, cur_n < n ? cur_n : n, cur_c);
			memset(p, c, n);
			cur = p, cur_n = n, cur_c = c;
			break;
		}
		case F_POSIX_MEMALIGN:
			want_align = a;
			err = posix_memalign(&p, a, n);
			if (err)
				p = NULL;
			break;
		case F_ALIGNED_ALLOC:
			want_align = a;
			len = (n + a - 1) / a * a; /* a multiple of a */
			p = aligned_alloc(a, len);
			break;
		case F_MEMALIGN:
			want_align = a;
			p = memalign(a, n);
			break;
		case F_VALLOC:
			want_align = page;
			p = valloc(n);
			break;
		case F_PVALLOC:
			want_align = page;
			len = (n + page - 1) / page * page; /* whole pages */
			p = pvalloc(n);
			break;
		}
		if (f != F_POSIX_MEMALIGN)
			err = errno;
		r->calls++;
		if (!p) {
			r->fails++;
			r->bad_errno += err != ENOMEM;
			continue;
		}
		r->misaligned += (uintptr_t)p % want_align != 0;
		if (f == F_REALLOC)
			continue; /* written above, kept for the next call */
		memset(p, 0xa5, len);
		sink = p;
		free(p);
	}
	free(cur);
}

/* Writes the struct rate of each function to fd ARG. */
static void rate_child(const char *arg)
{
	struct rate r[NFN] = {{0}};
	for (int f = 0; f < NFN; f++)
		rate_one(f, &r[f]);
	ssize_t w = write(atoi(arg), r, sizeof r);
	_exit(w == (ssize_t)sizeof r ? 0 : 1);
}

/* ---- realloc(p, 0) under the injector: MEMLIMITS_FAULT=libc:2 --------- */

/* realloc(p, 0) frees p and returns NULL without touching errno (glibc);
 * realloc(NULL, 0) is malloc(0).  Neither may fail, recurse or hang. */
static void realloc0_child(void)
{
	enum { BIG = 1 << 20, ROUNDS = 200 };
	long before = tap_proc_kb("VmData");
	for (int i = 0; i < ROUNDS; i++) {
		unsigned char *p;
		while (!(p = malloc(BIG))) /* injected failures: again */
			;
		p[0] = 1, p[BIG - 1] = 2;
		sink = p;
		errno = 0;
		void *q = realloc(p, 0);
		FAIL_IF(q != NULL || errno != 0, 123,
		        "realloc(p, 0) round %d: %p, errno %d (failed?)", i, q,
		        errno);
		errno = 0;
		q = realloc(NULL, 0);
		FAIL_IF(q == NULL, 124, "realloc(NULL, 0) round %d: errno %d",
		        i, errno);
		free(q);
	}
	/* Every p was freed: ROUNDS MiB would stay mapped otherwise. */
	long grown = tap_proc_kb("VmData") - before;
	FAIL_IF(before < 0 || grown > ROUNDS / 3 * 1024, 125,
	        "VmData grew by %ld kB over %d realloc(p, 0) of 1 MiB blocks",
	        grown, ROUNDS);
	_exit(0);
}

/* ---- Diagnostics for MEMLIMITS_FAULT ---------------------------------- */

/* Exit status: bit 0 set if the pool fault is in force, bit 1 if the libc
 * one is: what of the value was applied. */
static void diag_child(void)
{
	int code = 0;
	ml_token *t = ml_token_new();
	code |= t == NULL;
	ml_token_free(t);
	for (int i = 0; i < 64; i++) {
		void *p = malloc(100);
		sink = p;
		free(p);
		if (!p)
			code |= 2;
	}
	_exit(code);
}

/* ---- Our pool running dry: MEMLIMITS_FAULT=pool ----------------------- */

static volatile int handler_runs;
static void count_handler(void *arg)
{
	(void)arg;
	handler_runs++;
}

static void *push_pop(void *arg)
{
	ml_cleanup_push(count_handler, NULL);
	for (int i = 0; i < 100; i++)
		churn(100);
	ml_cleanup_pop(true); /* a hole: runs nothing, stays paired */
	return arg;
}

static void *spend_forever(void *arg)
{
	ml_cleanup_push(count_handler, NULL);
	for (;;) {
		void *p = malloc(1000);
		sink = p;
		free(p);
	}
	return arg;
}

static void *spend_some(void *arg)
{
	for (int i = 0; i < 20000; i++)
		churn(100);
	return arg;
}

static void *pool_thread(void *arg)
{
	ml_limits l = lim(1 << 20, ML_DELIVER_JUMP);
	ml_outcome out;
	ml_status st = ml_run(&l, spend_forever, NULL, &out);
	return (void *)(intptr_t)st;
}

static void pool_child(void)
{
	ml_token *t = ml_token_new();
	FAIL_IF(t != NULL, 40, "ml_token_new found memory with the pool dry");
	ml_token_free(t); /* NULL: a no-op */

	ml_limits l = lim(ML_NO_LIMIT, ML_DELIVER_JUMP);
	ml_outcome out;
	ml_status st = ml_run(&l, push_pop, &l, &out);
	FAIL_IF(st != ML_ENOMEM, 41,
	        "a lost cleanup record: ml_run returned %d, want ML_ENOMEM",
	        st);
	FAIL_IF(handler_runs != 0, 42, "the handler of a hole ran");
	FAIL_IF(out.ret != &l, 43, "out.ret is not fn's value");

	/* Tasks themselves need no pool: a plain task, and an interrupted
	 * one (its lost cleanup wins: ML_ENOMEM, the handler cannot run). */
	st = ml_run(&l, spend_some, &l, &out);
	FAIL_IF(st != ML_OK, 44, "a plain task: %d", st);
	l = lim(1 << 20, ML_DELIVER_JUMP);
	st = ml_run(&l, spend_forever, NULL, &out);
	FAIL_IF(st != ML_ENOMEM || handler_runs, 45,
	        "interrupted task with a lost cleanup: %d, %d handler runs", st,
	        handler_runs);
	l = lim(256 << 10, ML_DELIVER_FAIL); /* 4 samples of 25 expected */
	st = ml_run(&l, spend_some, NULL, &out);
	FAIL_IF(st != ML_ALLOC_LIMIT, 46, "FAIL task: %d", st);

	/* Threads: their state is TLS, they need no pool either. */
	pthread_t th[4];
	for (int i = 0; i < 4; i++)
		FAIL_IF(pthread_create(&th[i], NULL, pool_thread, NULL), 47,
		        "pthread_create");
	for (int i = 0; i < 4; i++) {
		void *r;
		pthread_join(th[i], &r);
		FAIL_IF((intptr_t)r != ML_ENOMEM, 48, "thread task: %d",
		        (int)(intptr_t)r);
	}
	/* A global limit: the meter needs no pool. */
	FAIL_IF(ml_set_global_memory_limit(1u << 30), 49, "global limit");
	l = lim(ML_NO_LIMIT, ML_DELIVER_JUMP);
	l.global = true;
	st = ml_run(&l, spend_some, NULL, &out);
	FAIL_IF(st != ML_OK, 50, "global task: %d", st);
	_exit(0);
}

/* Run mode with the pool dry: no root task can be made; the program must
 * still run (unlimited), never crash. */
static void pool_run_child(void)
{
	for (int i = 0; i < 10000; i++)
		churn(1000);
	pthread_t th;
	FAIL_IF(pthread_create(&th, NULL, spend_some, NULL), 60,
	        "pthread_create");
	pthread_join(th, NULL);
	_exit(0);
}

/* Re-execute this program as CHILD with the environment given (and ARG;
 * stderr sent to ERR_FD when it is not 0). */
struct reexec {
	const char *child;
	const char *env[4];
	const char *arg;
	int err_fd;
};

static void do_reexec(void *arg)
{
	const struct reexec *r = arg;
	for (int i = 0; i < 4 && r->env[i]; i++)
		putenv((char *)r->env[i]);
	if (r->err_fd > 0)
		dup2(r->err_fd, 2);
	char *argv[] = {(char *)self_exe, (char *)r->child, (char *)r->arg,
	                NULL};
	execv(self_exe, argv);
	_exit(127);
}

/* ---- Signal storms ---------------------------------------------------- */

static _Atomic(ml_token *) storm_token;
static atomic_uint storm_signals, storm_sets;
static volatile sig_atomic_t storm_seen;

static void storm_handler(int sig)
{
	(void)sig;
	int saved = errno;
	unsigned n = atomic_fetch_add(&storm_signals, 1);
	ml_token *t = atomic_load(&storm_token);
	if (t && n % 7 == 3) {
		ml_token_set(t);
		atomic_fetch_add(&storm_sets, 1);
	}
	storm_seen += ml_token_is_set(t);
	errno = saved;
}

struct storm_task {
	unsigned long allocs;
	bool ran; /* fn was called: not so when the token was set first */
	bool flagged;
};

static void *storm_fn(void *arg)
{
	struct storm_task *s = arg;
	s->ran = true;
	for (s->allocs = 0; s->allocs < 200000; s->allocs++) {
		size_t n = 1 + (s->allocs * 131) % 3000;
		void *p = malloc(n);
		sink = p;
		free(p);
		if (ml_is_interrupted()) {
			s->flagged = true;
			break;
		}
	}
	return s;
}

static void *storm_nested(void *arg)
{
	/* An inner task with its own tight limit: jumps land here all the
	 * time while the outer token is set from the handler. */
	ml_limits in = lim(4096, ML_DELIVER_JUMP);
	((struct storm_task *)arg)->ran = true;
	for (int i = 0; i < 50; i++) {
		struct storm_task s = {0};
		ml_run(&in, storm_fn, &s, NULL);
	}
	return storm_fn(arg);
}

static void start_timer(long usec)
{
	struct itimerval it = {{0, usec}, {0, usec}};
	setitimer(ITIMER_REAL, &it, NULL);
}

static void stop_timer(void)
{
	struct itimerval it = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &it, NULL);
}

static void storm_child(void *arg)
{
	bool nested = arg != NULL;
	struct sigaction sa = {0};
	sa.sa_handler = storm_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	ml_set_sample_interval(64); /* nearly every allocation: slow path */
	unsigned cancelled = 0, ok = 0, n = rounds(300);
	start_timer(50);
	for (unsigned i = 0; i < n; i++) {
		ml_token *t = ml_token_new();
		FAIL_IF(!t, 70, "ml_token_new");
		ml_limits l = lim(ML_NO_LIMIT, (ml_delivery)(i % 3));
		l.token = t;
		struct storm_task s = {0};
		ml_outcome out;
		atomic_store(&storm_token, t);
		ml_status st =
		    ml_run(&l, nested ? storm_nested : storm_fn, &s, &out);
		atomic_store(&storm_token, NULL);
		FAIL_IF(st != ML_OK && st != ML_CANCELLED, 71,
		        "round %u: status %d", i, st);
		FAIL_IF(st == ML_CANCELLED && !ml_token_is_set(t), 72,
		        "cancelled without its token set");
		/* The handler may set the token between the store above and
		 * ml_run's own check: then fn is rightly not called
		 * (ml_run(3)), so not flagged; only then. */
		FAIL_IF(!s.ran && st != ML_CANCELLED, 74,
		        "round %u: fn not called, status %d", i, st);
		/* A FLAG task's fn polls after its last allocation: whatever
		 * cancelled it while it ran, it saw. */
		FAIL_IF(l.delivery == ML_DELIVER_FLAG && s.ran &&
		            s.flagged != (st == ML_CANCELLED),
		        73, "round %u: a FLAG task %s", i,
		        s.flagged ? "saw a cancellation but ended ML_OK"
		                  : "was cancelled but never saw it");
		cancelled += st == ML_CANCELLED;
		ok += st == ML_OK;
		ml_token_free(t);
	}
	stop_timer();
	tap_diag("%u signals, %u token sets, %u cancelled, %u ok",
	         atomic_load(&storm_signals), atomic_load(&storm_sets),
	         cancelled, ok);
	FAIL_IF(atomic_load(&storm_signals) < 50, 75, "too few signals");
	FAIL_IF(cancelled == 0, 76, "no task was ever cancelled");
	/* The heap is sound: glibc checks its lists on these. */
	for (int i = 0; i < 1000; i++)
		churn(i * 8);
	_exit(0);
}

/* Many threads in the slow path, signals aimed at all of them. */
static atomic_int storm_stop;
static void *storm_thread(void *arg)
{
	unsigned *bad = arg;
	while (!atomic_load(&storm_stop)) {
		ml_token *t = ml_token_new();
		ml_limits l = lim(64 << 10, ML_DELIVER_JUMP);
		l.token = t;
		struct storm_task s = {0};
		ml_status st = ml_run(&l, storm_nested, &s, NULL);
		if (st != ML_OK && st != ML_CANCELLED && st != ML_ALLOC_LIMIT)
			(*bad)++;
		ml_token_set(t);
		ml_token_free(t);
	}
	return NULL;
}

static void storm_threads_child(void *arg)
{
	(void)arg;
	struct sigaction sa = {0};
	sa.sa_handler = storm_handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGALRM, &sa, NULL);
	ml_set_sample_interval(64);
	enum { N = 4 };
	pthread_t th[N];
	unsigned bad[N] = {0};
	for (int i = 0; i < N; i++)
		FAIL_IF(pthread_create(&th[i], NULL, storm_thread, &bad[i]), 80,
		        "pthread_create");
	start_timer(50);
	struct timespec ts = {0, quick ? 100000000 : 500000000};
	/* Signals go to whichever thread runs: direct some at each. */
	for (int k = 0; k < (quick ? 20 : 200); k++) {
		for (int i = 0; i < N; i++)
			pthread_kill(th[i], SIGALRM);
		struct timespec s = {0, ts.tv_nsec / 200};
		/* not ordering: spreads the signals over the storm */
		nanosleep(&s, NULL);
	}
	/* not ordering: the storm's length */
	nanosleep(&ts, NULL);
	atomic_store(&storm_stop, 1);
	for (int i = 0; i < N; i++)
		pthread_join(th[i], NULL);
	stop_timer();
	for (int i = 0; i < N; i++)
		FAIL_IF(bad[i], 81, "thread %d: %u bad statuses", i, bad[i]);
	FAIL_IF(atomic_load(&storm_signals) < 50, 82, "too few signals");
	_exit(0);
}

/* ---- ml_token_set from a signal handler during a jump ----------------- */

static ml_token *outer_token;
static volatile int jump_handler_ran, cleanup_ran;

static void usr1_handler(int sig)
{
	(void)sig;
	ml_token_set(outer_token);
	jump_handler_ran++;
}

/* Runs while the library jumps from the inner task to its ml_run: the
 * signal comes in the middle of the jump. */
static void raise_in_cleanup(void *arg)
{
	(void)arg;
	cleanup_ran++;
	raise(SIGUSR1);
	/* Allocating here is allowed (masked): nothing is delivered. */
	churn(1000);
}

static void *inner_fn(void *arg)
{
	ml_cleanup_push(raise_in_cleanup, NULL);
	for (;;)
		churn(1000);
	return arg;
}

static void *outer_fn(void *arg)
{
	int *inner_status = arg;
	ml_limits in = lim(64 << 10, ML_DELIVER_JUMP);
	*inner_status = ml_run(&in, inner_fn, NULL, NULL);
	/* The outer task's token is now set: the next safe point jumps. */
	for (int i = 0; i < 1000000; i++)
		churn(100);
	ml_check();
	return NULL; /* not reached */
}

static void jump_signal_child(void *arg)
{
	(void)arg;
	signal(SIGUSR1, usr1_handler);
	ml_set_sample_interval(1024);
	for (int i = 0; i < (int)rounds(200); i++) {
		outer_token = ml_token_new();
		FAIL_IF(!outer_token, 90, "ml_token_new");
		ml_limits out_l = lim(ML_NO_LIMIT, ML_DELIVER_JUMP);
		out_l.token = outer_token;
		int inner = -99;
		jump_handler_ran = cleanup_ran = 0;
		ml_outcome out;
		ml_status st = ml_run(&out_l, outer_fn, &inner, &out);
		FAIL_IF(inner != ML_ALLOC_LIMIT, 91, "inner status %d", inner);
		FAIL_IF(cleanup_ran != 1 || jump_handler_ran != 1, 92,
		        "cleanup ran %d, handler %d times", cleanup_ran,
		        jump_handler_ran);
		FAIL_IF(st != ML_CANCELLED, 93, "outer status %d", st);
		FAIL_IF(ml_is_interrupted() || ml_is_masked(), 94,
		        "state left behind");
		ml_token_free(outer_token);
	}
	_exit(0);
}

/* ---- pthread_cancel of a thread inside a task ------------------------- */

static atomic_int cancel_ready;
static volatile int user_cleanup_ran;

static void user_cleanup(void *arg)
{
	(void)arg;
	user_cleanup_ran++;
}

/* Deferred cancellation acted on at pthread_testcancel, requested while
 * the thread allocates in the slow path of a nested task. */
static void *busy_task(void *arg)
{
	(void)arg;
	atomic_store(&cancel_ready, 1);
	for (;;) {
		for (int i = 0; i < 100; i++)
			churn(300);
		pthread_testcancel();
	}
	return NULL;
}

/* Blocked at a cancellation point (read on an empty pipe). */
static void *blocked_task(void *arg)
{
	int fd = *(int *)arg;
	char c;
	atomic_store(&cancel_ready, 1);
	for (;;)
		if (read(fd, &c, 1) < 0 && errno != EINTR)
			break;
	return NULL;
}

struct cancel_arg {
	bool blocked;
	int fd;
};

static void *nested_outer(void *arg)
{
	struct cancel_arg *a = arg;
	ml_cleanup_push(count_handler, NULL);
	ml_limits l = lim(ML_NO_LIMIT, ML_DELIVER_FAIL);
	ml_run(&l, a->blocked ? blocked_task : busy_task, &a->fd, NULL);
	return NULL;
}

static void *cancel_thread(void *arg)
{
	pthread_cleanup_push(user_cleanup, NULL);
	ml_limits l = lim((uint64_t)1 << 40, ML_DELIVER_JUMP);
	ml_run(&l, nested_outer, arg, NULL);
	pthread_cleanup_pop(0);
	return NULL;
}

static void cancel_child(void *arg)
{
	bool blocked = arg != NULL;
	int p[2];
	FAIL_IF(pipe(p), 100, "pipe");
	ml_set_sample_interval(256);
	int n = (int)rounds(100);
	for (int i = 0; i < n; i++) {
		struct cancel_arg a = {blocked, p[0]};
		pthread_t th;
		atomic_store(&cancel_ready, 0);
		FAIL_IF(pthread_create(&th, NULL, cancel_thread, &a), 101,
		        "pthread_create");
		while (!atomic_load(&cancel_ready))
			sched_yield();
		if (i % 2) {
			struct timespec ts = {0, 100000};
			/* not ordering: varies where the cancel lands */
			nanosleep(&ts, NULL);
		}
		FAIL_IF(pthread_cancel(th), 102, "pthread_cancel");
		void *r;
		FAIL_IF(pthread_join(th, &r), 103, "pthread_join");
		FAIL_IF(r != PTHREAD_CANCELED, 104, "not cancelled");
	}
	FAIL_IF(user_cleanup_ran != n, 105, "user cleanups ran %d of %d",
	        user_cleanup_ran, n);
	/* Our handlers cannot run (their frames are gone): never. */
	FAIL_IF(handler_runs, 106, "ml cleanup handlers ran");
	/* This thread and new threads run tasks as before. */
	ml_limits l = lim(64 << 10, ML_DELIVER_JUMP);
	ml_outcome out;
	FAIL_IF(ml_run(&l, spend_forever, NULL, &out) != ML_ALLOC_LIMIT, 107,
	        "a task after the cancellations");
	FAIL_IF(handler_runs != 1, 108, "its cleanup handler");
	pthread_t th;
	FAIL_IF(pthread_create(&th, NULL, pool_thread, NULL), 109, "thread");
	void *r;
	pthread_join(th, &r);
	FAIL_IF((intptr_t)r != ML_ALLOC_LIMIT, 110, "a new thread's task: %d",
	        (int)(intptr_t)r);
	_exit(0);
}

/* ---- exit() and _exit() while tasks run on other threads -------------- */

/* Rounds of the exit workers: the exit waits until they run. */
static atomic_uint exit_rounds;

static void *exit_worker(void *arg)
{
	long i = (long)arg;
	ml_token *t = ml_token_new();
	for (unsigned round = 0;; round++) {
		atomic_fetch_add(&exit_rounds, 1);
		ml_limits l = lim(16 << 10, (ml_delivery)((i + round) % 3));
		l.token = t;
		l.global = round % 2;
		struct storm_task s = {0};
		ml_run(&l, storm_nested, &s, NULL);
	}
	return NULL;
}

struct exit_arg {
	bool underscore; /* _exit rather than exit */
	bool from_task;  /* called by a worker inside its task */
};

static struct exit_arg *exit_how;
static void *exiting_task(void *arg)
{
	(void)arg;
	for (int i = 0; i < 2000; i++)
		churn(200);
	if (exit_how->underscore)
		_exit(7);
	exit(7);
}

static void *exiting_worker(void *arg)
{
	ml_limits l = lim((uint64_t)1 << 40, ML_DELIVER_JUMP);
	ml_run(&l, exiting_task, arg, NULL);
	return NULL;
}

static void exit_child(void *arg)
{
	exit_how = arg;
	ml_set_sample_interval(128);
	ml_set_global_memory_limit((uint64_t)1 << 40);
	pthread_t th[5];
	for (long i = 0; i < 4; i++)
		FAIL_IF(pthread_create(&th[i], NULL, exit_worker, (void *)i),
		        120, "pthread_create");
	/* Every worker in its loop (a wait on their rounds, not a nap). */
	while (atomic_load(&exit_rounds) < 8)
		sched_yield();
	if (exit_how->from_task) {
		FAIL_IF(pthread_create(&th[4], NULL, exiting_worker, NULL), 121,
		        "pthread_create");
		pthread_join(th[4], NULL); /* never returns */
		_exit(122);
	}
	if (exit_how->underscore)
		_exit(7);
	exit(7);
}

/* ---- Parent ----------------------------------------------------------- */

static void child_case(const char *name, int st, int want)
{
	tap_ok(st == want, "%s: child %s (%d)", name,
	       st == want ? "exited as expected"
	       : st < 0   ? "timed out"
	       : st > 128 ? "killed by a signal"
	                  : "failed check",
	       st);
}

#ifdef ML_FAULT_INJECTION
static const char *const fn_name[NFN] = {
    "malloc",        "calloc",   "realloc", "posix_memalign",
    "aligned_alloc", "memalign", "valloc",  "pvalloc"};

/* log P(X = k) for X ~ Binomial(n, p). */
static double log_pmf(unsigned n, unsigned k, double p)
{
	return lgamma(n + 1.0) - lgamma(k + 1.0) - lgamma(n - k + 1.0) +
	       k * log(p) + (n - k) * log1p(-p);
}

/* The acceptance interval [lo, hi] for X ~ Binomial(n, p): the exact
 * tails P(X < lo) and P(X > hi) are each at most alpha / 2. */
static void binomial_interval(unsigned n, double p, double alpha, unsigned *lo,
                              unsigned *hi)
{
	double tail = 0;
	unsigned k = 0;
	while (k < n && tail + exp(log_pmf(n, k, p)) <= alpha / 2)
		tail += exp(log_pmf(n, k++, p));
	*lo = k;
	for (tail = 0, k = n;
	     k > 0 && tail + exp(log_pmf(n, k, p)) <= alpha / 2;)
		tail += exp(log_pmf(n, k--, p));
	*hi = k;
}

/* Each function's failure count over RATE_CALLS calls, with N = 2 and
 * N = 10.  Were each call an independent failure with probability 1/N,
 * the count is Binomial(RATE_CALLS, 1/N); each of the 16 checks accepts
 * its exact two-sided interval of probability 1 - 1e-6 / 16, so a correct
 * injector fails the test with probability < 1e-6.  (The injector's
 * sequence is fixed, so the counts are the same on every run.) */
static void rate_cases(unsigned t)
{
	static const unsigned every[] = {2, 10};
	const double alpha = 1e-6 / (2 * NFN);
	for (int e = 0; e < 2; e++) {
		int fd[2];
		if (pipe(fd))
			tap_bail("pipe: %s", strerror(errno));
		char env[48], arg[16];
		snprintf(env, sizeof env, "MEMLIMITS_FAULT=libc:%u", every[e]);
		snprintf(arg, sizeof arg, "%d", fd[1]);
		struct reexec r = {"rate-child", {env}, arg, 0};
		int st = tap_child(do_reexec, &r, t);
		close(fd[1]);
		struct rate res[NFN] = {{0}};
		ssize_t got = read(fd[0], res, sizeof res);
		close(fd[0]);
		bool have = st == 0 && got == (ssize_t)sizeof res;
		if (!have)
			tap_diag(
			    "libc:%u: child status %d (-1: timed out), %zd "
			    "bytes of results",
			    every[e], st, got);
		unsigned lo, hi;
		binomial_interval(RATE_CALLS, 1.0 / every[e], alpha, &lo, &hi);
		for (int f = 0; f < NFN; f++) {
			const struct rate *x = &res[f];
			tap_ok(
			    have && x->calls == RATE_CALLS && x->fails >= lo &&
			        x->fails <= hi && !x->bad_errno &&
			        !x->misaligned && !x->bad_data,
			    "libc:%u: %s fails %u of %u calls (want %u..%u), "
			    "%u NULL without ENOMEM, %u misaligned, %u with "
			    "wrong contents; each block written whole",
			    every[e], fn_name[f], x->fails, x->calls, lo, hi,
			    x->bad_errno, x->misaligned, x->bad_data);
		}
	}
}
#endif

/* MEMLIMITS_FAULT=VALUE: what the child applied (diag_child's status) and
 * what it said on stderr.  A malformed value, and every value in a build
 * without the injector, changes nothing and gets exactly one line naming
 * the whole value; a valid one, with the injector, gets none. */
static void fault_diag_case(const char *value, bool valid, unsigned t)
{
	char env[128], want[128];
	snprintf(env, sizeof env, "MEMLIMITS_FAULT=%s", value);
	snprintf(want, sizeof want, "MEMLIMITS_FAULT=%s:", value);
	int fd[2];
	if (pipe(fd))
		tap_bail("pipe: %s", strerror(errno));
	struct reexec r = {"diag-child", {env}, NULL, fd[1]};
	int st = tap_child(do_reexec, &r, t);
	close(fd[1]);
	char buf[4096];
	size_t len = 0;
	ssize_t k;
	while (len < sizeof buf - 1 &&
	       (k = read(fd[0], buf + len, sizeof buf - 1 - len)) > 0)
		len += (size_t)k;
	buf[len] = 0;
	close(fd[0]);
	unsigned lines = 0;
	for (size_t i = 0; i < len; i++)
		lines += buf[i] == '\n';
	bool one = lines == 1 && buf[len - 1] == '\n';
#ifdef ML_FAULT_INJECTION
	if (valid) {
		tap_ok(len == 0 && st == 1,
		       "MEMLIMITS_FAULT='%s' (valid): applied (child status "
		       "%d, want 1: the pool is dry), %u line(s) on stderr",
		       value, st, lines);
		return;
	}
	const char *why = "malformed";
#else
	const char *why = valid ? "no injector in this build" : "malformed";
	if (valid)
		one = one && strstr(buf, "--enable-fault-injection");
#endif
	tap_ok(one && strstr(buf, want) && st == 0,
	       "MEMLIMITS_FAULT='%s' (%s): nothing applied (child status %d, "
	       "want 0), one line on stderr naming the whole value (%u "
	       "line(s)%s)",
	       value, why, st, lines,
	       strstr(buf, want) ? "" : ", the value not named");
	if (len)
		tap_diag("stderr: %.*s", (int)(len - (buf[len - 1] == '\n')),
		         buf);
}

int main(int argc, char **argv)
{
	const char *q = getenv("ML_TEST_QUICK");
	quick = q && *q && strcmp(q, "0");
	self_exe = argv[0];
	if (argc > 1) {
		if (!strcmp(argv[1], "libc-child"))
			libc_child();
		if (!strcmp(argv[1], "pool-child"))
			pool_child();
		if (!strcmp(argv[1], "pool-run-child"))
			pool_run_child();
		if (!strcmp(argv[1], "rate-child") && argc > 2)
			rate_child(argv[2]);
		if (!strcmp(argv[1], "realloc0-child"))
			realloc0_child();
		if (!strcmp(argv[1], "diag-child"))
			diag_child();
		tap_bail("unknown child '%s'", argv[1]);
	}
	unsigned t = quick ? 120 : 60;

#ifdef ML_FAULT_INJECTION
	static const struct reexec libc3 = {
	    .child = "libc-child",
	    .env = {"MEMLIMITS_FAULT=libc:3", "MEMLIMITS_SAMPLE_INTERVAL=512"}};
	child_case("libc:3 (each call into glibc fails with probability 1/3): "
	           "NULL with ENOMEM passed through, outside and inside "
	           "JUMP/FAIL/FLAG tasks (local and global, no limit and a "
	           "distant one) and a FAIL task nested in a JUMP one, never "
	           "an interruption, tasks ML_OK",
	           tap_child(do_reexec, (void *)&libc3, t), 0);
	static const struct reexec libc2 = {
	    .child = "libc-child", .env = {"MEMLIMITS_FAULT=libc:2,pool"}};
	child_case("libc:2 and a dry pool together: same",
	           tap_child(do_reexec, (void *)&libc2, t), 0);
	static const struct reexec pool = {.child = "pool-child",
	                                   .env = {"MEMLIMITS_FAULT=pool"}};
	child_case("pool dry: ml_token_new NULL, lost cleanup -> ML_ENOMEM, "
	           "tasks, threads and the meter work, no crash",
	           tap_child(do_reexec, (void *)&pool, t), 0);
	static const struct reexec poolrun = {
	    .child = "pool-run-child",
	    .env = {"MEMLIMITS_FAULT=pool", "MEMLIMITS_ALLOC_LIMIT=1G"}};
	child_case("pool dry in run mode (no root task can be made): the "
	           "program runs, no crash",
	           tap_child(do_reexec, (void *)&poolrun, t), 0);
	rate_cases(t);
	static const struct reexec realloc0 = {
	    .child = "realloc0-child", .env = {"MEMLIMITS_FAULT=libc:2"}};
	child_case("libc:2: realloc(p, 0) frees p, returns NULL, leaves errno "
	           "alone; realloc(NULL, 0) returns a block; never a failure, "
	           "never a hang (200 rounds)",
	           tap_child(do_reexec, (void *)&realloc0, t), 0);
#else
	tap_skip(4 + 2 * NFN + 1,
	         "built without --enable-fault-injection: MEMLIMITS_FAULT is "
	         "ignored");
#endif
	/* Malformed values (none may be applied in part), then a valid one. */
	static const char *const malformed[] = {
	    "",      "pool,garbage", "libc:1,garbage", "garbage,pool", "pool,",
	    ",pool", "libc:0",       "libc:",          "libc:3x"};
	for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; i++)
		fault_diag_case(malformed[i], false, t);
	fault_diag_case("pool", true, t);

	child_case("SIGALRM storm (50 us) while one thread allocates in the "
	           "slow path (S = 64); handler sets the task's token",
	           tap_child(storm_child, NULL, t), 0);
	child_case("SIGALRM storm over nested tasks jumping all the time",
	           tap_child(storm_child, (void *)1, t), 0);
	child_case("SIGALRM storm and pthread_kill over 4 threads in tasks",
	           tap_child(storm_threads_child, NULL, t), 0);
	child_case("ml_token_set from a signal handler during a jump (raised "
	           "inside the cleanup handler the jump runs)",
	           tap_child(jump_signal_child, NULL, t), 0);
	child_case("pthread_cancel (deferred) of threads allocating inside "
	           "nested tasks",
	           tap_child(cancel_child, NULL, t), 0);
	child_case("pthread_cancel of threads blocked at a cancellation point "
	           "inside nested tasks",
	           tap_child(cancel_child, (void *)1, t), 0);

	static struct exit_arg ex[] = {
	    {false, false}, {true, false}, {false, true}, {true, true}};
	static const char *const exname[] = {
	    "exit() on the main thread", "_exit() on the main thread",
	    "exit() from inside a task", "_exit() from inside a task"};
	for (int i = 0; i < 4; i++) {
		int bad = 0, n = (int)rounds(20);
		for (int k = 0; k < n; k++) {
			int st = tap_child(exit_child, &ex[i], t);
			if (st != 7) {
				tap_diag("round %d: status %d", k, st);
				bad++;
			}
		}
		tap_ok(!bad,
		       "%s while 4 threads run tasks: status 7 in %d of %d "
		       "runs",
		       exname[i], n - bad, n);
	}
	return tap_done();
}
