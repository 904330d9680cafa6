/* The timeline's descriptor under threads (issue 33): eight threads write
 * rows at once, 300 times in each of 4 runs, after another file was put in
 * the place of the timeline's descriptor: every thread that finds it so
 * opens the file again, and compares the descriptor and the file it was
 * opened on (lib/run/timeline.c, get_fd) while others replace them.
 * .ci/run builds this with -fsanitize=thread with the library's sources
 * and requires zero reports (tl_dev and tl_ino were plain variables,
 * written by one thread while others compared them: a report in each of
 * 6 runs of 6 before the fix).  Here it checks that the file stays whole:
 * rows of six fields, never interleaved, a row in each round, and the
 * exit row.  Ordered by barriers, not by time.
 *
 * Run mode is set up by re-executing this program with MEMLIMITS_TIMELINE
 * set; the parent reads the file. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <memlimits.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define WORKERS 8
#define ROUNDS 300
#define RUNS 4

static pthread_barrier_t barrier;
static const char *path;
static unsigned replaced;
static int null_fd;

/* The descriptor that names path, -1 if none (readlink: no allocation). */
static int find_fd(void)
{
	for (int fd = 10; fd < 1024; fd++) {
		char link[64], to[PATH_MAX];
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(link, to, sizeof to - 1);
		if (n <= 0)
			continue;
		to[n] = 0;
		if (!strcmp(to, path))
			return fd;
	}
	return -1;
}

/* Each round: worker 0 puts /dev/null in the place of the timeline's
 * descriptor (dup2), as a program that reuses a descriptor's number
 * would, and closes the one it put there the round before, while the
 * others wait (a barrier on either side: the program's own use of its
 * descriptors is not the race looked for).  Then every worker makes a row
 * at once: its ml_note_alloc, 1/200 of the heap and 1 MiB, is a sample
 * and a new peak (by more than 1/256 of the heap over the last row), so a
 * row (unless another thread's comes first); the first rows of a round
 * all find another file in the descriptor's place and open the timeline
 * again (at the number freed before the round: TSan takes a thread's use
 * of a number while another opens a file there for a race).  The heap
 * grows to about 150 GB (a count: nothing is allocated). */
static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	int before = -1;
	for (int r = 0; r < ROUNDS; r++) {
		pthread_barrier_wait(&barrier);
		if (id == 0) {
			int fd = find_fd();
			if (fd >= 0 && dup2(null_fd, fd) == fd) {
				replaced++;
				if (before >= 0)
					close(before);
				before = fd;
			}
		}
		pthread_barrier_wait(&barrier);
		ml_note_alloc(ml_global_memory_usage() / 200 +
		              ((size_t)1 << 20));
	}
	return NULL;
}

static int child(void)
{
	pthread_t w[WORKERS];
	/* The meter on, whatever allocator is in front (TSan's: run mode
	 * then leaves it off), with a limit no heap reaches. */
	ml_set_global_limit(UINT64_MAX / 2);
	/* Descriptors 0-9 taken, so that the library opens the timeline
	 * at 10 or above directly: TSan does not see a descriptor made by
	 * fcntl(F_DUPFD) (not intercepted), and took two threads' closes
	 * of such a number, one after the other, for a race.  null_fd is
	 * above them. */
	do
		null_fd = open("/dev/null", O_RDONLY);
	while (null_fd >= 0 && null_fd < 10);
	if (null_fd < 0)
		return 10;
	if (pthread_barrier_init(&barrier, NULL, WORKERS))
		return 10;
	for (int i = 0; i < WORKERS; i++)
		if (pthread_create(&w[i], NULL, worker, (void *)(intptr_t)i))
			return 10;
	for (int i = 0; i < WORKERS; i++)
		pthread_join(w[i], NULL);
	printf("replaced %u\n", replaced);
	return 0;
}

