/* The benchmark workloads behind `make bench` (bench/run-bench.sh drives
 * them, docs/performance.md explains the numbers).
 *
 * Built twice from this one file, so that the measured loops are the same
 * machine code in both: bench/ml-bench is linked with libmemlimits,
 * bench/glibc-bench (BENCH_GLIBC) is not and measures plain glibc.
 *
 *   pairs CONFIG N REPS [MAX]
 *                         N malloc/free pairs of 16-MAX bytes (default
 *                         144; make bench also runs 4096), REPS times;
 *                         CONFIG = idle | task | global | held | gidle
 *                         | heldgone | exact | interval | after (main()
 *                         says what each runs).  Prints the best ns per
 *                         pair.  Under callgrind run it with two N and
 *                         difference the totals: start-up cancels.
 *   slow DEPTH S N REPS   N pairs of malloc(1)/free inside DEPTH nested
 *                         tasks at sample interval S.  Prints the best ns
 *                         per pair and the samples credited per pair.
 *   slowcmp DEPTH N REPS  the same at S = 1 and S = 2^40 (never samples),
 *                         interleaved in one process; prints both.
 *   run M REPS            M ml_run calls of a task that does nothing;
 *                         prints the best ns per call.
 *   slice M REPS          M ml_task_run calls of an empty slice of one
 *                         task (same limits); the best ns per call.
 *   mmap M REPS           M mmap+munmap pairs of 1 MiB (private,
 *                         anonymous, writable, never touched); the best
 *                         ns per pair.  Both binaries: glibc-bench's is
 *                         the system calls alone (issue 34).
 *   mmaptask M REPS       the same inside a task (each pair samples).
 *   enter M REPS          M ml_task_enter + ml_task_leave pairs on the same
 *                         task with FAIL delivery (issue 37): what a
 *                         slice with no function costs; the best ns per
 *                         pair.
 *   enterdeep DEPTH M REPS
 *                         the same with DEPTH - 1 other tasks entered
 *                         under it (entered once, before the loop): what
 *                         a pair costs DEPTH deep (issue 41: a walk of
 *                         the stack at each enter made it grow with
 *                         DEPTH).
 *   trip KIND M REPS      M tasks that allocate 16 KiB blocks until a
 *                         1 MiB limit trips (JUMP): KIND = alloc | held.
 *                         The best mean ns from the tripping allocation
 *                         to ml_run's return (see trips() below).
 *
 * Every run starts from the same seed, so callgrind counts repeat. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#ifndef BENCH_GLIBC
#include "memlimits.h"
#endif

/* gcc deletes a malloc/free pair whose block is never used: publishing
 * the pointer keeps the calls. */
static void *volatile sink;

/* A fixed pseudo-random sequence of sizes, 16..144 bytes by default:
 * tcache-sized, like the small objects real programs churn through; 16..max
 * with pairs' MAX (make bench's second loop: 16..4096, where the sampler's
 * slow path comes about once per 39 pairs). */
#define NSIZES 4096
static unsigned short sizes[NSIZES];

static void init_sizes(unsigned max)
{
	uint32_t x = 12345;
	for (int i = 0; i < NSIZES; i++) {
		x = x * 1103515245u + 12345u; /* the ANSI C LCG: fixed */
		sizes[i] = (unsigned short)(16 + (x >> 16) % (max - 15));
	}
}

/* noinline: one copy of the loop, the same code in both binaries;
 * aligned: at the same offset in a cache line too, so that code placement
 * cannot favour one binary. */
static __attribute__((noinline, aligned(64))) void pairs(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		void *p = malloc(sizes[i & (NSIZES - 1)]);
		sink = p;
		free(p);
	}
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Best of reps: interruptions only ever add time. */
static double time_best(void (*loop)(uint64_t), uint64_t n, int reps)
{
	double best = 0;
	for (int r = 0; r < reps; r++) {
		double t0 = now_ns();
		loop(n);
		double dt = now_ns() - t0;
		if (r == 0 || dt < best)
			best = dt;
	}
	return n ? best / (double)n : 0;
}

static uint64_t arg_u64(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);
	if (*s == '\0' || *end != '\0') {
		fprintf(stderr, "bench: not a number: %s\n", s);
		exit(2);
	}
	return (uint64_t)v;
}

