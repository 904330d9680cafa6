/* ml_write_held_profile and ml_set_stack_capture (issue 14): what a task
 * holds, by call stack, in collapsed-stack format; the lines sum to
 * ml_task_held; frames are [unknown] for blocks sampled while capture was
 * off; blocks freed (by any thread) leave the profile; bad arguments are
 * refused and change nothing.  No statistics: every check is exact. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <memlimits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../tap/tap.h"

#define S 4096u
#define BLOCKS 600
#define BLOCK 2000

static void *blocks_a[BLOCKS], *blocks_b[BLOCKS];

/* Two sites a profile tells apart; noinline keeps them frames. */
__attribute__((noinline)) void hold_in_alpha(void);
__attribute__((noinline)) void hold_in_beta(void);
__attribute__((noinline)) void hold_in_alpha(void)
{
	for (int i = 0; i < BLOCKS; i++)
		blocks_a[i] = malloc(BLOCK);
}
__attribute__((noinline)) void hold_in_beta(void)
{
	for (int i = 0; i < BLOCKS; i++)
		blocks_b[i] = malloc(BLOCK);
}

static void *hold_both(void *arg)
{
	(void)arg;
	hold_in_alpha();
	hold_in_beta();
	return NULL;
}

static void free_all(void **b)
{
	for (int i = 0; i < BLOCKS; i++) {
		free(b[i]);
		b[i] = NULL;
	}
}

/* The profile of t in buf (a pipe would fill: a file). */
static char buf[1 << 16];
static int profile(const ml_task *t)
{
	char path[] = "/tmp/ml-held-profile.XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return -100;
	unlink(path);
	int rc = ml_write_held_profile(t, fd);
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	buf[n > 0 ? n : 0] = 0;
	close(fd);
	return rc;
}

struct sums {
	uint64_t total, alpha, beta, unknown;
	int lines, malformed;
};

/* Each line: "frame;frame;...;frame BYTES", outermost first. */
static struct sums parse(void)
{
	struct sums s = {0};
	for (char *line = buf; *line;) {
		char *end = strchr(line, '\n');
		if (!end) {
			s.malformed++;
			break;
		}
		*end = 0;
		char *sp = strrchr(line, ' ');
		char *stop = NULL;
		uint64_t v = sp ? strtoull(sp + 1, &stop, 10) : 0;
		if (!sp || sp == line || !stop || *stop || !v) {
			s.malformed++;
		} else {
			*sp = 0;
			const char *inner = strrchr(line, ';');
			inner = inner ? inner + 1 : line;
			s.total += v;
			s.lines++;
			if (!strcmp(inner, "hold_in_alpha"))
				s.alpha += v;
			else if (!strcmp(inner, "hold_in_beta"))
				s.beta += v;
			else if (!strcmp(line, "[unknown]"))
				s.unknown += v;
		}
		line = end + 1;
	}
	return s;
}

static void test_capture_off(void)
{
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	ml_task_run(t, hold_both, NULL, NULL);
	int rc = profile(t);
	struct sums s = parse();
	uint64_t held = ml_task_held(t);
	tap_ok(rc == 0 && held > 0 && s.total == held && s.unknown == held &&
	           s.lines == 1 && !s.malformed,
	       "capture off: one line '[unknown] %llu', equal to ml_task_held "
	       "(%llu; rc %d)",
	       (unsigned long long)s.unknown, (unsigned long long)held, rc);
	free_all(blocks_a);
	free_all(blocks_b);
	rc = profile(t);
	held = ml_task_held(t);
	tap_ok(rc == 0 && buf[0] == 0 && held == 0,
	       "all freed: an empty profile, ml_task_held 0 (rc %d, held %llu, "
	       "profile '%.60s')",
	       rc, (unsigned long long)held, buf);
	ml_task_free(t);
}

static void *free_alpha(void *arg)
{
	(void)arg;
	free_all(blocks_a);
	return NULL;
}

static void test_capture_on(void)
{
	if (!(ml_capabilities() & ML_CAP_STACKS)) {
		tap_ok(ml_set_stack_capture(true) == ML_EINVAL &&
		           errno == ENOTSUP,
		       "no stacks here: ml_set_stack_capture(true) says so");
		tap_skip(3, "no call stacks in this process");
		return;
	}
	tap_is_int(ml_set_stack_capture(true), 0, "ml_set_stack_capture(true)");
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	ml_task_run(t, hold_both, NULL, NULL);
	int rc = profile(t);
	struct sums s = parse();
	uint64_t held = ml_task_held(t);
	/* 1.2 MB held per site at S = 4096: about 290 samples each; a site
	 * without any has probability e^-290. */
	tap_ok(rc == 0 && s.total == held && s.alpha > 0 && s.beta > 0 &&
	           s.alpha + s.beta == held && !s.malformed,
	       "capture on: lines sum to ml_task_held (%llu), all in "
	       "hold_in_alpha (%llu) or hold_in_beta (%llu)",
	       (unsigned long long)held, (unsigned long long)s.alpha,
	       (unsigned long long)s.beta);
	uint64_t beta = s.beta;
	pthread_t th;
	pthread_create(&th, NULL, free_alpha, NULL);
	pthread_join(th, NULL);
	rc = profile(t);
	s = parse();
	tap_ok(rc == 0 && s.alpha == 0 && s.beta == beta &&
	           s.total == ml_task_held(t),
	       "hold_in_alpha's blocks freed by another thread: gone from "
	       "the profile, hold_in_beta's unchanged");
	/* The whole process: at least this task's. */
	rc = profile(NULL);
	s = parse();
	tap_ok(rc == 0 && s.beta == beta && s.total >= beta,
	       "t NULL: the whole process's profile holds the task's too");
	free_all(blocks_b);
	tap_is_int(ml_set_stack_capture(false), 0,
	           "ml_set_stack_capture(false)");
	ml_task_run(t, hold_both, NULL, NULL);
	profile(t);
	s = parse();
	tap_ok(s.unknown == ml_task_held(t) && s.alpha == 0,
	       "capture off again: new blocks print as [unknown]");
	free_all(blocks_a);
	free_all(blocks_b);
	ml_task_free(t);
}

static void test_bad_arguments(void)
{
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	errno = 0;
	tap_ok(ml_write_held_profile(t, -1) == ML_EINVAL && errno == EBADF,
	       "fd -1: ML_EINVAL, errno EBADF");
	int fds[2];
	if (pipe(fds) != 0)
		tap_bail("pipe");
	errno = 0;
	tap_ok(ml_write_held_profile(t, fds[0]) == ML_EINVAL && errno == EBADF,
	       "a read-only descriptor: ML_EINVAL, errno EBADF");
	close(fds[0]);
	close(fds[1]);
	/* Not a task: a zeroed record of the right size. */
	static union {
		char bytes[256];
		uint64_t align;
	} fake;
	errno = 0;
	tap_ok(ml_write_held_profile((const ml_task *)(void *)&fake, 1) ==
	               ML_EINVAL &&
	           errno == EINVAL,
	       "not a task: ML_EINVAL, errno EINVAL");
	ml_task_free(t);
}

int main(void)
{
	ml_set_sample_interval(S);
	ml_set_seed(7);
	tap_case("test_capture_off", test_capture_off, 30);
	tap_case("test_capture_on", test_capture_on, 30);
	tap_case("test_bad_arguments", test_bad_arguments, 30);
	return tap_done();
}