/* Every line a comment, the header or a row of six tab-separated fields
 * (pid, seconds, heap; held empty; mapped; event empty or a word).  Adds to
 * rows, bad and exits. */
static void check_file(const char *file, unsigned *rows, unsigned *bad,
                       unsigned *exits)
{
	FILE *f = fopen(file, "r");
	if (!f) {
		++*bad;
		tap_diag("no timeline: %s", strerror(errno));
		return;
	}
	char line[512];
	while (fgets(line, sizeof line, f)) {
		if (line[0] == '#' || !strncmp(line, "pid\t", 4))
			continue;
		unsigned tabs = 0;
		for (char *p = line; *p; p++)
			tabs += *p == '\t';
		char *nl = strchr(line, '\n');
		if (tabs != 5 || !nl || line[0] < '1' || line[0] > '9') {
			if ((*bad)++ < 5)
				tap_diag("bad row: %s", line);
			continue;
		}
		++*rows;
		*exits += nl - line >= 5 && !strncmp(nl - 5, "\texit", 5);
	}
	fclose(f);
}

/* One run of the threads, in a process of its own with run mode set up:
 * its exit status; *replaced_seen from its output. */
static int one_run(char **argv, const char *file, const char *out,
                   unsigned *replaced_seen)
{
	/* Made empty first, as memlimits run makes it. */
	FILE *made = fopen(file, "w");
	if (!made || fclose(made))
		tap_bail("cannot make %s", file);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		setenv("TEST_TIMELINE_FILE", file, 1);
		setenv("MEMLIMITS_TIMELINE", file, 1);
		setenv("MEMLIMITS_SAMPLE_INTERVAL", "4096", 1);
		if (!freopen(out, "w", stdout))
			_exit(11);
		execv(strchr(argv[0], '/') ? argv[0] : "/proc/self/exe", argv);
		_exit(12);
	}
	int st = 1;
	while (pid > 0 && waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	FILE *o = fopen(out, "r");
	if (!o || fscanf(o, "replaced %u", replaced_seen) != 1)
		*replaced_seen = 0;
	if (o)
		fclose(o);
	return pid > 0 && WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

int main(int argc, char **argv)
{
	(void)argc;
	path = getenv("TEST_TIMELINE_FILE");
	if (path)
		return child();
	char dir[4096], file[4200], out[4200];
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	if ((size_t)snprintf(dir, sizeof dir, "%s/ml-tlthr.XXXXXX", tmp) >=
	        sizeof dir ||
	    !mkdtemp(dir))
		tap_bail("cannot make a temporary directory under %s", tmp);
	char real[PATH_MAX];
	if (!realpath(dir, real))
		tap_bail("realpath %s: %s", dir, strerror(errno));
	snprintf(file, sizeof file, "%s/timeline", real);
	snprintf(out, sizeof out, "%s/out", real);
	/* Runs of their own: under TSan, one run catches a race that needs
	 * two threads in get_fd at once about every third time. */
	unsigned failed = 0, swaps = 0, rows = 0, bad = 0, exits = 0;
	for (int run = 0; run < RUNS; run++) {
		unsigned c = 0;
		int st = one_run(argv, file, out, &c);
		if (st != 0 && failed++ < 3)
			tap_diag("run %d: status %d", run, st);
		swaps += c;
		check_file(file, &rows, &bad, &exits);
	}
	tap_diag("%u rows, %u replaced in %d runs", rows, swaps, RUNS);
	tap_is(failed, 0, "every run's threads ended well");
	tap_is(swaps, RUNS * ROUNDS,
	       "the descriptor replaced before every round: the timeline "
	       "open again after each");
	tap_is(bad, 0, "every row whole, none interleaved");
	tap_ok(rows >= RUNS * ROUNDS, "a row or more in each round (%u)", rows);
	tap_is(exits, RUNS,
	       "the exit row of each run written after the replacements");
	unlink(file);
	unlink(out);
	rmdir(real);
	return tap_done();
}
