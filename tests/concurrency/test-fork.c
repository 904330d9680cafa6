/* fork while other threads are inside the library, in run mode.
 *
 * Every lock the library owns must be held around fork (lib/util/forklock.c):
 * a child inherits a lock held by a thread that does not exist there, and
 * hangs the first time it takes it.  Here 4 threads allocate in run mode
 * with stack capture (a limit, a profile, a report), statistics and a small
 * sample interval, start short-lived threads (pool slots for their root
 * tasks and statistics) and use tokens and cleanup records (the other
 * pools), while the main thread forks FORKS times.  Each child allocates
 * (each sample captures a stack), starts a thread, and exits through
 * exit(), which writes its report, profile and statistics, its own: not
 * its parent's threads, nor a peak snapshot one of them was taking (the
 * child that inherited it waited for it for ever).  No child may hang or
 * fail.
 *
 * Run mode is set up by re-executing this program with MEMLIMITS_*
 * variables, as `memlimits run` would. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "memlimits.h"
#include "../tap/tap.h"

#define NTHREADS 4
#define FORKS 300
#define CHILD_TIMEOUT 60 /* a hang limit only: a child needs milliseconds */

static _Thread_local void *volatile sink;
static atomic_int stop;
static atomic_int worker_bad;

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void churn(uint64_t *rng, int rounds)
{
	for (int i = 0; i < rounds; i++) {
		size_t n = (size_t)(xorshift(rng) % 4000) + 1;
		char *p = malloc(n);
		if (!p) {
			atomic_fetch_add(&worker_bad, 1);
			continue;
		}
		memset(p, 1, n);
		sink = p;
		free(p);
	}
}

static void nothing(void *arg)
{
	(void)arg;
}

static void *short_lived(void *arg)
{
	uint64_t rng = (uintptr_t)arg | 1;
	churn(&rng, 20);
	return NULL;
}

/* Rounds of the workers, all together: a fork waits for new ones. */
static atomic_uint laps;

static void *worker(void *arg)
{
	uint64_t rng = 0x9e3779b97f4a7c15u * ((uintptr_t)arg + 1);
	for (unsigned round = 0; !atomic_load(&stop); round++) {
		atomic_fetch_add(&laps, 1);
		churn(&rng, 64);
		ml_token *t = ml_token_new();
		ml_cleanup_push(nothing, NULL);
		ml_cleanup_pop(false);
		ml_token_free(t);
		{
			pthread_t th;
			if (pthread_create(&th, NULL, short_lived,
			                   (void *)(uintptr_t)round) == 0)
				pthread_join(th, NULL);
			else
				atomic_fetch_add(&worker_bad, 1);
		}
	}
	return NULL;
}

static void child(void *arg)
{
	(void)arg;
	uint64_t rng = (uint64_t)getpid() * 0x2545f4914f6cdd1du | 1;
	/* 64 KiB at a 4 KiB interval: about 16 samples, a stack each. */
	churn(&rng, 32);
	pthread_t th;
	if (pthread_create(&th, NULL, short_lived, NULL) ||
	    pthread_join(th, NULL))
		_exit(20);
	ml_token *t = ml_token_new();
	if (!t)
		_exit(21);
	ml_token_free(t);
	exit(0); /* destructors: report, profile, statistics */
}

static int count_stats_files(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += strncmp(e->d_name, "memlimits.", 10) == 0;
	closedir(d);
	return n;
}

/* The "threads" of the one statistics file in dir (-1: none read).  A
 * child's own are two, its thread and the one it starts: the parent's
 * workers are not its (a child that kept its parent's statistics
 * counted them too). */
static long stats_threads(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return -1;
	long n = -1;
	struct dirent *e;
	char path[8192], buf[4096];
	while ((e = readdir(d)))
		if (strncmp(e->d_name, "memlimits.", 10) == 0 &&
		    (size_t)snprintf(path, sizeof path, "%s/%s", dir,
		                     e->d_name) < sizeof path) {
			FILE *f = fopen(path, "r");
			size_t k = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
			if (f)
				fclose(f);
			buf[k] = 0;
			const char key[] = "\"threads\": ";
			const char *t = strstr(buf, key);
			if (t)
				n = strtol(t + sizeof key - 1, NULL, 10);
		}
	closedir(d);
	return n;
}

static void remove_files(const char *dir)
{
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	char path[8192];
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
		    (size_t)snprintf(path, sizeof path, "%s/%s", dir,
		                     e->d_name) < sizeof path)
			unlink(path);
	closedir(d);
}

static long file_size(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static bool under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");
	return p && strstr(p, "/vgpreload_");
}

/* Run the test in a child with run mode set up, as `memlimits run` would,
 * and clean up after it. */
