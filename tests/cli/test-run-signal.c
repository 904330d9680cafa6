/* A program for tests/cli/test-run-signal.sh (issue 41, item 2): runs
 * tests/api/signal-maps.h's loop for argv[1] rounds with no library
 * linked (memlimits run preloads it); exits with the step that failed, 0
 * when none did, and says how many times the handler ran. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>

#include "../api/signal-maps.h"

int main(int argc, char **argv)
{
	int bad = signal_loop(argc > 1 ? atoi(argv[1]) : 400);
	printf("%d %d\n", bad, (int)sig_runs);
	return bad;
}
