/* The thread-scaling workload behind `make bench-threads` (issue 17;
 * bench/run-threads.sh drives it and prints the table).
 *
 *   threads-bench MODE THREADS ITERS
 *
 * THREADS threads each keep LIVE blocks and, ITERS times, free one of them
 * and allocate a block of pseudo-random size in its place: mostly 16-512
 * bytes, one in 64 of 1-64 KiB, so that the allocator's thread caches,
 * its arenas and the library's sampling all see a mixed, churning heap.
 * Prints one line, "THREADS<TAB>SECONDS": the wall clock from the first
 * thread's start to the last one's end.
 *
 * MODE:
 *   none   the loop alone, and libmemlimits must not be loaded: plain
 *          glibc, or another allocator preloaded alone;
 *   idle   the loop alone, and libmemlimits must be preloaded and
 *          interposed (with MEMLIMITS_* settings this is run mode);
 *   run    each thread runs its loop in ml_run: an allocation limit of
 *          2^50 bytes, global = true under a global limit of 2^50 bytes,
 *          a token of its own that is never set;
 *   held   as run, plus a held limit (ml_limits.held_bytes) of 2^50;
 *   slice  one task object (ml_task_new) with run's limits and one token,
 *          shared by all the threads: each runs its loop as a slice of it
 *          (ml_task_run), so every sample is credited to the one task.
 *
 * This program is never linked with the library: the library's functions
 * are looked up with dlsym(RTLD_DEFAULT), so that one binary is both the
 * glibc baseline and, under LD_PRELOAD=libmemlimits.so, every library
 * configuration, and the measured loop is the same machine code in all of
 * them.  dlsym without a version finds a symbol's default version, the
 * newest: the one whose ml_limits layout is the header's in this tree.
 *
 * No limit may trip: a task interrupted, or a slice that did not run,
 * makes the program exit 1 with a message instead of printing a time. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <memlimits.h>

/* Blocks each thread keeps alive: enough that frees land in a different
 * place than the last allocation, few enough to stay in the caches. */
#define LIVE 256

/* Limits that never trip (the loop allocates far less), but are checked at
 * every sample all the same. */
#define HUGE_BYTES ((uint64_t)1 << 50)

/* Cap on THREADS: a typo should not start a million threads. */
#define MAX_THREADS 1024

enum mode { MODE_NONE, MODE_IDLE, MODE_RUN, MODE_HELD, MODE_SLICE };

static const char *const mode_names[] = {"none", "idle", "run", "held",
                                         "slice"};

/* The library's entry points, found at run time; NULL when it is not
 * loaded. */
static ml_status (*p_run)(const ml_limits *, void *(*)(void *), void *,
                          ml_outcome *);
static ml_task *(*p_task_new)(const ml_limits *);
static ml_status (*p_task_run)(ml_task *, void *(*)(void *), void *,
                               ml_outcome *);
static ml_status (*p_task_status)(const ml_task *);
static void (*p_task_free)(ml_task *);
static ml_token *(*p_token_new)(void);
static void (*p_token_free)(ml_token *);
static int (*p_set_global)(uint64_t);
static unsigned (*p_capabilities)(void);
static const char *(*p_status_str)(ml_status);

static uint64_t iters;
static enum mode mode;
static ml_task *shared_task; /* MODE_SLICE */

struct worker {
	pthread_t thread;
	unsigned id; /* seeds the thread's size sequence */
	ml_token *token;
	ml_status status;
	bool ran; /* the loop ran to its end */
};

/* dlsym into a function pointer: POSIX guarantees the conversion, ISO C
 * does not, hence the copy through memcpy. */
#define LOOKUP(ptr, name)                               \
	do {                                            \
		void *sym_ = dlsym(RTLD_DEFAULT, name); \
		memcpy(&(ptr), &sym_, sizeof(ptr));     \
	} while (0)

static void find_library(void)
{
	LOOKUP(p_run, "ml_run");
	LOOKUP(p_task_new, "ml_task_new");
	LOOKUP(p_task_run, "ml_task_run");
	LOOKUP(p_task_status, "ml_task_status");
	LOOKUP(p_task_free, "ml_task_free");
	LOOKUP(p_token_new, "ml_token_new");
	LOOKUP(p_token_free, "ml_token_free");
	LOOKUP(p_set_global, "ml_set_global_memory_limit");
	LOOKUP(p_capabilities, "ml_capabilities");
	LOOKUP(p_status_str, "ml_status_str");
}

static const char *status_str(ml_status s)
{
	return p_status_str ? p_status_str(s) : "?";
}

/* The measured loop.  noinline: one copy of it, called the same way in
 * every mode; aligned: at the same place in a cache line whatever the
 * code around it.  Each thread's sizes come from the same LCG (Knuth's
 * MMIX constants) seeded by its id, so every run of every configuration
 * allocates the same sequence. */
static __attribute__((noinline, aligned(64))) void churn(unsigned id)
{
	uint64_t x = 0x9E3779B97F4A7C15ull * id + 12345;
	void **slot = calloc(LIVE, sizeof *slot);
	if (!slot) {
		fprintf(stderr, "threads-bench: out of memory\n");
		exit(1);
	}
	for (uint64_t i = 0; i < iters; i++) {
		x = x * 6364136223846793005ull + 1442695040888963407ull;
		uint32_t r = (uint32_t)(x >> 33);
		size_t n = (r & 63) == 0 ? 1024 + (r >> 6) % 65536
		                         : 16 + (r >> 6) % 497;
		uint32_t k = (r >> 8) % LIVE;
		free(slot[k]);
		char *p = malloc(n);
		if (!p) {
			fprintf(stderr, "threads-bench: malloc(%zu) failed\n",
			        n);
			exit(1);
		}
		/* A write, so that the block is used and the pair cannot
		 * be folded away. */
		p[0] = (char)i;
		slot[k] = p;
	}
	for (uint32_t k = 0; k < LIVE; k++)
		free(slot[k]);
	free(slot);
}

