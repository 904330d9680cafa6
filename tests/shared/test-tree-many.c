/* A process tree of tests/shared/test-tree-many.sh, run as PROGRAM by
 * `memlimits run --tree-heap-limit` (which preloads the library; this
 * program is not linked with it):
 *
 *   test-tree-many N mix|full|small
 *
 * forks N children, which take memory (wants() below) and hold it.
 * mix: one taking 300 MiB; once it holds, N - 2 at once taking 1 to 3
 * MiB each (more than the limit leaves), every other one exec'ing this
 * program again (a member that joins by name at start), the rest staying
 * forked (a member by fork, which claims its slot at its first sampled
 * allocation or fold); once they all hold, one asking for 600 MiB in one
 * block.  full (for a table of 1024 slots): N - 30 small forked members,
 * each with its slot, then 30 forked children with one 2 MiB block each,
 * of which the last N + 1 - 1024 find no slot.  small: N forked children
 * at once, each taking 15 blocks of 60 KiB (900 KiB, less than a
 * publication batch).  Each child reports
 * through a pipe what it holds (its blocks' usable sizes) and the tree's
 * limit as it sees it, and holds until the parent closes the pipe it
 * waits on; while all hold, the parent reads the table
 * (ml_shared_members: which children are counted; ml_shared_usage) and
 * prints a "key value" line each for the script to check.  A child that
 * ends before it reports (one that cannot join: "this process does not
 * start") is seen through a signalfd for SIGCHLD: nothing here waits on
 * time, and nothing sleeps. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "memlimits.h" /* the types only: the functions come by dlsym */
#include "pipes.h"

#define MiB ((size_t)1 << 20)
#define GIANT_MIB 600
#define LARGE_MIB 300

static void *volatile sink;

/* What a child reports: one write, less than PIPE_BUF (atomic). */
struct rec {
	int32_t i, pid;
	int32_t got, refused; /* blocks held; 1 when one was refused */
	uint64_t usable;      /* their usable sizes */
	uint64_t limit;       /* ml_shared_limit() as the child sees it */
};

static void *lib(const char *name)
{
	return dlsym(RTLD_DEFAULT, name);
}

/* What child i of n takes, in blocks of `size`: mode "mix" (1 MiB blocks:
 * child 0 one of 600 MiB, child 1 300, the others 1 + i % 3);
 * mode "full": the first n - 30 children 64 blocks of 1 KiB (a fold: each
 * claims a slot), the last 30 a block of 2 MiB (sampled, but for a
 * chance of e^-26: 2 MiB is 26 sample intervals of 80 000 bytes). */
static int wants(int i, int n, char mode, size_t *size)
{
	if (mode == 's') {
		*size = 60 * 1024;
		return 15;
	}
	if (mode == 'f') {
		*size = i < n - 30 ? 1024 : 2 * MiB;
		return i < n - 30 ? 64 : 1;
	}
	*size = i == 0 ? GIANT_MIB * MiB : MiB;
	return i == 0 ? 1 : i == 1 ? LARGE_MIB : 1 + i % 3;
}

static int child(int i, int want, size_t size, int res, int done)
{
	struct rec r = {.i = i, .pid = (int32_t)getpid()};
	for (int k = 0; k < want; k++) {
		void *p = malloc(size);
		if (!p) {
			r.refused = 1;
			break;
		}
		memset(p, 1, size < 4096 ? size : 4096);
		sink = p;
		r.got++;
		r.usable += malloc_usable_size(p);
	}
	uint64_t (*limit)(void) = (uint64_t(*)(void))lib("ml_shared_limit");
	r.limit = limit ? limit() : 0;
	put(res, &r, sizeof r);
	/* Hold until the parent closes its end: EOF. */
	char c;
	while (read(done, &c, 1) < 0 && errno == EINTR)
		;
	return 0;
}

static int find(const pid_t *pid, int n, pid_t p)
{
	for (int i = 0; i < n; i++)
		if (pid[i] == p)
			return i;
	return -1;
}

/* The parent's view of its children. */
static int n;
static pid_t *pid;
static struct rec *rec;
static char *state; /* 1 reported, 2 ended, 3 both */
static int reported, early, settled, bad;
static char early_st[256];
static int res[2], done[2], sfd;
static sigset_t old;

static void spawn(int from, int to, char mode, char **argv)
{
	fflush(stdout);
	for (int i = from; i < to; i++) {
		/* mix: every other one exec'd; full, small: none. */
		bool execd = mode == 'm' && i % 2 == 0 && i >= 2;
		pid[i] = fork();
		if (pid[i] < 0) {
			printf("fork failed at %d: %s\n", i, strerror(errno));
			exit(1);
		}
		if (pid[i] == 0) {
			close(res[0]);
			close(done[1]);
			sigprocmask(SIG_SETMASK, &old, NULL);
			size_t size;
			int want = wants(i, n, mode, &size);
			if (!execd)
				_exit(child(i, want, size, res[1], done[0]));
			char a[3][16];
			snprintf(a[0], 16, "%d", i);
			snprintf(a[1], 16, "%d", res[1]);
			snprintf(a[2], 16, "%d", done[0]);
			execl("/proc/self/exe", argv[0], "--child", a[0], a[1],
			      a[2], (char *)NULL);
			_exit(126);
		}
	}
}

/* Until each child below `upto` has reported or ended: the results pipe
 * and a signalfd for SIGCHLD, no timeout. */