/* mmap+munmap pairs of 1 MiB: what counting a mapping costs (issue 34). */
static __attribute__((noinline)) void map_pairs(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		void *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		sink = p;
		munmap(p, 1 << 20);
	}
}

static void usage(void)
{
	fprintf(stderr,
	        "usage: bench pairs idle|task|global|held|gidle|heldgone|"
	        "exact|interval|after N REPS [MAX]\n"
	        "       bench mmap M REPS\n"
#ifndef BENCH_GLIBC
	        "       bench slow DEPTH S N REPS\n"
	        "       bench slowheld|slowstack DEPTH S N REPS\n"
	        "       bench heldmem S N\n"
	        "       bench slowcmp DEPTH N REPS\n"
	        "       bench run M REPS\n"
	        "       bench slice M REPS\n"
	        "       bench enterdeep DEPTH M REPS\n"
	        "       bench trip alloc|held M REPS\n"
#endif
	);
	exit(2);
}

#ifndef BENCH_GLIBC
/* One-byte blocks: with S = 1 a block holds a sample point with
 * probability 1 - 1/e, so most allocations take the slow path, and each
 * slow path carries few samples (as at the default S, where nearly every
 * slow path carries exactly one). */
static __attribute__((noinline)) void tiny_pairs(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++) {
		void *p = malloc(1);
		sink = p;
		free(p);
	}
}

/* Limits that never trip during a run: an allocation limit far above what
 * the loops allocate (it is still checked at every sample) and a token
 * that is never set (still polled at every sample). */
#define HUGE_BYTES ((uint64_t)1 << 50)

struct job {
	void (*loop)(uint64_t);
	uint64_t n;
	int reps;
	int depth; /* tasks still to open */
	bool global;
	ml_token *token;
	double ns;
};

/* The innermost task's extras (issue 16): an exact budget, its own
 * interval. */
static bool job_exact;
static uint64_t job_interval;

static void *run_job(void *arg)
{
	struct job *j = arg;
	if (j->depth > 0) {
		ml_limits l = ML_LIMITS_INIT;
		l.alloc_bytes = HUGE_BYTES;
		l.token = j->token;
		/* The outermost task carries the global limit. */
		l.global = j->global;
		j->global = false;
		j->depth--;
		if (j->depth == 0) {
			l.exact_alloc = job_exact;
			l.interval = job_interval;
		}
		ml_outcome out;
		if (ml_run(&l, run_job, j, &out) != ML_OK) {
			fprintf(stderr, "bench: a task tripped: %s\n",
			        ml_status_str(out.status));
			exit(1);
		}
		return NULL;
	}
	j->ns = time_best(j->loop, j->n, j->reps);
	return NULL;
}

/* Run the loop inside `depth` nested tasks; with `global`, a global limit
 * is set and the outermost task is subject to it. */
static double in_tasks(void (*loop)(uint64_t), uint64_t n, int reps, int depth,
                       bool global)
{
	struct job j = {loop, n, reps, depth, global, ml_token_new(), 0};
	if (!j.token) {
		fprintf(stderr, "bench: ml_token_new failed\n");
		exit(1);
	}
	if (global)
		ml_set_global_memory_limit(HUGE_BYTES);
	run_job(&j);
	if (global)
		ml_set_global_memory_limit(ML_NO_LIMIT);
	ml_token_free(j.token);
	return j.ns;
}

/* Samples the loop's allocations carry, from a task of its own. */
static double samples_per_pair(uint64_t s, uint64_t n)
{
	ml_limits l = ML_LIMITS_INIT;
	ml_outcome out;
	struct job j = {tiny_pairs, n, 1, 0, false, NULL, 0};
	ml_set_seed(1);
	ml_run(&l, run_job, &j, &out);
	return (double)out.allocated / (double)s / (double)n;
}

