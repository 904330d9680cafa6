/* Shared budgets (issue 27; docs/shared.md): the stop latency across
 * processes and the overshoot at the stop.
 *
 *   shared-latency [RUNS [flag|jump|wait [LIMIT_MIB [HOLD_MIB]]]]
 *   shared-latency full
 *
 * Each run (a budget of its own, name unique per run) forks two members:
 *
 *   V joins, runs a global task (FLAG or JUMP delivery) that allocates and
 *     holds HOLD_MIB (40) in 1 MiB blocks, says so on a pipe, then loops:
 *     malloc a 512-byte block, free the oldest of 64 (so it reaches folds
 *     and safe points; its heap stays put).  FLAG: it polls
 *     ml_is_interrupted() at each turn; JUMP: it is stopped at its next
 *     fold and ml_run returns.  Either way it then reads CLOCK_MONOTONIC
 *     and ml_shared_usage() (its blocks still held) and sends both.
 *   C, started once V holds its blocks, joins, reads the members' total
 *     (ml_shared_usage()), then runs a global task that allocates 64 KiB
 *     blocks; the one after which that total plus its own bytes passes
 *     LIMIT_MIB (64) is the crossing: CLOCK_MONOTONIC there is sent.  It
 *     allocates one batch more (1 MiB: the batch of this limit, so that it
 *     publishes, as a member that keeps growing does) and waits.
 *
 * wait (issue 35): V, FLAG delivery, does not loop but waits in ppoll (a
 * process blocked in a system call, as a PostgreSQL backend in pg_sleep
 * or a lock wait): only the wake signal (ML_WAKE_DEFAULT,
 * ml_shared_set_wake(3)) ends the wait; V then reads the clock once
 * ml_is_interrupted() says so.
 *
 * full (issue 35): what an allocation costs a member that found the table
 * full.  An unnamed budget of 1024 slots; a child allocates 256 MiB in 32
 * KiB blocks (a fold each) with no other member, then with the last free
 * slot beside 1022 idle members, then once 1023 idle members hold every
 * slot; prints the three times in ms (0.3: 21 ms with a slot and 62.4 s
 * without, a failed claim retried at every fold).
 *
 * Latency = V's stop - C's crossing; overshoot = the total V reads at its
 * stop - the limit.  Prints one line per run (with -v) and a summary:
 * median and 99th percentile (nearest rank) of the latency in us, median
 * and max of the overshoot in MiB.  bench/run-shared.sh runs it. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memlimits.h"

#define MIB (1024 * 1024)
#define RING 64
#define SMALL 512
#define CHUNK (64 * 1024)
#define SPIN_NS (5ULL * 1000000000ULL) /* V gives up after 5 s */

static uint64_t limit_bytes;
static int hold_mib;
static ml_delivery delivery;

struct vres {
	int ok; /* 1: stopped with ML_GLOBAL_LIMIT */
	uint64_t t_stop, usage;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void write_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(3);
		c += w;
		n -= (size_t)w;
	}
}

