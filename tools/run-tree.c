/* memlimits run --tree-heap-limit: the program and all its descendants
 * under one shared budget of their own (docs/shared.md, "memlimits run").
 *
 * The command makes a budget name no other run has ("run.PID.RANDOM") and
 * its object, empty (O_EXCL, mode 0600), passes both on through the
 * environment (MEMLIMITS_SHARED=NAME:BYTES, and MEMLIMITS_SHARED_TREE=PID
 * of the program: the one process that fills the table in; the others
 * join it and never make one), and then, instead of exec'ing the program,
 * forks it and waits: when the program ends, however it ends (SIGKILL
 * included), the object is removed and the command exits with the
 * program's status, or dies of its signal (signals sent to the command:
 * "Signals" below).  A descendant that outlives the program keeps its
 * mapping; one that starts after the removal runs without the tree limit
 * (and says so): nothing is ever left in /dev/shm by a run, unless the
 * command itself is killed with SIGKILL. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../lib/util/util.h"
#include "run.h"
#include "tool.h"

static char tree_name[64];   /* the budget: run.PID.RANDOM */
static char tree_object[96]; /* its object: /memlimits.UID.NAME */
static uint64_t tree_bytes;
static const char *tree_from; /* P% of what, or NULL */
static volatile pid_t child;

uint64_t ml__run_tree_bytes(const char *v)
{
	uint64_t x = 0;
	if (!strchr(v, '%')) {
		ml__parse_size(v, &x);
		return x;
	}
	uint64_t pct = 0;
	ml__parse_percent(v, &pct);
	const char *of;
	uint64_t total = ml__memory_total(ML__CGROUP_ROOT, &of);
	if (!of)
		ml__tool_usage_error(CMD,
		                     "--tree-heap-limit %s: the memory size "
		                     "cannot be read",
		                     v);
	tree_from = of;
	x = ml__percent_of(total, pct);
	return x ? x : 1;
}

/* Signals.  Every catchable signal whose default ends a process ends the
 * command only after the object is removed (docs/shared.md).  Before the
 * fork (between making the object and forking: --verbose into a closed
 * pipe) such a signal removes it and ends the command.  After the fork
 * the command stands for the program: a signal sent to it is passed on,
 * and the command ends as the program ends.  Not passed on: those the
 * terminal made (^C, ^\ and a hang-up: they reached the program's process
 * group already, not sent twice), and the command's own trouble (a fault,
 * abort, a write to a closed pipe), which ends it as before the fork.  A
 * signal ignored when the command started (nohup, `&` in a script) stays
 * ignored: it cannot end the command, and the program inherits it as a
 * plain exec would give it.  The program starts with the mask and the
 * dispositions the command started with; SIGCHLD at its default
 * (tools/cmd-run.c). */
static char tree_path[128]; /* /dev/shm + tree_object, for unlink(2) */
static sigset_t entry_mask, caught;

/* The object's removal, safe in a signal handler (shm_unlink is the same
 * unlink of /dev/shm/NAME on Linux, but not async-signal-safe by name). */
static void remove_object(void)
{
	if (tree_path[0])
		unlink(tree_path);
}

static bool ends_process(int sig)
{
	switch (sig) {
	case SIGKILL:
	case SIGSTOP:
	case SIGTSTP:
	case SIGTTIN:
	case SIGTTOU:
	case SIGCHLD:
	case SIGCONT:
	case SIGURG:
	case SIGWINCH:
		return false;
	default:
		return true;
	}
}

/* The command's own trouble: a fault of its own, or a signal it sent
 * itself (abort(3); the kernel's SIGPIPE and SIGXFSZ for its write come
 * as SI_USER from its own pid). */
static bool own_trouble(int sig, const siginfo_t *si)
{
	if (si->si_code > 0)
		return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL ||
		       sig == SIGFPE || sig == SIGTRAP || sig == SIGSYS;
	return (si->si_code == SI_USER || si->si_code == SI_QUEUE ||
	        si->si_code == SI_TKILL) &&
	       si->si_pid == getpid();
}

/* ^C, ^\ and a hang-up: the kernel sent them to the whole foreground
 * process group, the program included. */
static bool from_terminal(int sig, const siginfo_t *si)
{
	return (sig == SIGINT || sig == SIGQUIT || sig == SIGHUP) &&
	       si->si_code == SI_KERNEL;
}

static void on_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	int saved = errno;
	pid_t c = child;
	if (c > 0 && !own_trouble(sig, si)) {
		if (!from_terminal(sig, si))
			kill(c, sig);
	} else {
		/* Removed, then the signal's own default: delivered when
		 * the handler returns and the mask is restored. */
		remove_object();
		struct sigaction dfl = {.sa_handler = SIG_DFL};
		sigaction(sig, &dfl, NULL);
		raise(sig);
	}
	errno = saved;
}

/* The handlers, installed with every signal blocked (the caller unblocks
 * once the object and its path are recorded). */
