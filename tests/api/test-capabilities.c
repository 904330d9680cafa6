/* ml_capabilities(): a linked program has the library as its allocator,
 * frames can be classified and stacks captured; with a malloc defined in
 * front (LD_PRELOAD of tests/api/.libs/libmallocfront.so) INTERPOSED is clear.
 */
#include <errno.h>
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tap/tap.h"

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "child") == 0)
		return (int)ml_capabilities();

	unsigned c = ml_capabilities();
	tap_ok(c & ML_CAP_INTERPOSED, "linked: ML_CAP_INTERPOSED set (0x%x)",
	       c);
	tap_ok(c & ML_CAP_JUMP_SAFE, "ML_CAP_JUMP_SAFE set");
	tap_ok(c & ML_CAP_STACKS, "ML_CAP_STACKS set");
	tap_ok(c & ML_CAP_HELD, "ML_CAP_HELD set: held memory is tracked");
	tap_is(ml_capabilities(), c, "the same mask again");
	errno = 0;
	tap_ok(ml_patch_objects(0) == -1 && errno == EEXIST,
	       "linked: ml_patch_objects has nothing to rewrite (EEXIST)");

	const char *b = getenv("top_builddir");
	char shim[4096];
	snprintf(shim, sizeof shim, "%s/tests/api/.libs/libmallocfront.so",
	         b ? b : ".");
	if (access(shim, R_OK) != 0) {
		tap_skip(1, "no %s", shim);
		return tap_done();
	}
	pid_t pid = fork();
	if (pid == 0) {
		setenv("LD_PRELOAD", shim, 1);
		/* argv[0], not /proc/self/exe: under valgrind that is the
		 * tool's own binary. */
		execl(argv[0], argv[0], "child", (char *)NULL);
		_exit(127);
	}
	int st = 0;
	waitpid(pid, &st, 0);
	tap_ok(WIFEXITED(st) && WEXITSTATUS(st) != 127 &&
	           !(WEXITSTATUS(st) & ML_CAP_INTERPOSED) &&
	           !(WEXITSTATUS(st) & ML_CAP_HELD) &&
	           (WEXITSTATUS(st) & ML_CAP_STACKS),
	       "malloc defined in front: ML_CAP_INTERPOSED and ML_CAP_HELD "
	       "clear (status 0x%x)",
	       st);
	return tap_done();
}