static int read_all(int fd, void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t r = read(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

/* ---- V ------------------------------------------------------------------ */

/* Kept outside the task's frame: JUMP leaves it by longjmp. */
static void *volatile big[1024];
static void *volatile ring[RING];
static int v_ready_fd;
static volatile uint64_t v_t_stop;

static bool waiting;

static void *victim(void *arg)
{
	(void)arg;
	for (int i = 0; i < hold_mib; i++) {
		big[i] = malloc(MIB);
		if (!big[i])
			_exit(4);
	}
	char c = 'r';
	/* wait: the wake signal blocked until ppoll unblocks it, so that a wake
	 * before the wait is not lost. */
	sigset_t cont, none;
	sigemptyset(&cont);
	sigaddset(&cont, ML_WAKE_DEFAULT);
	sigprocmask(SIG_BLOCK, &cont, &none);
	sigdelset(&none, ML_WAKE_DEFAULT);
	if (!waiting)
		sigprocmask(SIG_SETMASK, &none, NULL);
	write_all(v_ready_fd, &c, 1);
	uint64_t start = now_ns();
	while (waiting) {
		struct timespec ts = {5, 0};
		ppoll(NULL, 0, &ts, &none);
		if (ml_is_interrupted()) {
			v_t_stop = now_ns();
			return NULL;
		}
		if (now_ns() - start > SPIN_NS)
			return NULL; /* never stopped */
	}
	for (unsigned long i = 0;; i++) {
		unsigned k = (unsigned)(i % RING);
		free(ring[k]);
		ring[k] = malloc(SMALL);
		if (delivery == ML_DELIVER_FLAG && ml_is_interrupted()) {
			v_t_stop = now_ns();
			return NULL;
		}
		if ((i & 1023) == 0 && now_ns() - start > SPIN_NS)
			return NULL; /* never stopped */
	}
}

static void run_victim(const char *name, int ready_fd, int res_fd)
{
	struct vres r = {0};
	if (ml_shared_join(name, limit_bytes) != ML_OK)
		_exit(2);
	v_ready_fd = ready_fd;
	ml_limits lim = ML_LIMITS_INIT;
	lim.global = true;
	lim.delivery = delivery;
	ml_outcome out;
	ml_status st = ml_run(&lim, victim, NULL, &out);
	if (delivery == ML_DELIVER_JUMP)
		v_t_stop = now_ns();
	r.t_stop = v_t_stop;
	r.usage = ml_shared_usage(); /* its blocks still held */
	r.ok = st == ML_GLOBAL_LIMIT;
	write_all(res_fd, &r, sizeof r);
	_exit(0);
}

/* ---- C ------------------------------------------------------------------ */

static int c_res_fd;
static uint64_t c_base;

static void *crosser(void *arg)
{
	(void)arg;
	uint64_t mine = 0, t_cross = 0, after = 0;
	for (;;) {
		void *p = malloc(CHUNK);
		if (!p)
			_exit(4);
		mine += CHUNK;
		if (!t_cross && c_base + mine > limit_bytes) {
			t_cross = now_ns();
			write_all(c_res_fd, &t_cross, sizeof t_cross);
		} else if (t_cross && (after += CHUNK) >= MIB) {
			break;
		}
	}
	return NULL; /* its blocks stay allocated */
}

static void run_crosser(const char *name, int res_fd, int wait_fd)
{
	if (ml_shared_join(name, limit_bytes) != ML_OK)
		_exit(2);
	c_res_fd = res_fd;
	c_base = ml_shared_usage();
	ml_limits lim = ML_LIMITS_INIT;
	lim.global = true;
	lim.delivery = ML_DELIVER_FLAG; /* not the one chosen; never stops */
	ml_run(&lim, crosser, NULL, NULL);
	char c;
	(void)read_all(wait_fd, &c, 1); /* held until the parent is done */
	_exit(0);
}

/* ---- the parent -------------------------------------------------------- */

/* ---- full: the cost of a member with no slot ----------------------------- */

static double alloc_ms(void)
{
	int p[2];
	if (pipe(p))
		_exit(1);
	pid_t pid = fork();
	if (pid == 0) {
		uint64_t t0 = now_ns();
		for (int i = 0; i < 256 * 32; i++) {
			void *volatile b = malloc(32 * 1024);
			if (!b)
				_exit(4);
		}
		double ms = (double)(now_ns() - t0) / 1e6;
		write_all(p[1], &ms, sizeof ms);
		_exit(0);
	}
	double ms = -1;
	close(p[1]);
	(void)read_all(p[0], &ms, sizeof ms);
	close(p[0]);
	waitpid(pid, NULL, 0);
	return ms;
}

/* n more idle members, each holding a slot until hold[1] closes. */
static int idle_members(pid_t *kids, int n, const int ready[2],
                        const int hold[2])
{
	int k = 0;
	for (; k < n; k++) {
		kids[k] = fork();
		if (kids[k] < 0)
			break;
		if (kids[k] == 0) {
			close(hold[1]);
			ml_check(); /* claims a slot */
			char c = 'r';
			write_all(ready[1], &c, 1);
			(void)read_all(hold[0], &c, 1);
			_exit(0);
		}
	}
	char c;
	for (int i = 0; i < k; i++)
		(void)read_all(ready[0], &c, 1);
	return k;
}

static int full(void)
{
	enum { SLOTS = 1024 };
	if (ml_shared_create((uint64_t)1 << 40, SLOTS) != ML_OK)
		return 1;
	/* Alone (the parent's slot only). */
	double alone_ms = alloc_ms();
	int ready[2], hold[2];
	if (pipe(ready) || pipe(hold))
		return 1;
	static pid_t kids[SLOTS];
	/* With a slot, the last free one, beside 1022 idle members: what
	 * the members cost a member that has a slot (its sums). */
	int n = idle_members(kids, SLOTS - 2, ready, hold);
	double slot_ms = alloc_ms();
	/* Full: one more idle member takes that slot (the measuring child
	 * has exited: its slot is swept), then a child finds none. */
	n += idle_members(kids + n, 1, ready, hold);
	double full_ms = alloc_ms();
	close(hold[1]);
	for (int i = 0; i < n; i++)
		waitpid(kids[i], NULL, 0);
	printf("full %d %.1f %.1f %.1f\n", n, alone_ms, slot_ms, full_ms);
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest value with at least p % of them at or below. */
static int64_t rank(const int64_t *v, int n, double p)
{
	int k = (int)((p / 100.0) * n + 0.999999);
	k = k < 1 ? 1 : k > n ? n : k;
	return v[k - 1];
}

static void reap(pid_t pid)
{
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "full"))
		return full();
	int runs = argc > 1 ? atoi(argv[1]) : 50;
	const char *mode = argc > 2 ? argv[2] : "flag";
	int limit_mib = argc > 3 ? atoi(argv[3]) : 64;
	hold_mib = argc > 4 ? atoi(argv[4]) : 40;
	bool verbose = getenv("SHARED_LATENCY_VERBOSE") != NULL;
	if (runs < 1 || limit_mib < 2 || hold_mib < 1 || hold_mib > 1000 ||
	    hold_mib >= limit_mib ||
	    (strcmp(mode, "flag") && strcmp(mode, "jump") &&
	     strcmp(mode, "wait"))) {
		fprintf(stderr, "usage: shared-latency [RUNS [flag|jump|wait "
		                "[LIMIT_MIB [HOLD_MIB]]]] | full\n");
		return 2;
	}
	delivery = strcmp(mode, "jump") ? ML_DELIVER_FLAG : ML_DELIVER_JUMP;
	waiting = !strcmp(mode, "wait");
	limit_bytes = (uint64_t)limit_mib * MIB;
	int64_t *lat = calloc((size_t)runs, sizeof *lat);
	int64_t *over = calloc((size_t)runs, sizeof *over);
	if (!lat || !over)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	int good = 0, failed = 0;
	for (int run = 0; run < runs; run++) {
		char name[64], path[128];
		snprintf(name, sizeof name, "latency.%d.%d", (int)getpid(),
		         run);
		snprintf(path, sizeof path, "/dev/shm/memlimits.%u.%s",
		         (unsigned)getuid(), name);
		int vready[2], vres[2], cres[2], cwait[2];
		if (pipe(vready) || pipe(vres) || pipe(cres) || pipe(cwait))
			return 1;
		pid_t v = fork();
		if (v < 0)
			return 1;
		if (v == 0) {
			alarm(20);
			run_victim(name, vready[1], vres[1]);
		}
		close(vready[1]);
		close(vres[1]);
		char c;
		struct vres r = {0};
		uint64_t t_cross = 0;
		pid_t cp = -1;
		if (read_all(vready[0], &c, 1) == 0) {
			cp = fork();
			if (cp < 0)
				return 1;
			if (cp == 0) {
				alarm(20);
				close(cwait[1]);
				run_crosser(name, cres[1], cwait[0]);
			}
		}
		close(cres[1]);
		close(cwait[0]);
		int ok = cp > 0 &&
		         read_all(cres[0], &t_cross, sizeof t_cross) == 0 &&
		         read_all(vres[0], &r, sizeof r) == 0 && r.ok;
		close(cwait[1]); /* C may end */
		reap(v);
		if (cp > 0)
			reap(cp);
		close(vready[0]);
		close(vres[0]);
		close(cres[0]);
		unlink(path);
		if (!ok) {
			failed++;
			if (verbose)
				printf("run %d: V not stopped\n", run);
			continue;
		}
		lat[good] = (int64_t)(r.t_stop - t_cross);
		over[good] = (int64_t)r.usage - (int64_t)limit_bytes;
		if (verbose)
			printf("run %d: latency %.1f us, overshoot %.2f MiB\n",
			       run, lat[good] / 1e3, over[good] / (double)MIB);
		good++;
	}
	if (!good) {
		printf("%s: no run stopped V (%d failed)\n", mode, failed);
		return 1;
	}
	qsort(lat, (size_t)good, sizeof *lat, cmp_i64);
	qsort(over, (size_t)good, sizeof *over, cmp_i64);
	printf("%s %d %d %.1f %.1f %.2f %.2f %.1f\n", mode, good, failed,
	       rank(lat, good, 50) / 1e3, rank(lat, good, 99) / 1e3,
	       rank(over, good, 50) / (double)MIB, over[good - 1] / (double)MIB,
	       lat[good - 1] / 1e3);
	return failed ? 1 : 0;
}
