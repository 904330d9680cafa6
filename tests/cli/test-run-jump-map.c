/* A program for tests/cli/test-run-jump-map.sh (issue 41, item 3): inside
 * ml_run with a 1 MiB allocation limit and JUMP delivery, an mmap of
 * 64 MiB trips the limit and leaves by the jump; then, outside the task,
 * one malloc of argv[1] MiB.  Prints "jumped" (or "returned") and "got"
 * or "refused".  Before, the jump left the thread's `mapping` flag set,
 * and run mode judged the block as a mapping: the headroom (L/6) added,
 * 230 MiB under --heap-limit 256MiB was refused. */
#define _GNU_SOURCE
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *body(void *arg)
{
	void *p = mmap(NULL, 64 << 20, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	*(void **)arg = p;
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	l.delivery = ML_DELIVER_JUMP;
	void *p = NULL;
	ml_status st = ml_run(&l, body, &p, NULL);
	const char *how = st == ML_ALLOC_LIMIT && !p ? "jumped" : "returned";
	size_t n = (size_t)atoi(argv[1]) << 20;
	char *volatile b = malloc(n);
	printf("%s %s\n", how, b ? "got" : "refused");
	free(b);
	return 0;
}
