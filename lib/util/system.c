/* The process around us: its environment and the files we write (run
 * mode's report, profile and statistics), without allocating. */
#define _GNU_SOURCE
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every MEMLIMITS_* variable is read here.  A setuid, setgid or
 * file-capability program (AT_SECURE) ignores them all: otherwise any user
 * could make it write files as its owner or change how it fails
 * (docs/reliability.md). */
const char *ml__getenv(const char *name)
{
	return secure_getenv(name);
}

void ml__out_failed(const char *what, const char *path, int err)
{
	ml__diag("cannot write the %s to %s: %s", what, path,
	         ml__strerror(err));
}

/* Same file as one of the pipes or sockets the process has as stdout or
 * stderr (/dev/stdout in a pipeline): meant to be written to. */
static bool is_stdio(const struct stat *st)
{
	int fds[3] = {1, 2, ml__diag_fd()};
	for (int i = 0; i < 3; i++) {
		struct stat s2;
		if (fds[i] >= 0 && fstat(fds[i], &s2) == 0 &&
		    s2.st_dev == st->st_dev && s2.st_ino == st->st_ino)
			return true;
	}
	return false;
}

bool ml__names_stderr(const char *path)
{
	return path &&
	       (!strcmp(path, "/dev/stderr") || !strcmp(path, "/dev/fd/2") ||
	        !strcmp(path, "/proc/self/fd/2"));
}

int ml__out_open(const char *what, const char *path, int flags)
{
	/* Our copy of stderr: works after the program closed fd 2. */
	if (ml__names_stderr(path)) {
		int fd = ml__diag_fd();
		return fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, fd) : -1;
	}
	/* Never block: a FIFO without a reader fails here with ENXIO
	 * instead of hanging the process at exit. */
	int fd = open(
	    path, flags | O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
	struct stat st;
	if (fd < 0) {
		int err = errno;
		/* ENXIO: a FIFO without a reader, or a socket. */
		if (err != ENXIO || stat(path, &st) != 0 ||
		    !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
			ml__out_failed(what, path, err);
			return -1;
		}
	} else if (fstat(fd, &st) == 0 &&
	           (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) ||
	            ((S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) &&
	             is_stdio(&st)))) {
		int fl = fcntl(fd, F_GETFL);
		if (fl != -1)
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		return fd;
	}
	if (fd >= 0)
		close(fd);
	ml__diag("cannot write the %s to %s: not a regular file or a "
	         "terminal",
	         what, path);
	return -1;
}
