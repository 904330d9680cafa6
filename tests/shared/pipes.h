/* Whole writes and reads on the pipes the shared-budget tests order their
 * processes with (test-shared, test-shared-stop, test-tree-many): a short
 * write or read goes on, EINTR is retried.  put() ends the process on a
 * closed pipe (a member whose parent is gone has nobody to report to);
 * get() says whether all of it came (false: the writer closed first);
 * get_text() reads to EOF what a child wrote (its stderr), as a string
 * of cap - 1 bytes at most, and closes fd. */
#ifndef TESTS_SHARED_PIPES_H
#define TESTS_SHARED_PIPES_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <unistd.h>

static inline void put(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			_exit(90);
		p = (const char *)p + w;
		n -= (size_t)w;
	}
}

static inline bool get(int fd, void *p, size_t n)
{
	while (n) {
		ssize_t r = read(fd, p, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return false;
		p = (char *)p + r;
		n -= (size_t)r;
	}
	return true;
}

static inline void get_text(int fd, char *buf, size_t cap)
{
	size_t got = 0;
	ssize_t r;
	while (got < cap - 1 && ((r = read(fd, buf + got, cap - 1 - got)) > 0 ||
	                         (r < 0 && errno == EINTR)))
		got += r > 0 ? (size_t)r : 0;
	buf[got] = 0;
	close(fd);
}

#endif