/* Resident bytes of this process (VmRSS). */
static double rss_bytes(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	double kb = 0;
	while (f && fgets(line, sizeof line, f))
		if (sscanf(line, "VmRSS: %lf kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb * 1024;
}

static void **held_blocks;
static void *hold_n(void *arg)
{
	uint64_t n = *(uint64_t *)arg;
	for (uint64_t i = 0; i < n; i++)
		held_blocks[i] = malloc(64);
	return NULL;
}

/* The growth of the resident set while a task allocates and holds n
 * blocks of 64 bytes: at S = 1 every block is tracked, at S = 2^40 none
 * is; the difference over n is the memory per tracked block. */
static double held_memory(uint64_t n)
{
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	held_blocks = calloc(n, sizeof *held_blocks);
	if (!t || !held_blocks)
		exit(1);
	memset(held_blocks, 1, n * sizeof *held_blocks);
	double before = rss_bytes();
	ml_task_run(t, hold_n, &n, NULL);
	double after = rss_bytes();
	ml_task_free(t);
	return after - before;
}

static void *nothing(void *arg)
{
	return arg;
}

static __attribute__((noinline)) void empty_tasks(uint64_t m)
{
	static ml_token *tok;
	if (!tok)
		tok = ml_token_new();
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = HUGE_BYTES;
	l.token = tok;
	for (uint64_t i = 0; i < m; i++)
		ml_run(&l, nothing, NULL, NULL);
}

/* The task of the slice rows: the run row's limit and token, made once
 * (kept for the process's life); FAIL delivery where enter needs it. */
static ml_task *row_task(bool fail)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = HUGE_BYTES;
	l.token = ml_token_new();
	if (fail)
		l.delivery = ML_DELIVER_FAIL;
	return ml_task_new(&l);
}

static __attribute__((noinline)) void empty_slices(uint64_t m)
{
	static ml_task *task;
	if (!task)
		task = row_task(false);
	for (uint64_t i = 0; i < m; i++)
		ml_task_run(task, nothing, NULL, NULL);
}

static __attribute__((noinline)) void empty_enters(uint64_t m)
{
	static ml_task *task;
	if (!task)
		task = row_task(true);
	for (uint64_t i = 0; i < m; i++) {
		ml_task_enter(task);
		ml_task_leave(task);
	}
}

/* empty_enters, DEPTH - 1 distinct entered tasks deep (enterdeep). */
static uint64_t enter_depth = 1;

static __attribute__((noinline)) void deep_enters(uint64_t m)
{
	static ml_task *task;
	static uint64_t under;
	if (!task)
		task = row_task(true);
	for (; under + 1 < enter_depth; under++)
		if (ml_task_enter(row_task(true)) != 0) {
			fprintf(stderr, "bench: ml_task_enter failed\n");
			exit(1);
		}
	for (uint64_t i = 0; i < m; i++) {
		ml_task_enter(task);
		ml_task_leave(task);
	}
}

/* Trips (issue 26): a task that allocates blocks of TRIP_BLOCK bytes and
 * keeps them until its limit, TRIP_LIMIT, trips at one of them (JUMP
 * delivery takes it back to ml_run; the blocks are freed after ml_run
 * returns).  By an allocation limit (KIND alloc) or a held limit (held):
 * the same allocations, the same sample points (the seed is reset before
 * each task); the held trip also has its tracked blocks to settle.  What
 * is measured runs from the start of the allocation that trips to
 * ml_run's return: the time of each allocation's start is kept, and
 * under callgrind the counts are zeroed before each allocation and
 * dumped when ml_run returns (one dump a trip: run-bench.sh takes the
 * median of them). */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define BENCH_CALLGRIND 1
#endif
#endif
#ifndef BENCH_CALLGRIND
#define CALLGRIND_ZERO_STATS
#define CALLGRIND_DUMP_STATS
#endif
#define TRIP_BLOCK 16384
#define TRIP_LIMIT ((uint64_t)1 << 20)
#define TRIP_MAX 4096 /* 64 MiB: never reached */
static ml_limits trip_limits;
static void *trip_blocks[TRIP_MAX];
static int ntrip;
static double trip_t0;

static void *trip_alloc(void *arg)
{
	while (ntrip < TRIP_MAX) {
		CALLGRIND_ZERO_STATS;
		trip_t0 = now_ns();
		void *p = malloc(TRIP_BLOCK);
		if (!p)
			break;
		memset(p, 1, 64);
		trip_blocks[ntrip++] = p;
	}
	return arg;
}

/* One trip; returns the ns from the tripping allocation's start to
 * ml_run's return. */
static double trip_once(ml_status want, const char *kind)
{
	ntrip = 0;
	ml_set_seed(1);
	ml_status st = ml_run(&trip_limits, trip_alloc, NULL, NULL);
	double dt = now_ns() - trip_t0;
	CALLGRIND_DUMP_STATS;
	for (int i = 0; i < ntrip; i++)
		free(trip_blocks[i]);
	if (st != want) {
		fprintf(stderr, "bench: trip %s: %s\n", kind,
		        ml_status_str(st));
		exit(1);
	}
	return dt;
}

/* M trips, REPS times: the best mean ns a trip. */
static double trips(const char *kind, uint64_t m, int reps)
{
	ml_limits l = ML_LIMITS_INIT;
	ml_status want;
	l.delivery = ML_DELIVER_JUMP;
	if (strcmp(kind, "alloc") == 0) {
		l.alloc_bytes = TRIP_LIMIT;
		want = ML_ALLOC_LIMIT;
	} else if (strcmp(kind, "held") == 0) {
		l.held_bytes = TRIP_LIMIT;
		want = ML_HELD_LIMIT;
	} else
		usage();
	trip_limits = l;
	double best = 0;
	for (int r = 0; r < reps; r++) {
		double sum = 0;
		for (uint64_t i = 0; i < m; i++)
			sum += trip_once(want, kind);
		if (r == 0 || sum / (double)m < best)
			best = sum / (double)m;
	}
	return best;
}
#endif

int main(int argc, char **argv)
{
	if (argc < 2)
		usage();
	if (strcmp(argv[1], "pairs") == 0 && argc == 6) {
		uint64_t max = arg_u64(argv[5]);
		if (max < 16 || max > 65535)
			usage();
		init_sizes((unsigned)max);
		argc--;
	} else
		init_sizes(144);
#ifndef BENCH_GLIBC
	ml_set_seed(1);
#endif
	if (strcmp(argv[1], "mmap") == 0 && argc == 4) {
		uint64_t m = arg_u64(argv[2]);
		map_pairs(100);
		printf("%.3f\n",
		       time_best(map_pairs, m, (int)arg_u64(argv[3])));
		return 0;
	}
#ifndef BENCH_GLIBC
	if (strcmp(argv[1], "mmaptask") == 0 && argc == 4) {
		uint64_t m = arg_u64(argv[2]);
		map_pairs(100);
		printf("%.3f\n",
		       in_tasks(map_pairs, m, (int)arg_u64(argv[3]), 1, false));
		return 0;
	}
#endif
	if (strcmp(argv[1], "pairs") == 0 && argc == 5) {
		uint64_t n = arg_u64(argv[3]);
		int reps = (int)arg_u64(argv[4]);
		pairs(10000); /* warm the caches, tcache and PLT */
		double ns;
		if (strcmp(argv[2], "idle") == 0)
			ns = time_best(pairs, n, reps);
#ifndef BENCH_GLIBC
		else if (strcmp(argv[2], "task") == 0)
			ns = in_tasks(pairs, n, reps, 1, false);
		else if (strcmp(argv[2], "global") == 0)
			ns = in_tasks(pairs, n, reps, 1, true);
		else if (strcmp(argv[2], "exact") == 0) {
			/* An exact budget: the fast path is unchanged; a
			 * 2^50-byte budget refills every 2^44 bytes. */
			job_exact = true;
			ns = in_tasks(pairs, n, reps, 1, false);
		} else if (strcmp(argv[2], "interval") == 0) {
			/* A task at a tenth of the process's interval. */
			job_interval = ml_sample_interval() / 10;
			ns = in_tasks(pairs, n, reps, 1, false);
		} else if (strcmp(argv[2], "after") == 0) {
			/* Idle again after such a task: nothing stays. */
			job_interval = ml_sample_interval() / 10;
			in_tasks(pairs, 10000, 1, 1, false);
			job_interval = 0;
			ns = time_best(pairs, n, reps);
		} else if (strcmp(argv[2], "held") == 0) {
			/* A live task object keeps held tracking on. */
			ml_limits l = ML_LIMITS_INIT;
			ml_task *keep = ml_task_new(&l);
			ns = in_tasks(pairs, n, reps, 1, false);
			ml_task_free(keep);
		} else if (strcmp(argv[2], "heldgone") == 0) {
			/* Idle after the last task object is gone (it recorded
			 * no block): tracking must not outlive it (issue 26).
			 */
			ml_limits l = ML_LIMITS_INIT;
			ml_task_free(ml_task_new(&l));
			ns = time_best(pairs, n, reps);
		} else if (strcmp(argv[2], "gidle") == 0) {
			/* A global limit set through the API, no task: the
			 * meter runs, held tracking need not (issue 26). */
			ml_set_global_limit(HUGE_BYTES);
			ns = time_best(pairs, n, reps);
			ml_set_global_limit(ML_NO_LIMIT);
		}
#endif
		else
			usage();
		printf("%.3f\n", ns);
		return 0;
	}
#ifndef BENCH_GLIBC
	if ((strcmp(argv[1], "slowheld") == 0 ||
	     strcmp(argv[1], "slowstack") == 0) &&
	    argc == 6) {
		/* The slow path with held tracking on (every sampled block
		 * recorded, found again at its free), and with stacks.  A
		 * live task object keeps tracking on (issue 26: it stops
		 * once the last one is gone); this one lives until exit. */
		ml_limits l = ML_LIMITS_INIT;
		if (!ml_task_new(&l)) {
			fprintf(stderr, "bench: ml_task_new failed\n");
			return 1;
		}
		if (argv[1][4] == 's' && ml_set_stack_capture(true) != 0) {
			fprintf(stderr, "bench: no stack capture here\n");
			return 1;
		}
		argv[1] = "slow";
	}
	if (strcmp(argv[1], "heldmem") == 0 && argc == 4) {
		ml_set_sample_interval(arg_u64(argv[2]));
		uint64_t n = arg_u64(argv[3]);
		printf("%.0f\n", held_memory(n));
		return 0;
	}
	if (strcmp(argv[1], "slow") == 0 && argc == 6) {
		int depth = (int)arg_u64(argv[2]);
		uint64_t s = arg_u64(argv[3]), n = arg_u64(argv[4]);
		int reps = (int)arg_u64(argv[5]);
		ml_set_sample_interval(s);
		ml_set_seed(1);
		double ns = in_tasks(tiny_pairs, n, reps, depth, depth > 1);
		printf("%.3f\n", ns);
		return 0;
	}
	if (strcmp(argv[1], "slowcmp") == 0 && argc == 5) {
		/* Alternate S = 1 and S = 2^40 so that both see the same
		 * machine load; the best of each is kept. */
		int depth = (int)arg_u64(argv[2]);
		uint64_t n = arg_u64(argv[3]);
		int reps = (int)arg_u64(argv[4]);
		double fast = 0, slow = 0;
		for (int r = 0; r < reps; r++) {
			ml_set_sample_interval((uint64_t)1 << 40);
			double f = in_tasks(tiny_pairs, n, 1, depth, depth > 1);
			ml_set_sample_interval(1);
			double s = in_tasks(tiny_pairs, n, 1, depth, depth > 1);
			if (r == 0 || f < fast)
				fast = f;
			if (r == 0 || s < slow)
				slow = s;
		}
		printf("%.3f %.3f %.4f\n", slow, fast, samples_per_pair(1, n));
		return 0;
	}
	if (strcmp(argv[1], "run") == 0 && argc == 4) {
		uint64_t m = arg_u64(argv[2]);
		int reps = (int)arg_u64(argv[3]);
		empty_tasks(1000);
		printf("%.3f\n", time_best(empty_tasks, m, reps));
		return 0;
	}
	if (strcmp(argv[1], "slice") == 0 && argc == 4) {
		uint64_t m = arg_u64(argv[2]);
		int reps = (int)arg_u64(argv[3]);
		empty_slices(1000);
		printf("%.3f\n", time_best(empty_slices, m, reps));
		return 0;
	}
	if (strcmp(argv[1], "enter") == 0 && argc == 4) {
		uint64_t m = arg_u64(argv[2]);
		int reps = (int)arg_u64(argv[3]);
		empty_enters(1000);
		printf("%.3f\n", time_best(empty_enters, m, reps));
		return 0;
	}
	if (strcmp(argv[1], "enterdeep") == 0 && argc == 5) {
		enter_depth = arg_u64(argv[2]);
		uint64_t m = arg_u64(argv[3]);
		int reps = (int)arg_u64(argv[4]);
		deep_enters(1000);
		printf("%.3f\n", time_best(deep_enters, m, reps));
		return 0;
	}
	if (strcmp(argv[1], "trip") == 0 && argc == 5) {
		uint64_t m = arg_u64(argv[3]);
		int reps = (int)arg_u64(argv[4]);
		printf("%.3f\n", trips(argv[2], m, reps));
		return 0;
	}
#endif
	usage();
}
