/* ml_write_metrics (issue 29): the counts are exact (two allocation-limit
 * stops and one held-limit stop print 2 and 1), tasks started count ml_run
 * calls and task objects (not slices), threads' counts are summed (exited
 * threads' included), and the text is well-formed Prometheus 0.0.4 (HELP
 * and TYPE before each family, no family twice).  Each case runs in a
 * child: a fork starts its counts from zero.
 *
 * `test-metrics print` writes the metrics after the three stops to stdout,
 * for test-metrics-promtool.sh. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <memlimits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap/tap.h"

/* The metrics as text, in buf[cap]. */
static char text[16384];
static const char *metrics(void)
{
	char name[] = "/tmp/ml-metrics.XXXXXX";
	int fd = mkstemp(name);
	if (fd < 0)
		tap_bail("mkstemp: %s", strerror(errno));
	unlink(name);
	int rc = ml_write_metrics(fd);
	if (rc != 0)
		tap_bail("ml_write_metrics: %d (%s)", rc, strerror(errno));
	ssize_t n = pread(fd, text, sizeof text - 1, 0);
	close(fd);
	text[n > 0 ? n : 0] = 0;
	return text;
}

/* The value of the sample line "series value"; -1 when absent. */
static long long value(const char *series)
{
	size_t len = strlen(series);
	for (const char *p = metrics(); *p;) {
		const char *e = strchr(p, '\n');
		if (!e)
			break;
		if (!strncmp(p, series, len) && p[len] == ' ')
			return strtoll(p + len + 1, NULL, 10);
		p = e + 1;
	}
	return -1;
}

/* ---- The three stops ---------------------------------------------------- */

static _Thread_local void *volatile sink;
#define LEAK_MAX 100000
static void *leaked[LEAK_MAX];
static int nleaked;

static void *grow(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000000; i++) {
		void *p = malloc(1000);
		if (!p)
			break;
		sink = p;
		free(p);
	}
	return NULL;
}

static void *leak(void *arg)
{
	(void)arg;
	while (nleaked < LEAK_MAX) {
		void *p = malloc(10000);
		if (!p)
			break;
		leaked[nleaked++] = p;
	}
	return NULL;
}

static bool three_stops(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20; /* 1 GB through: never misses 1 MiB */
	bool ok = ml_run(&l, grow, NULL, NULL) == ML_ALLOC_LIMIT;
	ok &= ml_run(&l, grow, NULL, NULL) == ML_ALLOC_LIMIT;
	l = (ml_limits)ML_LIMITS_INIT;
	l.held_bytes = 1 << 20;
	l.delivery = ML_DELIVER_FAIL;
	nleaked = 0;
	ok &= ml_run(&l, leak, NULL, NULL) == ML_HELD_LIMIT;
	for (int i = 0; i < nleaked; i++)
		free(leaked[i]);
	return ok;
}

static void test_stops(void)
{
	tap_ok(three_stops(),
	       "two allocation-limit stops, one held-limit stop");
	tap_is(
	    value("memlimits_tasks_interrupted_total{reason=\"alloc_limit\"}"),
	    2, "alloc_limit 2");
	tap_is(
	    value("memlimits_tasks_interrupted_total{reason=\"held_limit\"}"),
	    1, "held_limit 1");
	tap_is(value("memlimits_tasks_interrupted_total{reason=\"global_"
	             "limit\"}"),
	       0, "global_limit 0");
	tap_is(value("memlimits_tasks_interrupted_total{reason=\"cancelled\"}"),
	       0, "cancelled 0");
	tap_is(value("memlimits_tasks_started_total"), 3, "3 tasks started");
	/* Each stop takes k = ceil(2^20 / 80000) = 14 samples, so at least
	 * 42.  More only from the stops' last allocations (1000 and 10000
	 * bytes: Poisson(< 1/8) extra each) and the few allocations outside
	 * the tasks: P(10 or more) < 1e-9 for a Poisson of mean 0.5. */
	long long samples = value("memlimits_samples_total");
	tap_ok(samples >= 42 && samples < 52,
	       "samples counted (%lld: 3 stops of 14, and a few more)",
	       samples);
	/* A cancelled task (its token set before: it does not run). */
	ml_token *tok = ml_token_new();
	ml_token_set(tok);
	ml_task *t =
	    ml_task_new(&(ml_limits){.alloc_bytes = ML_NO_LIMIT, .token = tok});
	tap_is(ml_task_run(t, grow, NULL, NULL), ML_CANCELLED,
	       "a task whose token is set");
	tap_is(value("memlimits_tasks_interrupted_total{reason=\"cancelled\"}"),
	       1, "cancelled 1");
	ml_task_free(t);
	ml_token_free(tok);
}