static void catch_signals(void)
{
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &entry_mask);
	sigemptyset(&caught);
	struct sigaction sa = {0};
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	for (int sig = 1; sig <= SIGRTMAX; sig++) {
		struct sigaction was;
		if (!ends_process(sig) || sigaction(sig, NULL, &was) ||
		    was.sa_handler == SIG_IGN)
			continue; /* glibc's own (32, 33) fail here */
		if (!sigaction(sig, &sa, NULL))
			sigaddset(&caught, sig);
	}
}

/* The budget's name and object, made now: the name of no other run
 * (O_EXCL), this user's only.  Left empty: the program fills it in. */
void ml__run_tree_make(const char *v)
{
	tree_bytes = ml__run_tree_bytes(v);
	catch_signals();
	for (int tries = 0; tries < 16; tries++) {
		uint64_t r = 0;
		if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			r = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^
			    (uint64_t)ts.tv_sec ^ (uint64_t)tries << 56;
		}
		snprintf(tree_name, sizeof tree_name, "run.%ld.%016" PRIx64,
		         (long)getpid(), r);
		ml__shared_object_name(tree_name, tree_object,
		                       sizeof tree_object);
		int fd = shm_open(
		    tree_object,
		    O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0) {
			close(fd);
			snprintf(tree_path, sizeof tree_path, "/dev/shm%s",
			         tree_object);
			sigprocmask(SIG_SETMASK, &entry_mask, NULL);
			char env[160];
			snprintf(env, sizeof env, "%s:%" PRIu64, tree_name,
			         tree_bytes);
			if (setenv("MEMLIMITS_SHARED", env, 1))
				break;
			return;
		}
		if (errno != EEXIST)
			ml__tool_usage_error(
			    CMD,
			    "--tree-heap-limit: cannot make the "
			    "shared budget %s: %s",
			    tree_object, strerror(errno));
	}
	remove_object();
	ml__tool_usage_error(CMD, "--tree-heap-limit: cannot make the shared "
	                          "budget");
}

void ml__run_tree_describe(const char *v)
{
	fprintf(stderr,
	        "memlimits run: tree heap limit = %" PRIu64 " bytes (%s%s%s) "
	        "for PROGRAM and all its descendants together, the shared "
	        "budget %s (/dev/shm%s), removed when PROGRAM ends; PROGRAM "
	        "runs as a child of memlimits run (--tree-heap-limit)\n",
	        tree_bytes, v, tree_from ? " of " : "",
	        tree_from ? tree_from : "", tree_name, tree_object);
}

/* Fork the program (path, argv), wait for it, remove the budget's
 * object, and end as the program ended. */
void ml__run_tree_exec(const char *path, char **argv)
{
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		remove_object();
		ml__tool_usage_error(CMD, "cannot run '%s': %s", path,
		                     strerror(errno));
	}
	if (pid == 0) {
		/* Our handlers gone before anything can be delivered: the
		 * program starts as a plain exec would start it. */
		for (int sig = 1; sig <= SIGRTMAX; sig++)
			if (sigismember(&caught, sig) == 1)
				signal(sig, SIG_DFL);
		sigprocmask(SIG_SETMASK, &entry_mask, NULL);
		/* The program's pid: the first member, and the process that
		 * writes the report when no limit is reached. */
		char me[24];
		snprintf(me, sizeof me, "%ld", (long)getpid());
		if (setenv("MEMLIMITS_SHARED_TREE", me, 1) ||
		    (getenv("MEMLIMITS_REPORT_PID") &&
		     setenv("MEMLIMITS_REPORT_PID", me, 1)))
			_exit(2);
		execv(path, argv);
		fprintf(stderr, "memlimits run: cannot run '%s': %s\n", path,
		        strerror(errno));
		_exit(ML__TOOL_USAGE);
	}
	child = pid;
	sigprocmask(SIG_SETMASK, &entry_mask, NULL);
	/* Waited for without reaping it: until it is reaped its pid names
	 * no other process, so a signal passed on meanwhile cannot reach
	 * one (a reused pid).  Then reaped with every signal blocked. */
	siginfo_t info;
	int got;
	do {
		memset(&info, 0, sizeof info);
		got = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT);
	} while (got < 0 && errno == EINTR);
	int err = errno;
	sigprocmask(SIG_BLOCK, &all, NULL);
	child = 0;
	remove_object();
	if (got < 0) {
		/* SIGCHLD is at its default (cmd-run.c): not expected. */
		fprintf(stderr,
		        "memlimits run: cannot wait for '%s' (pid %ld): %s\n",
		        path, (long)pid, strerror(err));
		exit(ML__TOOL_USAGE);
	}
	while (waitid(P_PID, (id_t)pid, &info, WEXITED) < 0 && errno == EINTR)
		;
	if (info.si_code == CLD_EXITED)
		exit(info.si_status);
	int sig = info.si_status;
	/* The same death for our parent to see, without a second core. */
	struct rlimit no_core = {0, 0};
	setrlimit(RLIMIT_CORE, &no_core);
	signal(sig, SIG_DFL);
	sigset_t one;
	sigemptyset(&one);
	sigaddset(&one, sig);
	sigprocmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	exit(128 + sig);
}
