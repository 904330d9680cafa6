#define _GNU_SOURCE
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The counts live behind a pointer: tap_case points it at memory shared
 * with the case's child. */
struct counts {
	int run, failed;
};
static struct counts own, *counts = &own;
#define tests_run (counts->run)
#define tests_failed (counts->failed)
static int planned = -1;

/* TAP_CASE and TAP_LIST (tap.h), read once; getenv does not allocate. */
static const char *only_case;
static bool listing, matched;
static void read_selection(void)
{
	static bool done;
	if (done)
		return;
	done = true;
	const char *c = getenv("TAP_CASE"), *l = getenv("TAP_LIST");
	only_case = c && *c ? c : NULL;
	listing = l && *l && strcmp(l, "0") != 0;
}

static void out(const char *s, size_t n)
{
	while (n) {
		ssize_t w = write(1, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

static void vline(const char *prefix, const char *fmt, va_list ap)
{
	char buf[1024];
	int n = snprintf(buf, sizeof buf, "%s", prefix);
	if (n < 0)
		return;
	int m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
	size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
	if (len > sizeof buf - 2)
		len = sizeof buf - 2;
	/* A newline inside a test name would end the TAP line early. */
	for (size_t i = 0; i < len; i++)
		if (buf[i] == '\n')
			buf[i] = ' ';
	buf[len++] = '\n';
	out(buf, len);
}

void tap_write(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline("", fmt, ap);
	va_end(ap);
}

static void print_plan(int n)
{
	char buf[32];
	int len = snprintf(buf, sizeof buf, "1..%d\n", n);
	out(buf, (size_t)len);
}

void tap_plan(int n)
{
	read_selection();
	/* One case runs fewer tests than planned: tap_done plans then. */
	if (listing || only_case)
		return;
	planned = n;
	print_plan(n);
}

bool tap_ok(bool cond, const char *fmt, ...)
{
	char prefix[48];
	read_selection();
	if (listing)
		return cond;
	tests_run++;
	if (!cond)
		tests_failed++;
	snprintf(prefix, sizeof prefix, "%s %d - ", cond ? "ok" : "not ok",
	         tests_run);
	va_list ap;
	va_start(ap, fmt);
	vline(prefix, fmt, ap);
	va_end(ap);
	return cond;
}

bool tap_is_int(int64_t got, int64_t want, const char *name)
{
	return tap_ok(got == want, "%s (got %lld, want %lld)", name,
	              (long long)got, (long long)want);
}

void tap_skip(int n, const char *fmt, ...)
{
	read_selection();
	if (listing)
		return;
	for (int i = 0; i < n; i++) {
		char prefix[48];
		tests_run++;
		/* "ok N # SKIP": tap-driver.sh counts "not ok # SKIP" as a
		 * failure. */
		snprintf(prefix, sizeof prefix, "ok %d # SKIP ", tests_run);
		va_list ap;
		va_start(ap, fmt);
		vline(prefix, fmt, ap);
		va_end(ap);
	}
}

void tap_diag(const char *fmt, ...)
{
	read_selection();
	if (listing)
		return;
	va_list ap;
	va_start(ap, fmt);
	vline("# ", fmt, ap);
	va_end(ap);
}

void tap_bail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vline("Bail out! ", fmt, ap);
	va_end(ap);
	_exit(1);
}

int tap_done(void)
{
	read_selection();
	if (listing)
		return 0;
	if (only_case && !matched)
		tap_ok(false, "no case named '%s' (TAP_LIST=1 lists them)",
		       only_case);
	if (planned < 0)
		print_plan(tests_run);
	else if (planned != tests_run)
		tap_diag("planned %d tests but ran %d", planned, tests_run);
	return tests_failed || (planned >= 0 && planned != tests_run);
}

long tap_proc_kb(const char *field)
{
	char buf[4096];
	int fd = open("/proc/self/status", O_RDONLY);
	if (fd < 0)
		return -1;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	size_t fl = strlen(field);
	for (char *p = buf; (p = strstr(p, field)); p++) {
		if ((p != buf && p[-1] != '\n') || p[fl] != ':')
			continue;
		return strtol(p + fl + 1, NULL, 10);
	}
	return -1;
}

bool tap_under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");
	return p && strstr(p, "/vgpreload_");
}

unsigned tap_timeout(unsigned s)
{
	static unsigned scale;
	if (!scale) {
		const char *e = getenv("ML_TEST_TIMEOUT_SCALE");
		char *end = NULL;
		unsigned long v = e ? strtoul(e, &end, 10) : 0;
		if (e && (end == e || *end || v < 1 || v > 1000)) {
			tap_diag("ML_TEST_TIMEOUT_SCALE=%s: not a whole number "
			         "from 1 to 1000, ignored",
			         e);
			v = 0;
		}
		scale = v ? (unsigned)v : tap_under_valgrind() ? 20 : 1;
	}
	return s > UINT_MAX / scale ? UINT_MAX : s * scale;
}

/* Wait for pid up to timeout_s seconds; the status as tap_child's. */
static int wait_child(pid_t pid, unsigned timeout_s)
{
	struct timespec nap = {0, 2 * 1000 * 1000}, t0, now;
	/* The clock, not a count of naps: under load a 2 ms nap takes far
	 * longer, and the child's own alarm (timeout + 5 s) fired first, a
	 * hang then reported as status 142. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		int st;
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid) {
			if (WIFEXITED(st))
				return WEXITSTATUS(st);
			if (WIFSIGNALED(st))
				return 128 + WTERMSIG(st);
			continue;
		}
		if (r < 0 && errno != EINTR)
			return -1;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec >= (time_t)timeout_s) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		/* not ordering: the poll of a wait for the child, with a limit
		 */
		nanosleep(&nap, NULL);
	}
}

int tap_child(void (*fn)(void *), void *arg, unsigned timeout_s)
{
	timeout_s = tap_timeout(timeout_s);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		alarm(timeout_s + 5); /* belt and braces: never outlive us */
		fn(arg);
		_exit(0);
	}
	return wait_child(pid, timeout_s);
}

bool tap_want(const char *name)
{
	read_selection();
	if (listing) {
		out(name, strlen(name));
		out("\n", 1);
		return false;
	}
	if (only_case && strcmp(only_case, name) != 0)
		return false;
	matched = true;
	return true;
}

void tap_case(const char *name, void (*fn)(void), unsigned timeout_s)
{
	if (!tap_want(name))
		return;
	timeout_s = tap_timeout(timeout_s);
	struct counts *shared =
	    mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE,
	         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (shared == MAP_FAILED)
		tap_bail("tap_case %s: mmap", name);
	*shared = *counts;
	struct counts *mine = counts;
	counts = shared;
	pid_t pid = fork();
	if (pid == 0) {
		alarm(timeout_s + 5);
		fn();
		_exit(0);
	}
	int st = pid < 0 ? -1 : wait_child(pid, timeout_s);
	*mine = *shared;
	counts = mine;
	munmap(shared, sizeof *shared);
	if (st == -1)
		tap_ok(false, "case %s: no child, or over its %u s", name,
		       timeout_s);
	else if (st != 0)
		tap_ok(false, "case %s: its child ended with status %d", name,
		       st);
}
