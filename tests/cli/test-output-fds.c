/* For tests/cli/test-output.sh: lists this process's descriptors, one line
 * each, "FD cloexec|inherit TARGET" (without the one it lists them with).
 * Not linked with the library: under `memlimits run` it is preloaded, and
 * run with LD_PRELOAD unset it shows what a child inherits. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(void)
{
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return 1;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		int fd = atoi(e->d_name);
		if (fd == dirfd(d))
			continue;
		char path[64], target[4096];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(path, target, sizeof target - 1);
		target[n > 0 ? n : 0] = 0;
		int fl = fcntl(fd, F_GETFD);
		printf("%d %s %s\n", fd,
		       fl >= 0 && (fl & FD_CLOEXEC) ? "cloexec" : "inherit",
		       target);
	}
	closedir(d);
	return 0;
}
