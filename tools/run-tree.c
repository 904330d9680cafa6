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
 * program's status.  A descendant that outlives the program keeps its
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

/* The budget's name and object, made now: the name of no other run
 * (O_EXCL), this user's only.  Left empty: the program fills it in. */
void ml__run_tree_make(const char *v)
{
	tree_bytes = ml__run_tree_bytes(v);
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

/* A signal sent to the command is the program's: passed on.  One the
 * kernel made (^C, ^\ and a hang-up at the terminal: si_code > 0) reached
 * the program's process group already: not sent twice. */
static void forward(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	if (child > 0 && (!si || si->si_code <= 0))
		kill(child, sig);
}

static const int forwarded[] = {SIGINT,  SIGTERM, SIGHUP,
                                SIGQUIT, SIGUSR1, SIGUSR2};

/* Fork the program (path, argv), wait for it, remove the budget's
 * object, and end as the program ended. */
void ml__run_tree_exec(const char *path, char **argv)
{
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		shm_unlink(tree_object);
		ml__tool_usage_error(CMD, "cannot run '%s': %s", path,
		                     strerror(errno));
	}
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
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
	struct sigaction sa = {0};
	sa.sa_sigaction = forward;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
		sigaction(forwarded[i], &sa, NULL);
	sigprocmask(SIG_SETMASK, &old, NULL);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	shm_unlink(tree_object);
	if (WIFEXITED(status))
		exit(WEXITSTATUS(status));
	int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
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
