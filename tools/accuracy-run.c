/* memlimits accuracy: the runs.  Each is `memlimits run --on-limit abort
 * --stats DIR --seed K+i -- PROGRAM`, this very command exec'd again (one
 * code path for the limits and the checks on the program), J at a time in
 * a directory of their own: abort mode ends a stopped run at the trip with
 * status 3, so the statistics file it writes then holds the figures at
 * the trip, whatever the program would have done after a refusal: the
 * bytes allocated through the allocation that reached an allocation
 * limit, and the blocks held (heap_bytes; the refused one not among
 * them) for a held limit, whose estimate counts held blocks only.  The report
 * carries only the sample count at the stop (k S, whatever the bytes), which is
 * why the statistics file is read, by cmd-stats.c's reader. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "accuracy.h"
#include "run.h"
#include "tool.h"

/* run.h names its command's messages; these are this one's. */
#undef CMD
#define CMD "accuracy"

enum outcome { STOPPED, FITS, FAILED, CRASHED, TIMED_OUT, NO_STATS };

struct run {
	pid_t pid;
	int status;
	enum outcome how;
	uint64_t stop;
};

static char *tmpdir;

/* The runs' directory, whatever the program left in it (it runs there
 * and may write files and directories of its own): rm -r, rather than a
 * tree walk of our own. */
static void remove_tmpdir(void)
{
	if (!tmpdir)
		return;
	char cmd[] = "rm";
	pid_t pid = fork();
	if (pid == 0) {
		char *av[] = {cmd, "-rf", "--", tmpdir, NULL};
		execvp("rm", av);
		_exit(127);
	}
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
}

/* The child: this command's `run`, its output to files of the run
 * directory (what the program writes is not ours to show). */
static _Noreturn void exec_run(const struct ml__acc_runs *o, uint64_t i)
{
	char seed[32], err[64], *opt;
	snprintf(seed, sizeof seed, "%" PRIu64, o->seed + i);
	snprintf(err, sizeof err, "err.%" PRIu64, i);
	int fd = open("/dev/null", O_RDWR);
	int ef = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || ef < 0 || dup2(fd, 0) < 0 || dup2(fd, 1) < 0 ||
	    dup2(ef, 2) < 0)
		_exit(126);
	/* --timeout: the alarm survives the two execs (memlimits run's and
	 * the program's), and SIGALRM's default action ends the program. */
	if (o->timeout)
		alarm((unsigned)o->timeout);
	opt = o->m.kind == ML__ACC_ALLOC  ? "--alloc-limit"
	      : o->m.kind == ML__ACC_HELD ? "--held-limit"
	                                  : "--heap-limit";
	size_t nargs = 0;
	while (o->argv[nargs])
		nargs++;
	char **av = calloc(nargs + 16, sizeof *av);
	if (!av)
		_exit(126);
	size_t k = 0;
	av[k++] = "memlimits";
	av[k++] = "run";
	av[k++] = opt;
	av[k++] = (char *)o->limit_text;
	if (o->interval_text) {
		av[k++] = "--interval";
		av[k++] = (char *)o->interval_text;
	}
	av[k++] = "--seed";
	av[k++] = seed;
	av[k++] = "--on-limit";
	av[k++] = "abort";
	av[k++] = "--stats";
	av[k++] = ".";
	av[k++] = "--";
	for (size_t j = 0; j < nargs; j++)
		av[k++] = o->argv[j];
	execv("/proc/self/exe", av);
	_exit(126);
}

static void ended(const struct ml__acc_runs *o, struct run *r, int status)
{
	r->status = status;
	if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM && o->timeout) {
		r->how = TIMED_OUT;
		return;
	}
	if (WIFSIGNALED(status)) {
		r->how = CRASHED;
		return;
	}
	int code = WEXITSTATUS(status);
	if (code == 0) {
		r->how = FITS;
		return;
	}
	if (code != 3) {
		r->how = FAILED;
		return;
	}
	char path[64];
	snprintf(path, sizeof path, "memlimits.%ld.json", (long)r->pid);
	if (access(path, R_OK) != 0) {
		r->how = NO_STATS;
		return;
	}
	uint64_t bytes, heap;
	ml__stats_read_stop(path, &bytes, &heap);
	r->stop = o->m.kind == ML__ACC_HELD ? heap : bytes;
	r->how = STOPPED;
}