/* ---- Started: ml_run calls and task objects, not slices ----------------- */

static void *nothing(void *arg)
{
	return arg;
}

static void test_started(void)
{
	ml_limits l = ML_LIMITS_INIT;
	for (int i = 0; i < 3; i++)
		ml_run(&l, nothing, NULL, NULL);
	ml_limit_allocations(ML_NO_LIMIT, nothing, NULL, NULL);
	ml_task *a = ml_task_new(&l), *b = ml_task_new(&l);
	for (int i = 0; i < 5; i++) {
		ml_task_run(a, nothing, NULL, NULL);
		ml_task_run(b, nothing, NULL, NULL);
	}
	tap_is(value("memlimits_tasks_started_total"), 6,
	       "4 ml_run calls + 2 task objects (10 slices) = 6");
	ml_task_free(a);
	ml_task_free(b);
}

/* ---- Threads: summed, exited ones included ------------------------------ */

static pthread_barrier_t bar;
static void *runner(void *arg)
{
	ml_limits l = ML_LIMITS_INIT;
	for (int i = 0; i < 10; i++)
		ml_run(&l, nothing, NULL, NULL);
	void *p = malloc(100); /* a thread that allocated, too */
	sink = p;
	free(p); /* its own block: sink is per thread, never freed */
	if (arg) {
		pthread_barrier_wait(&bar); /* counted */
		pthread_barrier_wait(&bar); /* written */
	}
	return NULL;
}

/* A thread that never allocates: its counts still count. */
static void *bare(void *arg)
{
	ml_limits l = ML_LIMITS_INIT;
	for (int i = 0; i < 7; i++)
		ml_run(&l, nothing, NULL, NULL);
	return arg;
}

static void test_threads(void)
{
	pthread_t th[4];
	pthread_barrier_init(&bar, NULL, 3);
	for (int i = 0; i < 4; i++)
		pthread_create(&th[i], NULL, runner, i < 2 ? &bar : NULL);
	pthread_join(th[2], NULL);
	pthread_join(th[3], NULL);
	pthread_barrier_wait(&bar);
	tap_is(value("memlimits_tasks_started_total"), 40,
	       "4 threads x 10: 2 live, 2 exited");
	pthread_barrier_wait(&bar);
	pthread_join(th[0], NULL);
	pthread_join(th[1], NULL);
	tap_is(value("memlimits_tasks_started_total"), 40,
	       "the same once all have exited");
	pthread_t t;
	pthread_create(&t, NULL, bare, NULL);
	pthread_join(t, NULL);
	tap_is(value("memlimits_tasks_started_total"), 47,
	       "a thread's counts before its first allocation");
}

/* ---- Format ------------------------------------------------------------- */

