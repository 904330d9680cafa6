/* Whole writes and reads on the pipes the shared-budget tests order their
 * processes with (test-shared, test-shared-stop): a short write or read
 * goes on, EINTR is retried.  put() ends the process on a closed pipe (a
 * member whose parent is gone has nobody to report to); get() says
 * whether all of it came (false: the writer closed first). */
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

#endif
