/* The loop of tests/api/test-mapped-signal.c and tests/cli/test-run-signal.c
 * (issue 41, item 2): a thread maps, cuts, protects, moves and unmaps big
 * mappings while a SIGALRM every 100 us (setitimer) interrupts it, and the
 * handler maps, unmaps, mallocs and frees.  Before the mapped ranges' lock
 * became the owner word, a handler that arrived while its thread was
 * inside the table (an munmap's update, its system call under the lock)
 * spun for ever on the lock its own thread held: the caller's time limit
 * (tap_case, timeout(1)) is the bounded wait that makes that a failure.
 * Plain, the loop ends in about a second. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>

#define SIG_MIB ((size_t)1 << 20)

static volatile sig_atomic_t sig_runs, sig_bad;

static void on_alarm(int sig)
{
	(void)sig;
	int e = errno;
	char *m = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		sig_bad = 1;
	} else {
		m[0] = 1;
		/* A cut (the general unmap) and the rest whole. */
		if (munmap(m, 4096) != 0 || munmap(m + 4096, 60 << 10) != 0)
			sig_bad = 1;
	}
	/* malloc in a handler is not async-signal-safe in glibc (its arena
	 * lock): the loop below never mallocs, so the handler never
	 * interrupts glibc's own malloc, only ours around the mmap family. */
	char *volatile b = malloc(100);
	char *volatile big = malloc(200 << 10); /* glibc maps it */
	if (!b || !big)
		sig_bad = 1;
	free(b);
	free(big);
	sig_runs++;
	errno = e;
}

/* rounds of the loop; 0 on success, else the step that failed. */
static int signal_loop(int rounds)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGALRM, &sa, NULL) != 0)
		return 1;
	struct itimerval it = {{0, 100}, {0, 100}};
	if (setitimer(ITIMER_REAL, &it, NULL) != 0)
		return 2;
	int bad = 0;
	for (int i = 0; i < rounds && !bad; i++) {
		size_t n = (8 + (size_t)(i % 4) * 8) * SIG_MIB;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) {
			bad = 3;
			break;
		}
		p[0] = 1;
		p[n - 1] = 1;
		if (mprotect(p, n / 2, PROT_READ) != 0 ||
		    mprotect(p, n / 2, PROT_READ | PROT_WRITE) != 0)
			bad = 4;
		char *q = mremap(p, n, 2 * n, MREMAP_MAYMOVE);
		if (q == MAP_FAILED) {
			bad = 5;
			munmap(p, n);
			break;
		}
		q[2 * n - 1] = 1;
		/* A piece from the middle, then the rest in two. */
		if (munmap(q + SIG_MIB, SIG_MIB) != 0 ||
		    munmap(q, SIG_MIB) != 0 ||
		    munmap(q + 2 * SIG_MIB, 2 * n - 2 * SIG_MIB) != 0)
			bad = 6;
		/* MAP_FIXED over a reservation, and a whole unmap (the fast
		 * path). */
		char *r = mmap(NULL, 4 * SIG_MIB, PROT_NONE,
		               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r == MAP_FAILED ||
		    mmap(r, 2 * SIG_MIB, PROT_READ | PROT_WRITE,
		         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != r ||
		    munmap(r, 4 * SIG_MIB) != 0)
			bad = 7;
	}
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	signal(SIGALRM, SIG_IGN);
	if (!bad && sig_bad)
		bad = 8;
	return bad;
}