static int run_in_run_mode(char **argv)
{
	char dir[4096], stats[4200], profile[4200], report[4200];
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if ((size_t)snprintf(dir, sizeof dir, "%s/ml-fork.XXXXXX", tmp) >=
	        sizeof dir ||
	    !mkdtemp(dir))
		tap_bail("cannot make a temporary directory under %s", tmp);
	snprintf(stats, sizeof stats, "%s/stats", dir);
	snprintf(profile, sizeof profile, "%s/profile", dir);
	snprintf(report, sizeof report, "%s/report", dir);
	if (mkdir(stats, 0700) != 0)
		tap_bail("cannot make %s", stats);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("TEST_FORK_DIR", dir, 1);
		/* A limit no one reaches: root tasks on every thread, a
		 * stack captured at every sample.  (1 TiB was reached: on a
		 * loaded machine the 300 forks took 512 s, while the four
		 * workers churned through 1 TiB of small blocks.) */
		setenv("MEMLIMITS_ALLOC_LIMIT", "9223372036854775808", 1);
		setenv("MEMLIMITS_PROFILE", profile, 1);
		setenv("MEMLIMITS_REPORT", report, 1);
		setenv("MEMLIMITS_STATS_DIR", stats, 1);
		setenv("MEMLIMITS_SAMPLE_INTERVAL", "4096", 1);
		/* argv[0], not /proc/self/exe: under valgrind that is the
		 * tool, and this re-run is native (no --trace-children). */
		execv(strchr(argv[0], '/') ? argv[0] : "/proc/self/exe", argv);
		tap_bail("cannot re-execute: %s", strerror(errno));
	}
	int st = 1;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	remove_files(stats);
	rmdir(stats);
	remove_files(dir);
	rmdir(dir);
	if (pid < 0)
		tap_bail("fork failed");
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int main(int argc, char **argv)
{
	(void)argc;
	if (under_valgrind()) {
		/* The run-mode re-run would be native (valgrind does not
		 * follow exec here); under memcheck children report the absent
		 * threads' blocks as lost, and 300 forks take minutes. */
		tap_skip(4, "fork while threads allocate: under valgrind");
		return tap_done();
	}
	const char *dir = getenv("TEST_FORK_DIR");
	if (!dir)
		return run_in_run_mode(argv);
	char stats[4096], profile[4096];
	snprintf(stats, sizeof stats, "%s/stats", dir);
	snprintf(profile, sizeof profile, "%s/profile", dir);

	pthread_t th[NTHREADS];
	for (int i = 0; i < NTHREADS; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i))
			tap_bail("pthread_create failed");
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int forks = 0, hung = 0, bad = 0, first = 0, unwritten = 0;
	int others = 0;
	long first_threads = 0;
	for (int i = 0; i < FORKS; i++) {
		/* The workers under way: as many new rounds as threads since
		 * the last fork (a wait on them, not a nap). */
		unsigned want = atomic_load(&laps) + NTHREADS;
		while (atomic_load(&laps) < want)
			sched_yield();
		int st = tap_child(child, NULL, CHILD_TIMEOUT);
		forks++;
		if (st == -1) {
			hung++;
			break; /* one is enough: each costs the whole timeout */
		}
		if (st != 0 && !bad++)
			first = st;
		/* One statistics file per child.  Removed at once: pids wrap
		 * (the workers' threads use them up), and a later child with
		 * the same pid would overwrite it. */
		unwritten += st == 0 && count_stats_files(stats) != 1;
		if (st == 0) {
			long n = stats_threads(stats);
			if (n != 2 && !others++)
				first_threads = n;
		}
		remove_files(stats);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	atomic_store(&stop, 1);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);

	tap_ok(hung == 0,
	       "%d forks while %d threads allocate in run mode: %d "
	       "child hung",
	       forks, NTHREADS, hung);
	tap_ok(bad == 0 && atomic_load(&worker_bad) == 0,
	       "every child worked: %d failed (first status %d), %d worker "
	       "failures",
	       bad, first, atomic_load(&worker_bad));
	/* Run mode was on in the children: each wrote its statistics, and
	 * the profile has their stacks. */
	tap_ok(unwritten == 0 && file_size(profile) > 0,
	       "each child wrote its statistics (%d did not), the profile has "
	       "stacks (%ld bytes)",
	       unwritten, file_size(profile));
	tap_ok(others == 0,
	       "each child's statistics are its own: 2 threads (%d said "
	       "otherwise, the first %ld)",
	       others, first_threads);
	tap_diag("%d forks in %.2f s", forks,
	         (double)(t1.tv_sec - t0.tv_sec) +
	             (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	return tap_done();
}
