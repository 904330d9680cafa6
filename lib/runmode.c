/* Run mode: limits for a whole unmodified process (`memlimits run`, or
 * LD_PRELOAD with MEMLIMITS_ALLOC_LIMIT / MEMLIMITS_HEAP_LIMIT set).  Every
 * thread gets a root task from our pool at the bottom of its task stack;
 * their samples add up in one process-wide count (internal.h, struct
 * ml__run). */
#define _GNU_SOURCE
#include "internal.h"
#include "parse.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ml__run ml__run = {.alloc_limit = ML_NO_LIMIT,
                          .heap_limit = ML_NO_LIMIT};

ML__POOL(, ml__root_pool, (sizeof(struct ml__task) + 63) & ~(size_t)63)

static bool read_size(const char *name, uint64_t *out)
{
	const char *v = ml__getenv(name);
	if (!v)
		return false;
	int r = ml__parse_limit(v, out);
	if (r == 0)
		return true;
	if (r == ML__PARSE_NO_LIMIT)
		ml__diag("ignoring %s=%s: 2^64-1 bytes would mean no limit "
		         "(unset %s for none)",
		         name, v, name);
	else
		ml__diag("ignoring %s=%s: expected a size (e.g. 512MiB, 2G)",
		         name, v);
	return false;
}

/* Paths are copied at start: a program may overwrite its environment
 * strings (setproctitle: redis, nginx) before we write at exit.  A path
 * that does not fit is refused, never cut short. */
static char report_path[ML__PATH_MAX], profile_path[ML__PATH_MAX],
    stats_dir[ML__PATH_MAX];

static const char *read_path(const char *name, char *buf)
{
	const char *v = ml__getenv(name);
	if (!v || !*v)
		return NULL;
	size_t n = strlen(v);
	if (n >= ML__PATH_MAX) {
		ml__diag("ignoring %s: a path of %zu bytes (at most %u)", name,
		         n, ML__PATH_MAX - 1);
		return NULL;
	}
	memcpy(buf, v, n + 1);
	return buf;
}

const char *ml__strerror(int err)
{
	/* Neither allocates nor looks at the locale. */
	const char *s = strerrordesc_np(err);
	return s ? s : "unknown error";
}

void ml__self_exe(char *buf, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	if (n > 0)
		buf[n] = 0;
	else
		memcpy(buf, "?", 2);
}

void ml__out_failed(const char *what, const char *path, int err)
{
	ml__diag("cannot write the %s to %s: %s", what, path,
	         ml__strerror(err));
}

/* Same file as one of the pipes or sockets the process has as stdout or
 * stderr (/dev/stdout in a pipeline): meant to be written to. */
static bool is_stdio(const struct stat *st)
{
	int fds[3] = {1, 2, ml__diag_fd()};
	for (int i = 0; i < 3; i++) {
		struct stat s2;
		if (fds[i] >= 0 && fstat(fds[i], &s2) == 0 &&
		    s2.st_dev == st->st_dev && s2.st_ino == st->st_ino)
			return true;
	}
	return false;
}

static bool names_stderr(const char *path)
{
	return path &&
	       (!strcmp(path, "/dev/stderr") || !strcmp(path, "/dev/fd/2") ||
	        !strcmp(path, "/proc/self/fd/2"));
}

int ml__out_open(const char *what, const char *path, int flags)
{
	/* Our copy of stderr: works after the program closed fd 2. */
	if (names_stderr(path)) {
		int fd = ml__diag_fd();
		return fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, fd) : -1;
	}
	/* Never block: a FIFO without a reader fails here with ENXIO
	 * instead of hanging the process at exit. */
	int fd = open(
	    path, flags | O_WRONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
	struct stat st;
	if (fd < 0) {
		int err = errno;
		/* ENXIO: a FIFO without a reader, or a socket. */
		if (err != ENXIO || stat(path, &st) != 0 ||
		    !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
			ml__out_failed(what, path, err);
			return -1;
		}
	} else if (fstat(fd, &st) == 0 &&
	           (S_ISREG(st.st_mode) || S_ISCHR(st.st_mode) ||
	            ((S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) &&
	             is_stdio(&st)))) {
		int fl = fcntl(fd, F_GETFL);
		if (fl != -1)
			fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
		return fd;
	}
	if (fd >= 0)
		close(fd);
	ml__diag("cannot write the %s to %s: not a regular file or a "
	         "terminal",
	         what, path);
	return -1;
}

