/* The core (layers 1-6, lib/libmlcore.la) links and works without run
 * mode (layer 7): tasks are limited and interrupted, the global limit
 * applies, and run mode's variables are not read at all.  Linked with the
 * convenience library, not libmemlimits. */
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tap/tap.h"

#define BLOCK 4096

static void *hog(void *arg)
{
	size_t cap = *(size_t *)arg;
	void *prev = NULL;
	/* A linked list, so that nothing leaks past the task. */
	for (size_t i = 0; i < cap / BLOCK; i++) {
		void **p = malloc(BLOCK);
		if (!p)
			break;
		*p = prev;
		prev = p;
	}
	while (prev) {
		void *next = *(void **)prev;
		free(prev);
		prev = next;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "child") == 0) {
		/* Run mode's variables are set: with run mode linked, 64 MiB
		 * could not be allocated under a 1 MiB limit. */
		size_t cap = 64 << 20;
		char *keep[64 << 20 >> 12];
		size_t n = 0;
		for (; n < cap / BLOCK; n++)
			if (!(keep[n] = malloc(BLOCK)))
				break;
		for (size_t i = 0; i < n; i++)
			free(keep[i]);
		return n == cap / BLOCK ? 0 : 1;
	}

	ml_set_seed(12345);
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	l.delivery = ML_DELIVER_FAIL;
	size_t cap = 256 << 20;
	ml_outcome out;
	ml_status st = ml_run(&l, hog, &cap, &out);
	/* With S = 80000 and a 1 MiB limit (k = 14 samples), the chance of
	 * not tripping within 256 MiB is below 1e-300 (docs/statistics.md). */
	tap_is_int(st, ML_ALLOC_LIMIT, "a task is interrupted at its limit");
	/* The k-th sample trips the task and its allocation is refused,
	 * which takes that sample back: (k - 1) samples of S bytes remain
	 * (a 4 KiB block carries at most one). */
	uint64_t S = ml_sample_interval();
	uint64_t k = ((1 << 20) + S - 1) / S;
	tap_is_int((int64_t)out.allocated, (int64_t)((k - 1) * S),
	           "its estimate is k - 1 samples");

	ml_token *tok = ml_token_new();
	ml_token_set(tok);
	tap_is_int(ml_limit_with_token(tok, hog, &cap, NULL), ML_CANCELLED,
	           "a set token cancels");
	ml_token_free(tok);

	tap_is_int(ml_set_global_limit(ml_global_memory_usage() + (4 << 20)), 0,
	           "a global limit is set");
	l = (ml_limits)ML_LIMITS_INIT;
	l.global = true;
	l.delivery = ML_DELIVER_FAIL;
	st = ml_run(&l, hog, &cap, NULL);
	tap_is_int(st, ML_GLOBAL_LIMIT, "the global limit interrupts a task");
	ml_set_global_limit(ML_NO_LIMIT);

	pid_t pid = fork();
	if (pid == 0) {
		setenv("MEMLIMITS_ALLOC_LIMIT", "1MiB", 1);
		setenv("MEMLIMITS_HEAP_LIMIT", "1MiB", 1);
		execl(argv[0], argv[0], "child", (char *)NULL);
		_exit(127);
	}
	int ws = 0;
	waitpid(pid, &ws, 0);
	tap_ok(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
	       "MEMLIMITS_ALLOC_LIMIT and _HEAP_LIMIT are not read without "
	       "run mode (status 0x%x)",
	       ws);
	return tap_done();
}
