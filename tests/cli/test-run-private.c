/* A program for tests/cli/test-run-private.sh (issue 41): private memory
 * got by ways other than the malloc family and mmap.  "ROUTE N" gets up to
 * N MiB, 1 MiB at a time, writing each, until a call fails; prints
 * "ROUTE MiB-got errno-text" ("0" for errno when nothing failed) and keeps
 * everything until exit.  Routes: libc-malloc, libc-calloc, libc-memalign,
 * libc-valloc, libc-pvalloc (glibc's public __libc_* entry points, called
 * by name as a runtime may), libc-realloc (one block grown by 1 MiB a
 * step through __libc_realloc), sbrk (the break moved by 1 MiB), brk (the
 * same by brk).  "sbrk-cycle N": N MiB by sbrk, given back by sbrk, N MiB
 * again: prints "sbrk-cycle MiB-got-the-second-time errno-text".
 * shmat: a SysV segment of 1 MiB made IPC_PRIVATE, attached and marked
 * for removal (it goes at exit); shm-keyed: the same with a key.
 * "shm-cycle N": N MiB by shmat, detached, N MiB again (as sbrk-cycle).
 * "small N": N MiB of malloc'd 1000-byte blocks (glibc's main arena grows
 * its break with them), written; prints "small N". */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <sys/ipc.h>
#include <sys/shm.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);
extern void __libc_free(void *);

#define MiB ((size_t)1 << 20)

/* One more MiB by the route, written; NULL when the call failed. */
static char *more(const char *route, int i)
{
	static char *grown;
	char *p = NULL;
	if (!strcmp(route, "libc-malloc"))
		p = __libc_malloc(MiB);
	else if (!strcmp(route, "libc-calloc"))
		p = __libc_calloc(1024, 1024);
	else if (!strcmp(route, "libc-memalign"))
		p = __libc_memalign(4096, MiB);
	else if (!strcmp(route, "libc-valloc"))
		p = __libc_valloc(MiB);
	else if (!strcmp(route, "libc-pvalloc"))
		p = __libc_pvalloc(MiB);
	else if (!strcmp(route, "libc-realloc")) {
		char *q = __libc_realloc(grown, (size_t)(i + 1) * MiB);
		if (!q)
			return NULL;
		grown = q;
		return q + (size_t)i * MiB;
	} else if (!strcmp(route, "sbrk")) {
		p = sbrk((intptr_t)MiB);
		return p == (void *)-1 ? NULL : p;
	} else if (!strcmp(route, "brk")) {
		p = sbrk(0);
		return brk(p + MiB) == 0 ? p : NULL;
	} else if (!strcmp(route, "shmat") || !strcmp(route, "shm-keyed")) {
		key_t key = IPC_PRIVATE;
		if (route[3] == '-') /* a key of this process's own */
			key = (key_t)(0x4d4c0000u ^ ((unsigned)getpid() << 11) ^
			              (unsigned)i);
		int id = shmget(key, MiB, IPC_CREAT | IPC_EXCL | 0600);
		if (id < 0)
			return NULL;
		p = shmat(id, NULL, 0);
		int e = errno;
		shmctl(id, IPC_RMID, NULL);
		errno = e;
		return p == (void *)-1 ? NULL : p;
	} else {
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int n = atoi(argv[2]), got = 0, err = 0;
	if (!strcmp(argv[1], "small")) {
		for (size_t k = 0; k < (size_t)n * MiB / 1000; k++) {
			char *volatile q = malloc(1000); /* not elided */
			if (!q)
				return 1;
			memset(q, 1, 1000);
		}
		printf("small %d\n", n);
		return 0;
	}
	const char *route = argv[1];
	if (!strcmp(route, "sbrk-cycle")) {
		for (int i = 0; i < n; i++) {
			char *p = sbrk((intptr_t)MiB);
			if (p == (void *)-1)
				return 1;
			memset(p, 1, MiB);
		}
		if (sbrk(-(intptr_t)((size_t)n * MiB)) == (void *)-1)
			return 1;
		route = "sbrk";
	}
	if (!strcmp(route, "shm-cycle")) {
		static char *at[4096];
		if (n > 4096)
			return 2;
		for (int i = 0; i < n; i++) {
			if (!(at[i] = more("shmat", i)))
				return 1;
			memset(at[i], 1, MiB);
		}
		for (int i = 0; i < n; i++)
			if (shmdt(at[i]) != 0)
				return 1;
		route = "shmat";
	}
	for (; got < n; got++) {
		errno = 0;
		char *p = more(route, got);
		if (!p) {
			err = errno;
			break;
		}
		memset(p, 1, MiB);
	}
	printf("%s %d %s\n", argv[1], got, err ? strerror(err) : "0");
	return 0;
}