static void test_format(void)
{
	three_stops();
	char copy[sizeof text];
	strcpy(copy, metrics());
	char fam[32][96];
	int nfam = 0, bad = 0, samples = 0;
	const char *help = NULL;
	char *save = NULL;
	for (char *line = strtok_r(copy, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		char name[96];
		if (!strncmp(line, "# HELP ", 7)) {
			if (sscanf(line + 7, "%95s", name) != 1)
				bad++;
			for (int i = 0; i < nfam; i++)
				if (!strcmp(fam[i], name)) {
					tap_diag("family %s twice", name);
					bad++;
				}
			if (nfam < 32)
				strcpy(fam[nfam++], name);
			help = line;
			continue;
		}
		if (!strncmp(line, "# TYPE ", 7)) {
			char type[32];
			if (!help ||
			    sscanf(line + 7, "%95s %31s", name, type) != 2 ||
			    strcmp(name, fam[nfam - 1]) ||
			    (strcmp(type, "counter") &&
			     strcmp(type, "gauge"))) {
				tap_diag("TYPE line not after its HELP: %s",
				         line);
				bad++;
			}
			help = NULL;
			continue;
		}
		/* A sample: of the family just announced, a number. */
		size_t n = strcspn(line, "{ ");
		char *end;
		const char *v = strrchr(line, ' ');
		if (!nfam || n != strlen(fam[nfam - 1]) ||
		    strncmp(line, fam[nfam - 1], n) || !v ||
		    (strtod(v + 1, &end), *end != 0)) {
			tap_diag("sample outside its family: %s", line);
			bad++;
		}
		samples++;
	}
	tap_ok(bad == 0 && nfam >= 7 && samples >= 10,
	       "well-formed: %d families, %d samples", nfam, samples);
	const char *want[] = {"memlimits_heap_bytes",
	                      "memlimits_global_limit_bytes",
	                      "memlimits_shared_usage_bytes",
	                      "memlimits_samples_total",
	                      "memlimits_tasks_started_total",
	                      "memlimits_tasks_interrupted_total",
	                      "memlimits_pressure_callbacks_total"};
	int found = 0;
	for (size_t i = 0; i < sizeof want / sizeof *want; i++)
		for (int j = 0; j < nfam; j++)
			found += !strcmp(want[i], fam[j]);
	tap_is(found, 7, "every family of the contract");
	/* Under valgrind the meter's level starts at 0 (no mallinfo2 from its
	 * allocator) and may read 0 here. */
	if (tap_under_valgrind()) {
		tap_skip(1, "the heap's level: under valgrind");
		return;
	}
	/* The heap follows a block of 8 MiB: up by its chunk (a page more
	 * at most), and down again once it is freed. */
	long long before = value("memlimits_heap_bytes");
	char *block = malloc(8 << 20);
	memset(block, 1, 8 << 20);
	long long with = value("memlimits_heap_bytes");
	free(block);
	long long after = value("memlimits_heap_bytes");
	tap_ok(before > 0 && with - before >= 8 << 20 &&
	           with - before <= (8 << 20) + 4096 && after == before,
	       "the heap: %lld, %lld with an 8 MiB block, %lld after", before,
	       with, after);
}

static void test_badfd(void)
{
	errno = 0;
	tap_ok(ml_write_metrics(-1) == ML_EINVAL && errno == EBADF,
	       "fd -1: ML_EINVAL, EBADF");
	int fd = open("/dev/null", O_RDONLY);
	errno = 0;
	tap_ok(ml_write_metrics(fd) == ML_EINVAL && errno == EBADF,
	       "a read-only fd: ML_EINVAL, EBADF");
	close(fd);
	fd = open("/dev/null", O_WRONLY);
	tap_is(ml_write_metrics(fd), 0, "/dev/null: 0");
	close(fd);
}

int main(int argc, char **argv)
{
	/* The counts above assume the default interval, whatever the
	 * environment says. */
	ml_set_sample_interval(80000);
	if (argc > 1 && !strcmp(argv[1], "print")) {
		if (!three_stops())
			return 1;
		return ml_write_metrics(1) != 0;
	}
	tap_case("test_stops", test_stops, 60);
	tap_case("test_started", test_started, 30);
	tap_case("test_threads", test_threads, 30);
	tap_case("test_format", test_format, 60);
	tap_case("test_badfd", test_badfd, 30);
	return tap_done();
}