void ml__run_configure(void)
{
	struct ml__run *r = &ml__run;
	uint64_t x;
	if (read_size("MEMLIMITS_ALLOC_LIMIT", &x))
		r->alloc_limit = x;
	if (read_size("MEMLIMITS_HEAP_LIMIT", &x))
		r->heap_limit = x;
	const char *v = ml__getenv("MEMLIMITS_ON_LIMIT");
	if (v) {
		if (!strcmp(v, "fail"))
			r->on_limit = ML__ON_LIMIT_FAIL;
		else if (!strcmp(v, "abort"))
			r->on_limit = ML__ON_LIMIT_ABORT;
		else
			ml__diag(
			    "ignoring MEMLIMITS_ON_LIMIT=%s: expected fail "
			    "or abort",
			    v);
	}
	r->report_path = read_path("MEMLIMITS_REPORT", report_path);
	r->profile_path = read_path("MEMLIMITS_PROFILE", profile_path);
	r->stats_dir = read_path("MEMLIMITS_STATS_DIR", stats_dir);
	/* A report or profile on stderr is sure to be written: keep a copy
	 * of stderr from now on (diag.c). */
	if (names_stderr(r->report_path) || names_stderr(r->profile_path))
		ml__diag_keep();
	r->active =
	    r->alloc_limit != ML_NO_LIMIT || r->heap_limit != ML_NO_LIMIT;
	r->profiling = r->active || r->profile_path || r->report_path;
	r->stats = r->stats_dir != NULL;
	if (!r->active && !r->profiling && !r->stats)
		return;
	uint64_t s = atomic_load(&ml__interval);
	if (r->alloc_limit != ML_NO_LIMIT)
		r->k = ml__samples_needed(r->alloc_limit, s);
	const char *front = ml__malloc_in_front();
	if (r->heap_limit != ML_NO_LIMIT && (r->heap_blind = ml__meter_blind()))
		ml__diag("the heap limit is off: the allocator in use (%s) is "
		         "not glibc's, whose heap is all the meter can read%s",
		         r->heap_blind,
		         front ? "; its malloc comes before the library's: "
		                 "no allocation is seen"
		               : "");
	else if (r->heap_limit != ML_NO_LIMIT)
		ml_set_global_memory_limit(r->heap_limit);
	if (front && r->heap_limit == ML_NO_LIMIT)
		ml__diag("the malloc of %s comes before the library's: no "
		         "allocation is seen, no limit applies",
		         front);
	struct ml__thread *t = &ml__self;
	if (t->state == ML__T_LIVE)
		ml__run_thread_start(t);
}

void ml__run_thread_start(struct ml__thread *t)
{
	if (ml__run.stats)
		ml__force_slow(t); /* every allocation is counted */
	if (!ml__run.active || t->root)
		return;
	struct ml__task *root = ml__pool_get(&ml__root_pool);
	if (!root) {
		ml__diag("no memory for a thread's root task: this thread "
		         "runs without limits");
		return;
	}
	memset(root, 0, sizeof *root);
	root->k = UINT64_MAX; /* the process-wide count decides */
	root->global = ml__run.heap_limit != ML_NO_LIMIT && !ml__run.heap_blind;
	root->delivery = ML_DELIVER_FAIL;
	root->status = ML_OK;
	root->root = true;
	/* At the bottom of the stack: below any task already running. */
	struct ml__task **bottom = &t->top;
	while (*bottom)
		bottom = &(*bottom)->outer;
	*bottom = root;
	t->root = root;
}

void ml__run_thread_exit(struct ml__thread *t)
{
	if (t->root) {
		ml__pool_put(&ml__root_pool, t->root);
		t->root = NULL;
	}
	if (t->stats)
		ml__stats_thread_exit(t);
}

static void fire(ml_status why, uint64_t n)
{
	int expect = ML_OK;
	if (atomic_compare_exchange_strong(&ml__run.fired, &expect, why)) {
		ml__diag_keep(); /* the report on stderr is due at exit */
		ml__profile_trip(why, n);
	}
	if (ml__run.on_limit == ML__ON_LIMIT_ABORT) {
		ml__report_write();
		if (ml__run.stats)
			ml__stats_write();
		_exit(3);
	}
}

int ml__run_sample(struct ml__thread *t, struct ml__task *root, uint64_t s,
                   uint64_t n)
{
	(void)t;
	uint64_t total = atomic_fetch_add(&ml__run.samples, s) + s;
	if (ml__run.alloc_limit != ML_NO_LIMIT && total >= ml__run.k) {
		fire(ML_ALLOC_LIMIT, n);
		root->status = ML_ALLOC_LIMIT; /* sticky: the budget is spent */
		return 0;
	}
	if (root->global && ml__over_global(n)) {
		fire(ML_GLOBAL_LIMIT, n);
		return -1; /* this allocation only */
	}
	return 0;
}

/* Reports and statistics are written when the process exits normally. */
__attribute__((destructor)) static void run_exit(void)
{
	struct ml__thread *t = &ml__self;
	t->busy = 1;
	ml__force_slow(t);
	if (ml__run.profiling)
		ml__report_write();
	if (ml__run.stats)
		ml__stats_write();
	t->busy = 0;
	ml__unforce(t);
}
