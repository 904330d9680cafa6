/* test-run-rss CMD [ARG...]: run CMD, then print its peak resident set
 * ("test-run-rss: maxrss_kb N") on stderr and exit with its status (128+sig
 * if killed).  wait4 reports the peak of that process alone, which under
 * `memlimits run` is the program itself (run execs it). */
#include <stdio.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: test-run-rss CMD [ARG...]\n");
		return 125;
	}
	pid_t pid = fork();
	if (pid < 0)
		return 125;
	if (pid == 0) {
		execvp(argv[1], argv + 1);
		_exit(127);
	}
	int st;
	struct rusage ru;
	if (wait4(pid, &st, 0, &ru) != pid)
		return 125;
	fprintf(stderr, "test-run-rss: maxrss_kb %ld\n", ru.ru_maxrss);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
