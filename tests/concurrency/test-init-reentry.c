/* The library's start-up on a thread whose allocation re-enters it: glibc's
 * pthread_atfork allocates (its handler list grows), and the library's
 * constructor registers its fork handlers while it initialises its global
 * state.  That allocation comes back into the library on the same thread,
 * which is still new: it must pass through to the allocator.  0.2 waited
 * there for the initialisation to finish, that is for itself, forever.
 *
 * This program defines __register_atfork (pthread_atfork is a static stub
 * that calls it: tests/concurrency/test-pthread-fail.c does the same): in
 * the re-run (TEST_INIT_REENTRY set) it allocates through malloc, as
 * glibc's does, and registers nothing (this program never forks there).
 * The parent re-runs itself with a time limit: a hang is the failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memlimits.h"
#include "../tap/tap.h"

void *volatile sink;
static volatile int registered; /* __register_atfork calls in the re-run */

/* Whether TEST_INIT_REENTRY is set, from /proc: this runs before main,
 * possibly before libc has set up environ. */
static bool rerun(void)
{
	static int state = -1;
	if (state >= 0)
		return state;
	state = 0;
	static char env[1 << 16];
	int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return state;
	size_t len = 0;
	ssize_t r;
	while (len + 1 < sizeof env &&
	       (r = read(fd, env + len, sizeof env - 1 - len)) > 0)
		len += (size_t)r;
	close(fd);
	for (size_t i = 0; i < len; i += strlen(env + i) + 1)
		if (!strncmp(env + i, "TEST_INIT_REENTRY=", 18))
			state = 1;
	return state;
}

int __register_atfork(void (*prepare)(void), void (*parent)(void),
                      void (*child)(void), void *dso);
int __register_atfork(void (*prepare)(void), void (*parent)(void),
                      void (*child)(void), void *dso)
{
	(void)prepare;
	(void)parent;
	(void)child;
	(void)dso;
	if (rerun()) {
		registered++;
		sink = malloc(64);
		free(sink);
	}
	return 0;
}

static void start(void *arg)
{
	char **argv = arg;
	setenv("TEST_INIT_REENTRY", "1", 1);
	/* argv[0], not /proc/self/exe: under valgrind that is the tool. */
	execv(strchr(argv[0], '/') ? argv[0] : "/proc/self/exe", argv);
	_exit(127);
}

/* The re-run: it got here, so start-up did not hang.  The library works:
 * a task with no allocation budget is refused its first sampled block. */
static void *grab(void *arg)
{
	(void)arg;
	sink = malloc(1 << 20); /* 256 intervals: sampled but with e^-256 */
	return sink;
}

static int work(void)
{
	ml_set_sample_interval(4096);
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 0;
	l.delivery = ML_DELIVER_FAIL;
	ml_outcome out;
	ml_status st = ml_run(&l, grab, NULL, &out);
	return registered > 0 && st == ML_ALLOC_LIMIT && !out.ret ? 0 : 1;
}

int main(int argc, char **argv)
{
	(void)argc;
	if (rerun())
		return work();
	int st = tap_child(start, argv, 60);
	tap_is(st, 0,
	       "an allocation from pthread_atfork during the library's "
	       "start-up passes through (-1: the re-run hung)");
	return tap_done();
}
