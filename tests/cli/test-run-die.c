/* A program for tests/cli/test-run-die.sh to run under `memlimits run
 * --heap-limit`: it allocates 1 MiB blocks until one is refused (at most
 * MAX_MIB), then ends without a normal exit (issue 41, item 7):
 *
 *   test-run-die abort   abort(), as Rust's alloc-error handler and V8's
 *                        fatal OOM do
 *   test-run-die _exit   _exit(1), as the JVM does
 *   test-run-die stop    prints its pid on stdout and waits for the
 *                        SIGKILL its parent sends (a Pool worker
 *                        terminated)
 *   test-run-die race    four threads allocate; each calls exit(1) at
 *                        its first refusal, racing the others (git
 *                        pack-objects' "racy threaded death")
 *   test-run-die exit    exit(0) after the refusal: the normal exit */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define MAX_MIB 4096

static void *volatile sink;

/* 1 MiB blocks, kept, until one is refused: false if none was. */
static int until_refused(void)
{
	for (int i = 0; i < MAX_MIB; i++) {
		void *p = malloc(MiB);
		if (!p)
			return 1;
		memset(p, 1, 64);
		sink = p;
	}
	return 0;
}

static void *racer(void *arg)
{
	(void)arg;
	if (until_refused())
		exit(1);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	const char *m = argv[1];
	if (!strcmp(m, "race")) {
		pthread_t t[4];
		for (int i = 0; i < 4; i++)
			if (pthread_create(&t[i], NULL, racer, NULL))
				return 4;
		for (int i = 0; i < 4; i++)
			pthread_join(t[i], NULL);
		return 5; /* nothing refused */
	}
	if (!until_refused())
		return 5;
	if (!strcmp(m, "abort"))
		abort();
	if (!strcmp(m, "_exit"))
		_exit(1);
	if (!strcmp(m, "stop")) {
		char line[32];
		int n = snprintf(line, sizeof line, "%d\n", (int)getpid());
		if (write(1, line, (size_t)n) != n)
			return 6;
		for (;;)
			pause();
	}
	if (!strcmp(m, "exit"))
		exit(0);
	return 2;
}