/* A run that `memlimits run` refused (status 2 and its one line): the
 * input was bad for every run; that line, as this command's. */
static void refused_run(uint64_t i, char *line, size_t cap)
{
	char err[64];
	snprintf(err, sizeof err, "err.%" PRIu64, i);
	FILE *f = fopen(err, "r");
	line[0] = 0;
	if (f) {
		if (!fgets(line, (int)cap, f))
			line[0] = 0;
		fclose(f);
	}
	line[strcspn(line, "\n")] = 0;
}

void ml__acc_run(struct ml__acc_runs *o, uint64_t **x, size_t *n,
                 struct ml__acc_tally *t)
{
	/* A program named by a path is checked here, before any run, and
	 * given by its full name: the runs start in their own directory.  A
	 * name without a slash is left to each run's PATH search, whose
	 * refusal becomes this command's line below. */
	if (strchr(o->argv[0], '/')) {
		if (access(o->argv[0], X_OK) != 0)
			ml__tool_usage_error(CMD, "'%s': %s", o->argv[0],
			                     strerror(errno));
		char *full = realpath(o->argv[0], NULL);
		if (!full)
			ml__tool_usage_error(CMD, "'%s': %s", o->argv[0],
			                     strerror(errno));
		o->argv[0] = full;
	}
	char tmpl[] = "/tmp/memlimits-accuracy.XXXXXX";
	const char *base = getenv("TMPDIR");
	if (base && *base) {
		if (asprintf(&tmpdir, "%s/memlimits-accuracy.XXXXXX", base) < 0)
			ml__tool_usage_error(CMD, "out of memory");
	} else {
		tmpdir = strdup(tmpl);
	}
	if (!tmpdir || !mkdtemp(tmpdir))
		ml__tool_usage_error(CMD,
		                     "cannot make a directory for the "
		                     "runs: %s",
		                     strerror(errno));
	atexit(remove_tmpdir);
	char cwd[4096];
	if (!getcwd(cwd, sizeof cwd))
		ml__tool_usage_error(CMD, "getcwd: %s", strerror(errno));
	if (chdir(tmpdir) != 0)
		ml__tool_usage_error(CMD, "%s: %s", tmpdir, strerror(errno));
	struct run *runs = ml__tool_calloc(CMD, o->runs, sizeof *runs);
	*x = ml__tool_calloc(CMD, o->runs, sizeof **x);
	*n = 0;
	uint64_t next = 0, live = 0, done = 0;
	while (done < o->runs) {
		while (live < o->jobs && next < o->runs) {
			fflush(NULL);
			pid_t pid = fork();
			if (pid < 0)
				ml__tool_usage_error(CMD, "fork: %s",
				                     strerror(errno));
			if (pid == 0)
				exec_run(o, next);
			runs[next++].pid = pid;
			live++;
		}
		int status;
		pid_t pid = wait(&status);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid < 0)
			ml__tool_usage_error(CMD, "wait: %s", strerror(errno));
		for (uint64_t i = 0; i < next; i++)
			if (runs[i].pid == pid) {
				ended(o, &runs[i], status);
				live--;
				done++;
				break;
			}
	}
	for (uint64_t i = 0; i < o->runs; i++) {
		struct run *r = &runs[i];
		if (r->how == FAILED && WEXITSTATUS(r->status) == 2) {
			char line[512];
			refused_run(i, line, sizeof line);
			if (!strncmp(line, "memlimits run: ", 15))
				ml__tool_usage_error(CMD, "%s", line + 15);
		}
		switch (r->how) {
		case STOPPED:
			(*x)[(*n)++] = r->stop;
			t->stopped++;
			break;
		case FITS:
			t->fits++;
			break;
		case FAILED:
			if (!t->failed++)
				t->first_status = WEXITSTATUS(r->status);
			break;
		case CRASHED:
			if (!t->crashed++)
				t->first_sig = WTERMSIG(r->status);
			break;
		case TIMED_OUT:
			t->timed_out++;
			break;
		case NO_STATS:
			t->no_stats++;
			break;
		}
	}
	free(runs);
	if (chdir(cwd) != 0)
		ml__tool_usage_error(CMD, "%s: %s", cwd, strerror(errno));
}
