/* The core (layers 1-6, lib/libmlcore.la) links and works without run
 * mode (layer 7): tasks are limited and interrupted, the global limit
 * applies, ml_write_metrics counts the interruptions (issue 33: it was
 * run mode's, and the core lacked it), and run mode's variables are not
 * read at all.  ml_write_metrics refuses a negative descriptor before any
 * system call on it (a seccomp filter kills the process that makes one).
 * Linked with the convenience library, not libmemlimits. */
#define _GNU_SOURCE
#include <errno.h>
#include <memlimits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__) && (defined(__x86_64__) || defined(__aarch64__))
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#if defined(__x86_64__)
#define TEST_ARCH AUDIT_ARCH_X86_64
#else
#define TEST_ARCH AUDIT_ARCH_AARCH64
#endif
#endif

#include "../tap/tap.h"

#define BLOCK 4096

/* In a child: a negative descriptor given to fcntl, fstat or write kills
 * the process (SIGSYS); then ml_write_metrics(-1) and (-2).  Exit 0 when
 * both return ML_EINVAL with errno EBADF, 77 when no filter can be
 * installed. */
static void negative_fd_child(void)
{
#ifdef TEST_ARCH
	struct sock_filter f[] = {
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
	             offsetof(struct seccomp_data, arch)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, TEST_ARCH, 1, 0),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
	             offsetof(struct seccomp_data, nr)),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fcntl, 3, 0),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_fstat, 2, 0),
	    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_write, 1, 0),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	    /* The descriptor: the low word of the first argument (little
	     * endian), negative as an int. */
	    BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
	             offsetof(struct seccomp_data, args[0])),
	    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x80000000u, 0, 1),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
	    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		_exit(77);
	int ok = 1;
	for (int fd = -1; fd >= -2; fd--) {
		errno = 0;
		int rc = ml_write_metrics(fd);
		ok &= rc == ML_EINVAL && errno == EBADF;
	}
	_exit(ok ? 0 : 1);
#else
	_exit(77);
#endif
}

/* ml_write_metrics' text through a pipe (it fits the pipe's buffer). */
static void metrics_text(char *buf, size_t cap)
{
	int p[2];
	buf[0] = 0;
	if (pipe(p))
		return;
	int rc = ml_write_metrics(p[1]);
	close(p[1]);
	size_t len = 0;
	ssize_t n;
	while (rc == 0 && len < cap - 1 &&
	       (n = read(p[0], buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = 0;
	close(p[0]);
}

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

	/* The two interruptions above in the core's metrics (the task
	 * whose token was set before it ran never started). */
	char text[8192];
	metrics_text(text, sizeof text);
	if (!tap_ok(!strncmp(text, "# HELP memlimits_heap_bytes ", 28) &&
	                strstr(text, "\nmemlimits_tasks_started_total 2\n") &&
	                strstr(text, "\nmemlimits_tasks_interrupted_total{"
	                             "reason=\"alloc_limit\"} 1\n") &&
	                strstr(text, "\nmemlimits_tasks_interrupted_total{"
	                             "reason=\"global_limit\"} 1\n") &&
	                strstr(text, "\nmemlimits_global_limit_bytes +Inf\n"),
	            "ml_write_metrics, in the core, counts the interruptions"))
		fputs(text, stderr);
	fflush(NULL);
	pid_t nfd = fork();
	if (nfd == 0)
		negative_fd_child();
	int nst = 0;
	waitpid(nfd, &nst, 0);
	if (WIFEXITED(nst) && WEXITSTATUS(nst) == 77)
		tap_skip(1, "no seccomp filter here");
	else
		tap_ok(WIFEXITED(nst) && WEXITSTATUS(nst) == 0,
		       "ml_write_metrics(-1), (-2): ML_EINVAL, EBADF, and no "
		       "system call on the descriptor (status 0x%x)",
		       nst);

	fflush(NULL);
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
