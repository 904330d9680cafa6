/* The pictures' SVG writer (tools/svg.c, compiled in) on its own (issue
 * 33): numbers of every magnitude written as what they are (1e31 came out
 * as "1"), a failed write reported with the errno of the call that failed
 * (it was whatever errno held when the stream was closed), nothing left of
 * a file that could not be written whole, and the line reader's bounds.
 * ml__tool_usage_error is this file's: it keeps the message and jumps
 * back. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "../tap/tap.h"
#include "svg.h"
#include "tool.h"

static jmp_buf back;
static char msg[512];

_Noreturn void ml__tool_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	(void)cmd;
	longjmp(back, 1);
}

/* x1 of a line drawn at x, as written. */
static void coordinate(double x, const char *want)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		tap_bail("open_memstream: %s", strerror(errno));
	ml__svg_line(f, x, 0, 0, 0, "#000000", 1, NULL);
	fclose(f);
	const char *p = strstr(buf, "x1=\"");
	char got[64] = "";
	if (p)
		sscanf(p + 4, "%63[^\"]", got);
	tap_ok(!strcmp(got, want), "%g is written \"%s\" (got \"%s\")", x, want,
	       got);
	free(buf);
}

static void numbers(void)
{
	coordinate(12, "12");
	coordinate(12.5, "12.5");
	coordinate(12.25, "12.25");
	coordinate(12.251, "12.25");
	coordinate(-0.001, "0");
	coordinate(-3.5, "-3.5");
	coordinate(123456789012.5, "123456789012.5");
	coordinate(999999999999999.0, "999999999999999");
	coordinate(1e15, "1e+15");
	coordinate(1e31, "1e+31");
	coordinate(-2.5e200, "-2.5e+200");
	coordinate(1.7976931348623157e308, "1.79769313486232e+308");
	coordinate(1.0 / 0.0, "0");
	coordinate(0.0 / 0.0, "0");
}

static void draw(FILE *f)
{
	for (int i = 0; i < 1000; i++)
		ml__svg_rect(f, i, i, 10, 10, "#ffffff", NULL);
}

/* A picture of about 50 KiB written to out: the message of
 * ml__svg_close_out, "" if it succeeded.  errno is set to 0 before the
 * stream is closed, as a call made after a failed write may leave it. */
static const char *write_picture(const char *out)
{
	msg[0] = 0;
	if (setjmp(back) == 0) {
		FILE *f = ml__svg_open_out("test", out);
		draw(f);
		errno = 0;
		ml__svg_close_out("test", f, out);
	}
	return msg;
}

static void write_errors(void)
{
	if (access("/dev/full", W_OK) == 0) {
		const char *m = write_picture("/dev/full");
		tap_ok(strstr(m, "/dev/full") &&
		           strstr(m, strerror(ENOSPC)) != NULL,
		       "/dev/full: the write's errno: %s", m);
	} else {
		tap_skip(1, "no /dev/full");
	}
	/* A file of at most 4 KiB (SIGXFSZ ignored: write fails with
	 * EFBIG): created, written in part, then failing. */
	const char *tmp = getenv("TMPDIR");
	char out[4096];
	snprintf(out, sizeof out, "%s/test-svg.XXXXXX",
	         tmp && *tmp ? tmp : "/tmp");
	int fd = mkstemp(out);
	if (fd < 0)
		tap_bail("mkstemp %s: %s", out, strerror(errno));
	close(fd);
	unlink(out);
	struct rlimit old, lim = {4096, 4096};
	getrlimit(RLIMIT_FSIZE, &old);
	lim.rlim_max = old.rlim_max;
	signal(SIGXFSZ, SIG_IGN);
	if (setrlimit(RLIMIT_FSIZE, &lim) != 0)
		tap_bail("setrlimit: %s", strerror(errno));
	const char *m = write_picture(out);
	setrlimit(RLIMIT_FSIZE, &old);
	tap_ok(strstr(m, strerror(EFBIG)) != NULL,
	       "a file larger than RLIMIT_FSIZE: the write's errno: %s", m);
	tap_ok(access(out, F_OK) != 0 && errno == ENOENT,
	       "the file it created, written in part, is removed");
	unlink(out);
	tap_ok(!*write_picture(out), "a file that can be written: no error");
	char *want = NULL, got[65536] = "";
	size_t want_len = 0, got_len = 0;
	FILE *f = open_memstream(&want, &want_len);
	if (!f)
		tap_bail("open_memstream: %s", strerror(errno));
	draw(f);
	fclose(f);
	f = fopen(out, "r");
	if (f) {
		got_len = fread(got, 1, sizeof got, f);
		fclose(f);
	}
	tap_ok(got_len == want_len && !memcmp(got, want, want_len),
	       "written whole: %zu bytes of %zu", got_len, want_len);
	free(want);
	unlink(out);
}

/* ml__svg_read_line on the n bytes at s: the lengths of the lines it
 * returns, in *lens (at most 8), their number, or -1 with msg set. */
static int lines(const char *s, size_t n, long *lens)
{
	FILE *f = fmemopen((void *)s, n, "r");
	if (!f)
		tap_bail("fmemopen: %s", strerror(errno));
	static char *buf;
	static size_t cap;
	uint64_t line = 0;
	int k = 0;
	msg[0] = 0;
	if (setjmp(back) == 0) {
		ssize_t len;
		while ((len = ml__svg_read_line("test", "in", f, &buf, &cap,
		                                &line)) >= 0) {
			if (k < 8)
				lens[k] = (long)len;
			k++;
			if ((size_t)len != strlen(buf))
				k = -100; /* not NUL-terminated there */
		}
	} else {
		k = -1;
	}
	fclose(f);
	return k;
}

static void reader(void)
{
	long l[8] = {0};
	tap_is(lines("ab\r\ncd\n\nef", 10, l), 4, "4 lines, the last unended");
	tap_ok(l[0] == 2 && l[1] == 2 && l[2] == 0 && l[3] == 2,
	       "their lengths, CR LF removed: %ld %ld %ld %ld", l[0], l[1],
	       l[2], l[3]);
	tap_is(lines("", 0, l), 0, "an empty file: no line");
	tap_is(lines("a\nb\0c\n", 6, l), -1, "a NUL byte is refused");
	tap_ok(strstr(msg, "in: line 2: a NUL byte") != NULL, "%s", msg);
	size_t max = ML__SVG_LINE_MAX;
	char *big = malloc(max + 2);
	if (!big)
		tap_bail("out of memory");
	memset(big, 'x', max + 1);
	big[max] = '\n';
	tap_is(lines(big, max + 1, l), 1, "a line of ML__SVG_LINE_MAX bytes");
	tap_is(l[0], (long)max, "read whole");
	big[max] = 'x';
	big[max + 1] = '\n';
	tap_is(lines(big, max + 2, l), -1, "one byte more is refused");
	tap_ok(strstr(msg, "in: line 1: longer than") != NULL, "%s", msg);
	free(big);
}

int main(void)
{
	TAP_RUN(numbers);
	TAP_RUN(write_errors);
	TAP_RUN(reader);
	return tap_done();
}
