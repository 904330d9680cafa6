/* The library when pthread_key_create, pthread_atfork or
 * pthread_setspecific fails: it says so once on stderr, and goes on
 * working (threads allocate and exit, a task trips, a fork works).
 *
 * This program defines those functions itself, so the library's calls
 * reach them instead of glibc's (pthread_atfork is a static stub that calls
 * __register_atfork, hence that name).  TEST_PTHREAD_FAIL picks what fails:
 * "key" (pthread_key_create and __register_atfork) or "setspecific".  The
 * parent runs itself in each mode with stderr captured. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memlimits.h"
#include "../tap/tap.h"

static _Thread_local void *volatile sink;

extern int __pthread_key_create(pthread_key_t *, void (*)(void *));
int __register_atfork(void (*)(void), void (*)(void), void (*)(void), void *);

/* TEST_PTHREAD_FAIL's value, "" when unset.  Read from /proc, not with
 * getenv: a sanitizer's runtime linked into this program allocates (and so
 * starts the library, which creates its key) before libc has set up environ. */
static const char *fail_mode(void)
{
	static char env[1 << 16];
	static const char *mode;
	if (mode)
		return mode;
	mode = "";
	int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return mode;
	size_t len = 0;
	ssize_t r;
	while (len + 1 < sizeof env &&
	       (r = read(fd, env + len, sizeof env - 1 - len)) > 0)
		len += (size_t)r;
	close(fd);
	for (size_t i = 0; i < len; i += strlen(env + i) + 1)
		if (!strncmp(env + i, "TEST_PTHREAD_FAIL=", 18))
			mode = env + i + 18;
	return mode;
}

static bool failing(const char *what)
{
	return !strcmp(fail_mode(), what);
}

int pthread_key_create(pthread_key_t *key, void (*destructor)(void *))
{
	if (failing("key"))
		return EAGAIN;
	return __pthread_key_create(key, destructor);
}

int __register_atfork(void (*prepare)(void), void (*parent)(void),
                      void (*child)(void), void *dso)
{
	(void)prepare;
	(void)parent;
	(void)child;
	(void)dso;
	/* Nothing else in this program registers fork handlers; the parent
	 * (no TEST_PTHREAD_FAIL) needs none. */
	return *fail_mode() ? ENOMEM : 0;
}

int pthread_setspecific(pthread_key_t key, const void *value)
{
	static int (*real)(pthread_key_t, const void *);
	if (failing("setspecific"))
		return ENOMEM;
	if (!real)
		*(void **)&real = dlsym(RTLD_NEXT, "pthread_setspecific");
	return real ? real(key, value) : ENOSYS;
}

static void *churn(void *arg)
{
	for (int i = 0; i < 1000; i++) {
		void *p = malloc((size_t)(i % 500) * 16 + 1);
		sink = p;
		free(p);
	}
	return arg;
}

static void *spend(void *arg)
{
	(void)arg;
	for (;;) {
		void *p = malloc(4096);
		sink = p;
		free(p);
	}
	return NULL;
}

/* The library at work with the failures in place: 0 when all is well. */
static int work(void)
{
	for (int i = 0; i < 8; i++) {
		pthread_t th;
		if (pthread_create(&th, NULL, churn, NULL) ||
		    pthread_join(th, NULL))
			return 1;
	}
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	if (ml_run(&l, spend, NULL, NULL) != ML_ALLOC_LIMIT)
		return 2;
	pid_t pid = fork();
	if (pid == 0) {
		churn(NULL);
		_exit(ml_run(&l, spend, NULL, NULL) == ML_ALLOC_LIMIT ? 0 : 1);
	}
	int st;
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st) != 0)
		return 3;
	return 0;
}

/* Run this program with TEST_PTHREAD_FAIL=mode; its stderr into err. */
static int run(char **argv, const char *mode, char *err, size_t cap)
{
	int fd[2];
	if (pipe(fd) != 0)
		tap_bail("pipe failed");
	pid_t pid = fork();
	if (pid == 0) {
		dup2(fd[1], 2);
		close(fd[0]);
		close(fd[1]);
		setenv("TEST_PTHREAD_FAIL", mode, 1);
		/* argv[0], not /proc/self/exe: under valgrind that is the
		 * tool, and this re-run is native (no --trace-children). */
		execv(strchr(argv[0], '/') ? argv[0] : "/proc/self/exe", argv);
		_exit(127);
	}
	close(fd[1]);
	size_t len = 0;
	ssize_t r;
	while (len + 1 < cap &&
	       ((r = read(fd[0], err + len, cap - 1 - len)) > 0 ||
	        (r < 0 && errno == EINTR)))
		if (r > 0)
			len += (size_t)r;
	err[len] = 0;
	close(fd[0]);
	int st;
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int count(const char *hay, const char *needle)
{
	int n = 0;
	for (const char *p = hay; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static int lines(const char *s)
{
	return count(s, "\n");
}

/* Every line is one of the library's and none is repeated (__register_atfork
 * fails in both modes: one line per module with fork handlers). */
static bool once_each(const char *s)
{
	for (const char *l = s; *l; l = strchr(l, '\n') + 1) {
		const char *end = strchr(l, '\n');
		if (!end || strncmp(l, "memlimits: cannot ", 18) != 0)
			return false;
		size_t len = (size_t)(end - l + 1);
		for (const char *m = end + 1; *m; m++)
			if (!strncmp(m, l, len) && (m == s || m[-1] == '\n'))
				return false;
	}
	return true;
}

int main(int argc, char **argv)
{
	(void)argc;
	if (getenv("TEST_PTHREAD_FAIL"))
		return work();
	static char err[8192];

	int st = run(argv, "key", err, sizeof err);
	tap_is(st, 0,
	       "pthread_key_create and pthread_atfork fail: threads, "
	       "a task and a fork still work");
	int key = count(err, "memlimits: cannot create a thread key");
	int fork = count(err, "memlimits: cannot register fork handlers");
	tap_ok(key == 1 && fork >= 1 && once_each(err),
	       "each failure said once on stderr (key %d, fork handlers %d, "
	       "%d lines)",
	       key, fork, lines(err));
	if (!once_each(err))
		tap_diag("stderr: %s", err);

	st = run(argv, "setspecific", err, sizeof err);
	tap_is(st, 0,
	       "pthread_setspecific fails: threads, a task and a fork "
	       "still work");
	int set = count(err, "memlimits: cannot set a thread-specific value");
	tap_ok(set == 1 && once_each(err),
	       "said once on stderr for 9 threads (%d times, %d lines)", set,
	       lines(err));
	if (!once_each(err))
		tap_diag("stderr: %s", err);
	return tap_done();
}
