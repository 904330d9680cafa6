/* A process of tests/cli/test-tree-signals.sh: starts a program with the
 * signal dispositions and descriptors a caller may leave it, or plays the
 * program.
 *
 *   test-sig-exec [-d] [-i SIG]... [-p] -- PROGRAM ARG...
 *       -d: every signal at its default (a script's `&` leaves SIGINT and
 *       SIGQUIT ignored); -i: SIG ignored (after -d); -p: stdout and stderr
 *       a pipe nobody reads (the first write raises SIGPIPE); then execs
 *       PROGRAM.
 *   test-sig-exec -l      prints the signals whose disposition can be set
 *                         (1 to SIGRTMAX but SIGKILL, SIGSTOP and the C
 *                         library's own), one a line.
 *   test-sig-exec -w      forks a child that exits with 3 and exits with
 *                         the status waitpid gives (100: none).
 *   test-sig-exec -q SIG  prints "ignored" or "default" for SIG.
 *   test-sig-exec -P FILE writes its pid to FILE (whole: written aside,
 *                         then renamed) and waits to be killed; after 120 s
 *                         (a backstop, not a timing) it says so, exit 99.
 * Not linked with the library: memlimits run preloads it. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int child_status(void)
{
	pid_t pid = fork();
	if (pid < 0)
		return 100;
	if (pid == 0)
		_exit(3);
	int st;
	if (waitpid(pid, &st, 0) != pid) {
		fprintf(stderr, "test-sig-exec: waitpid: %s\n",
		        strerror(errno));
		return 100;
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

static int wait_to_be_killed(const char *file)
{
	char aside[4096];
	snprintf(aside, sizeof aside, "%s.new", file);
	FILE *f = fopen(aside, "w");
	if (!f || fprintf(f, "%ld\n", (long)getpid()) < 0 || fclose(f) ||
	    rename(aside, file))
		return 98;
	struct timespec left = {120, 0};
	/* not ordering: a backstop; the test kills this process */
	while (nanosleep(&left, &left) && errno == EINTR)
		;
	fprintf(stderr, "test-sig-exec: not killed in 120 s\n");
	return 99;
}

int main(int argc, char **argv)
{
	int opt;
	while ((opt = getopt(argc, argv, "+di:plwq:P:")) != -1) {
		switch (opt) {
		case 'd':
			for (int s = 1; s <= SIGRTMAX; s++)
				signal(s, SIG_DFL);
			break;
		case 'i':
			if (signal(atoi(optarg), SIG_IGN) == SIG_ERR)
				return 97;
			break;
		case 'p': {
			int p[2];
			if (pipe(p) || close(p[0]) || dup2(p[1], 1) < 0 ||
			    dup2(p[1], 2) < 0)
				return 97;
			close(p[1]);
			break;
		}
		case 'l':
			for (int s = 1; s <= SIGRTMAX; s++) {
				struct sigaction sa;
				if (s != SIGKILL && s != SIGSTOP &&
				    sigaction(s, NULL, &sa) == 0)
					printf("%d\n", s);
			}
			return 0;
		case 'w':
			return child_status();
		case 'q': {
			struct sigaction sa;
			if (sigaction(atoi(optarg), NULL, &sa))
				return 97;
			puts(sa.sa_handler == SIG_IGN ? "ignored" : "default");
			return 0;
		}
		case 'P':
			return wait_to_be_killed(optarg);
		default:
			return 97;
		}
	}
	if (optind >= argc)
		return 97;
	execv(argv[optind], argv + optind);
	return 96;
}