static void collect(int upto)
{
	while (settled < upto) {
		struct pollfd p[2] = {{res[0], POLLIN, 0}, {sfd, POLLIN, 0}};
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			exit(1);
		}
		if (p[0].revents & POLLIN) {
			struct rec r;
			if (!get(res[0], &r, sizeof r))
				exit(1);
			int k = find(pid, n, r.pid);
			if (k < 0 || (state[k] & 1))
				exit(1);
			rec[k] = r;
			state[k] |= 1;
			reported++;
			settled += state[k] == 1;
		}
		if (p[1].revents & POLLIN) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) < 0)
				exit(1);
			int st;
			pid_t w;
			while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
				int k = find(pid, n, w);
				if (k < 0)
					continue;
				if (!(state[k] & 1)) {
					early++;
					settled++;
					size_t l = strlen(early_st);
					snprintf(early_st + l,
					         sizeof early_st - l, " %d",
					         st);
				} else {
					bad++; /* ended before it was told */
				}
				state[k] |= 2;
			}
		}
	}
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "--child")) {
		/* Exec'd: mode mix only. */
		size_t size;
		int i = atoi(argv[2]), want = wants(i, i + 1, 'm', &size);
		return child(i, want, size, atoi(argv[3]), atoi(argv[4]));
	}
	if (argc != 3 || atoi(argv[1]) < 40 ||
	    (strcmp(argv[2], "mix") && strcmp(argv[2], "full") &&
	     strcmp(argv[2], "small"))) {
		fprintf(stderr, "usage: %s N mix|full|small (N: 40 or more)\n",
		        argv[0]);
		return 2;
	}
	n = atoi(argv[1]);
	char mode = argv[2][0];
	uint64_t (*usage)(void) = (uint64_t(*)(void))lib("ml_shared_usage");
	uint64_t (*limit)(void) = (uint64_t(*)(void))lib("ml_shared_limit");
	size_t (*members)(ml_shared_member *, size_t) =
	    (size_t(*)(ml_shared_member *, size_t))lib("ml_shared_members");
	if (!usage || !limit || !members) {
		printf("library none\n");
		return 1;
	}
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (pipe(res) || pipe(done) || sigprocmask(SIG_BLOCK, &chld, &old))
		return 1;
	sfd = signalfd(-1, &chld, SFD_CLOEXEC);
	pid = calloc((size_t)n, sizeof *pid);
	rec = calloc((size_t)n, sizeof *rec);
	state = calloc((size_t)n, 1);
	ml_shared_member *m = calloc((size_t)n + 64, sizeof *m);
	if (sfd < 0 || !pid || !rec || !state || !m)
		return 1;
	if (mode == 'f') {
		/* The small ones first, each with its slot (or not)
		 * before the 30 larger ones try for the slots left. */
		spawn(0, n - 30, mode, argv);
		collect(n - 30);
		spawn(n - 30, n, mode, argv);
	} else if (mode == 's') {
		spawn(0, n, mode, argv);
	} else {
		/* The large one first, then the many all at once, then the
		 * giant against what they all hold. */
		spawn(1, 2, mode, argv);
		collect(1);
		spawn(2, n, mode, argv);
		collect(n - 1);
		spawn(0, 1, mode, argv);
	}
	close(res[1]);
	close(done[0]);
	collect(n);
	/* All that reported hold now: the table as the members see it. */
	uint64_t total_seen = usage(), lim = limit();
	size_t nm = members(m, (size_t)n + 64);
	int counted = 0, with_limit = 0, refused = 0, uncounted = 0;
	uint64_t total = 0, max = 0, uncounted_held = 0;
	int max_i = -1;
	for (int k = 0; k < n; k++) {
		if (!(state[k] & 1))
			continue;
		bool in = false;
		for (size_t j = 0; j < nm && j < (size_t)n + 64; j++)
			in |= m[j].pid == pid[k];
		counted += in;
		if (!in && (rec[k].got || rec[k].refused)) {
			uncounted++;
			uncounted_held += rec[k].usable;
		}
		with_limit += rec[k].limit == lim && lim != 0;
		refused += rec[k].refused;
		total += rec[k].usable;
		if (rec[k].usable > max) {
			max = rec[k].usable;
			max_i = k;
		}
	}
	printf("children %d\n", n);
	printf("reported %d\n", reported);
	printf("ended_early %d%s\n", early, early_st);
	printf("limit %llu\n", (unsigned long long)lim);
	printf("with_limit %d\n", with_limit);
	printf("members %zu\n", nm);
	printf("counted %d\n", counted);
	printf("refused %d\n", refused);
	printf("total %llu\n", (unsigned long long)total);
	printf("total_seen %llu\n", (unsigned long long)total_seen);
	printf("max %llu child %d\n", (unsigned long long)max, max_i);
	printf("giant %llu\n", (unsigned long long)rec[0].usable);
	printf("large %d\n", rec[1].got);
	printf("uncounted %d\n", uncounted);
	printf("uncounted_held %llu\n", (unsigned long long)uncounted_held);
	fflush(stdout);
	close(done[1]);
	for (int k = 0; k < n; k++) {
		if (state[k] & 2)
			continue;
		int st;
		while (waitpid(pid[k], &st, 0) < 0 && errno == EINTR)
			;
		bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
	}
	printf("exits_bad %d\n", bad);
	return 0;
}