static void *loop_fn(void *arg)
{
	struct worker *w = arg;
	churn(w->id);
	w->ran = true;
	return NULL;
}

static void *thread_main(void *arg)
{
	struct worker *w = arg;
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = HUGE_BYTES;
	l.global = true;
	switch (mode) {
	case MODE_NONE:
	case MODE_IDLE:
		loop_fn(w);
		break;
	case MODE_HELD:
		l.held_bytes = HUGE_BYTES;
		/* fall through */
	case MODE_RUN:
		l.token = w->token;
		w->status = p_run(&l, loop_fn, w, NULL);
		break;
	case MODE_SLICE:
		w->status = p_task_run(shared_task, loop_fn, w, NULL);
		break;
	}
	return NULL;
}

static uint64_t arg_u64(const char *s, const char *what)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (*s == '\0' || *end != '\0' || errno || s[0] == '-') {
		fprintf(stderr, "threads-bench: bad %s: %s\n", what, s);
		exit(2);
	}
	return (uint64_t)v;
}

static void usage(void)
{
	fprintf(stderr, "usage: threads-bench none|idle|run|held|slice "
	                "THREADS ITERS\n");
	exit(2);
}

/* The library must be there (and own the malloc family) exactly when the
 * mode says so: a misspelt LD_PRELOAD is only a warning from the loader,
 * and would otherwise be measured as glibc. */
static void check_library(void)
{
	if (mode == MODE_NONE) {
		if (p_capabilities) {
			fprintf(stderr, "threads-bench: mode none, but "
			                "libmemlimits is loaded\n");
			exit(1);
		}
		return;
	}
	if (!p_capabilities || !p_run || !p_task_new || !p_task_run ||
	    !p_task_status || !p_task_free || !p_token_new || !p_token_free ||
	    !p_set_global || !p_status_str) {
		fprintf(stderr,
		        "threads-bench: mode %s needs libmemlimits "
		        "(LD_PRELOAD=.../libmemlimits.so)\n",
		        mode_names[mode]);
		exit(1);
	}
	if (!(p_capabilities() & ML_CAP_INTERPOSED)) {
		fprintf(stderr, "threads-bench: libmemlimits is loaded but "
		                "not interposed on malloc\n");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	if (argc != 4)
		usage();
	size_t m;
	for (m = 0; m < sizeof mode_names / sizeof *mode_names; m++)
		if (strcmp(argv[1], mode_names[m]) == 0)
			break;
	if (m == sizeof mode_names / sizeof *mode_names)
		usage();
	mode = (enum mode)m;
	uint64_t nthreads = arg_u64(argv[2], "THREADS");
	iters = arg_u64(argv[3], "ITERS");
	if (nthreads < 1 || nthreads > MAX_THREADS) {
		fprintf(stderr, "threads-bench: THREADS must be 1..%d\n",
		        MAX_THREADS);
		return 2;
	}
	find_library();
	check_library();

	/* Everything but the threads' work is set up before the clock
	 * starts: the workers, their tokens, the global limit, the task. */
	struct worker *w = calloc(nthreads, sizeof *w);
	ml_token *slice_token = NULL;
	if (!w) {
		fprintf(stderr, "threads-bench: out of memory\n");
		return 1;
	}
	if (mode >= MODE_RUN)
		p_set_global(HUGE_BYTES);
	for (uint64_t i = 0; i < nthreads; i++) {
		w[i].id = (unsigned)i + 1;
		w[i].status = ML_OK;
		if ((mode == MODE_RUN || mode == MODE_HELD) &&
		    !(w[i].token = p_token_new())) {
			fprintf(stderr, "threads-bench: ml_token_new failed\n");
			return 1;
		}
	}
	if (mode == MODE_SLICE) {
		ml_limits l = ML_LIMITS_INIT;
		l.alloc_bytes = HUGE_BYTES;
		l.global = true;
		l.token = slice_token = p_token_new();
		if (!slice_token || !(shared_task = p_task_new(&l))) {
			fprintf(stderr, "threads-bench: ml_task_new failed\n");
			return 1;
		}
	}

	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (uint64_t i = 0; i < nthreads; i++) {
		int e = pthread_create(&w[i].thread, NULL, thread_main, &w[i]);
		if (e) {
			fprintf(stderr, "threads-bench: pthread_create: %s\n",
			        strerror(e));
			return 1;
		}
	}
	for (uint64_t i = 0; i < nthreads; i++)
		pthread_join(w[i].thread, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);

	int bad = 0;
	for (uint64_t i = 0; i < nthreads; i++)
		if (w[i].status != ML_OK || !w[i].ran) {
			fprintf(
			    stderr,
			    "threads-bench: %s: thread %u interrupted: %s\n",
			    mode_names[mode], w[i].id,
			    w[i].status != ML_OK ? status_str(w[i].status)
			                         : "did not finish");
			bad = 1;
		}
	if (mode == MODE_SLICE) {
		ml_status s = p_task_status(shared_task);
		if (s != ML_OK) {
			fprintf(stderr, "threads-bench: slice: task %s\n",
			        status_str(s));
			bad = 1;
		}
		p_task_free(shared_task);
		p_token_free(slice_token);
	}
	for (uint64_t i = 0; i < nthreads; i++)
		if (w[i].token)
			p_token_free(w[i].token);
	free(w);
	if (bad)
		return 1;
	double s = (double)(t1.tv_sec - t0.tv_sec) +
	           (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%llu\t%.6f\n", (unsigned long long)nthreads, s);
	return 0;
}
