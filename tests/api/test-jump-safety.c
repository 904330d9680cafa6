/* Jump safety: a JUMP task interrupted while its allocations come from
 * inside the C library, the loader or code they call back must not be
 * abandoned there (the jump waits for a safe point), so that the locks
 * those frames hold (FILE locks, the loader lock, the stack cache lock,
 * NSS and locale locks) are released and every thread can go on using
 * them.  Each case runs in a child process with a timeout: a deadlock
 * shows up as a timeout, which fails the case.
 *
 * Per case, the task loops { op (a libc call that allocates); ml_check() }
 * (or a plain malloc as the safe point).  Trips only happen at samples,
 * i.e. inside op, so the jump must come from the safe point: the task
 * records where it is, and a jump from inside op shows up as the wrong
 * stage even before a lock is found held.  Afterwards a second thread and
 * the task's own thread use stdio on the shared FILEs, dlopen/dlclose,
 * pthread_create, NSS and locales, and the shared files are checked for
 * torn records. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <memlimits.h>
#include <netdb.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#ifndef JUMP_DSO
#error "JUMP_DSO must name the test library built from tests/api/jump-dso.c"
#endif

static void *volatile sink;

/* ---- Failure reporting inside children -------------------------------- */

static atomic_int failures;
/* glibc remembers a locale whose load failed (ENOMEM half-way: the
 * pending cap or FAIL delivery) as missing for good; the library never
 * fails allocations inside setlocale/newlocale.  Counted apart. */
static atomic_int locale_poisoned;

#define fail(...)                                        \
	do {                                             \
		if (atomic_fetch_add(&failures, 1) < 30) \
			tap_write("# " __VA_ARGS__);     \
	} while (0)

static void *watchdog(void *arg)
{
	unsigned s = tap_timeout((unsigned)(uintptr_t)arg);
	sleep(s);
	tap_write("# watchdog: no end after %u s (deadlock?)", s);
	_exit(9);
}

static void arm_watchdog(unsigned seconds)
{
	pthread_t th;
	if (pthread_create(&th, NULL, watchdog, (void *)(uintptr_t)seconds))
		tap_bail("cannot start the watchdog");
	pthread_detach(th);
}

static void nap_us(long us)
{
	struct timespec ts = {us / 1000000, us % 1000000 * 1000};
	nanosleep(&ts, NULL);
}

/* ---- Resources shared by all threads of a child ----------------------- */

/* vfprintf allocates under the FILE's lock: a %f conversion with a large
 * precision mallocs __printf_fp's digit buffer (about 5 bytes per digit;
 * 20000 digits is above its alloca cutoff).  glibc 2.36 converts a %ls
 * field through a fixed buffer (it only allocates the first time, to set
 * up the conversion), so it rides along in the same call. */
#define FP_DIGITS 20000
#define WIDE_CHARS 64
#define MEM_LINE 1999
#define MEM_LINES 8

static struct {
	char path[64];
	FILE *shared; /* a file every thread writes to */
	/* A memory stream the writer thread also writes to while a task
	 * fills it (fputs reallocs under its lock); NULL when none. */
	pthread_mutex_t pub_lock;
	FILE *pub;
	wchar_t wide[WIDE_CHARS + 1];
	char mline[MEM_LINE + 2];
	char big[1001];
} E = {.pub_lock = PTHREAD_MUTEX_INITIALIZER};

static void env_setup(void)
{
	snprintf(E.path, sizeof E.path, "/tmp/ml-jump-%d", (int)getpid());
	E.shared = fopen(E.path, "w+");
	if (!E.shared)
		tap_bail("cannot open the shared file");
	for (int i = 0; i < WIDE_CHARS; i++)
		E.wide[i] = L'w';
	E.wide[WIDE_CHARS] = 0;
	memset(E.mline, 'm', MEM_LINE);
	E.mline[MEM_LINE] = '\n';
	E.mline[MEM_LINE + 1] = 0;
	memset(E.big, 'b', sizeof E.big - 1);
}

/* Every line of the shared file is a whole record: "W" (writer thread),
 * "V" (verifier), or a task's "1.000...0www...w" (FP_DIGITS zeros,
 * WIDE_CHARS w's).  A conversion whose buffer could not be allocated
 * writes nothing (the %f comes first and fails before any output), so
 * ENOMEM never tears a record; a jump out of vfprintf could. */
static void check_shared_file(void)
{
	if (fflush(E.shared) != 0) {
		fail("fflush(shared) failed: %s", strerror(errno));
		return;
	}
	int fd = open(E.path, O_RDONLY);
	if (fd < 0) {
		fail("cannot reopen %s", E.path);
		return;
	}
	static char buf[1 << 16], line[FP_DIGITS + WIDE_CHARS + 8];
	long len = 0, lines = 0, fp_lines = 0, bad = 0;
	ssize_t n;
	while ((n = read(fd, buf, sizeof buf)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (len < (long)sizeof line)
					line[len] = buf[i];
				len++;
				continue;
			}
			lines++;
			bool ok =
			    len == 1 && (line[0] == 'W' || line[0] == 'V');
			if (len == 2 + FP_DIGITS + WIDE_CHARS &&
			    memcmp(line, "1.", 2) == 0) {
				ok = true;
				for (long k = 2; k < len; k++)
					if (line[k] !=
					    (k < 2 + FP_DIGITS ? '0' : 'w'))
						ok = false;
				fp_lines += ok;
			}
			bad += !ok;
			len = 0;
		}
	}
	close(fd);
	unlink(E.path);
	if (len)
		bad++;
	if (bad)
		fail("shared file: %ld torn records in %ld lines", bad, lines);
	if (!fp_lines)
		fail("shared file: no task record at all");
}

/* ---- The libc operations a task runs ---------------------------------- */

typedef int (*op_fn)(unsigned flip);

static int op_fopen(unsigned flip)
{
	FILE *f = fopen(E.path, "r");
	if (!f)
		return -1;
	return fclose(f);
}

static int op_fprintf_wide(unsigned flip)
{
	return fprintf(E.shared, "%.*f%ls\n", FP_DIGITS, 1.0, E.wide) < 0 ? -1
	                                                                  : 0;
}

/* A fresh memory stream, shared with the writer thread while this fills
 * it: each fputs that outgrows the buffer reallocs under the FILE lock. */
static int op_fputs_shared(unsigned flip)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&buf, &len);
	if (!m)
		return -1;
	pthread_mutex_lock(&E.pub_lock);
	bool mine = !E.pub;
	if (mine)
		E.pub = m;
	pthread_mutex_unlock(&E.pub_lock);
	int failed = 0;
	for (int i = 0; i < MEM_LINES; i++)
		failed |= fputs(E.mline, m) == EOF;
	if (mine) {
		pthread_mutex_lock(&E.pub_lock);
		E.pub = NULL;
		pthread_mutex_unlock(&E.pub_lock);
	}
	if (fclose(m) != 0)
		failed = 1;
	/* Whole lines only: the task's and the writer's "W". */
	if (!failed && buf) {
		size_t i = 0, mlines = 0;
		while (i < len) {
			if (buf[i] == 'W' && i + 1 < len &&
			    buf[i + 1] == '\n') {
				i += 2;
			} else if (len - i >= MEM_LINE + 1 &&
			           memcmp(buf + i, E.mline, MEM_LINE + 1) ==
			               0) {
				i += MEM_LINE + 1;
				mlines++;
			} else {
				fail(
				    "memstream: torn record at byte %zu of %zu",
				    i, len);
				break;
			}
		}
		if (i == len && mlines != MEM_LINES)
			fail("memstream: %zu lines, want %d", mlines,
			     MEM_LINES);
	}
	free(buf);
	return failed ? -1 : 0;
}

static int cmp_alloc(const void *a, const void *b)
{
	char *p = malloc(48);
	if (p) {
		p[0] = 1;
		sink = p;
		free(p);
	}
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

static int op_qsort(unsigned flip)
{
	int v[64];
	for (int i = 0; i < 64; i++)
		v[i] = (int)((i * 37u + flip) % 64);
	qsort(v, 64, sizeof v[0], cmp_alloc);
	for (int i = 1; i < 64; i++)
		if (v[i - 1] > v[i])
			return -1;
	return 0;
}

static int op_dlopen(unsigned flip)
{
	void *h = dlopen(JUMP_DSO, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		return -1;
	int (*touch)(void) = (int (*)(void))dlsym(h, "jump_dso_touch");
	if (touch)
		touch();
	/* A failed lookup allocates its error message inside the loader
	 * every time: with other threads keeping the library open, dlopen
	 * itself may allocate nothing, and the task would never trip. */
	if (dlsym(h, "jump_dso_no_such_symbol") != NULL)
		return -1;
	(void)dlerror();
	return dlclose(h);
}

static void *nop_thread(void *arg)
{
	return arg;
}

/* A thread on a cached stack allocates nothing; one on a stack of the
 * caller's needs a fresh DTV, which the loader callocs while
 * pthread_create runs. */
static int op_pthread(unsigned flip)
{
	enum { STACK = 256 << 10 };
	pthread_t th;
	pthread_attr_t attr;
	int bad = pthread_create(&th, NULL, nop_thread, NULL) != 0 ||
	          pthread_join(th, NULL) != 0;
	/* The stack by the system call: a program's own mmap is an
	 * allocation since 0.4 (test-mapped), and may jump right there. */
	void *stack =
	    (void *)syscall(SYS_mmap, NULL, STACK, PROT_READ | PROT_WRITE,
	                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (stack == MAP_FAILED)
		return -1;
	if (pthread_attr_init(&attr) == 0) {
		pthread_attr_setstack(&attr, stack, STACK);
		bad |= pthread_create(&th, &attr, nop_thread, NULL) != 0 ||
		       pthread_join(th, NULL) != 0;
		pthread_attr_destroy(&attr);
	} else {
		bad = 1;
	}
	syscall(SYS_munmap, stack, STACK);
	return bad ? -1 : 0;
}

static int op_getaddrinfo(unsigned flip)
{
	struct addrinfo hints = {0}, *res = NULL;
	hints.ai_family = AF_INET;
	hints.ai_socktype = SOCK_STREAM;
	int e = getaddrinfo("localhost", flip & 1 ? "80" : NULL, &hints, &res);
	if (e == 0)
		freeaddrinfo(res);
	return e ? -1 : 0;
}

static int op_getpwnam(unsigned flip)
{
	return getpwnam("root") ? 0 : -1;
}

static int op_setlocale(unsigned flip)
{
	/* LC_TIME only: no other thread reads it; the composite LC_ALL
	 * name is rebuilt (malloc) under the setlocale lock. */
	return setlocale(LC_TIME, flip & 1 ? "C.UTF-8" : "C") ? 0 : -1;
}

static int op_newlocale(unsigned flip)
{
	locale_t l = newlocale(LC_ALL_MASK, flip & 1 ? "C.UTF-8" : "C", 0);
	if (!l)
		return -1;
	freelocale(l);
	return 0;
}

static int op_strdup(unsigned flip)
{
	char *s = strdup(E.big);
	if (!s)
		return -1;
	sink = s;
	free(s);
	return 0;
}

static int op_asprintf(unsigned flip)
{
	char *s;
	if (asprintf(&s, "%u %s %0300d", flip, E.big, 7) < 0)
		return -1;
	sink = s;
	free(s);
	return 0;
}

static const struct {
	const char *name;
	op_fn op;
} cases[] = {
    {"fopen", op_fopen},
    {"fprintf %.20000f%ls on a shared FILE", op_fprintf_wide},
    {"fputs on a shared memstream", op_fputs_shared},
    {"qsort with an allocating comparator", op_qsort},
    {"dlopen of a test library", op_dlopen},
    {"pthread_create", op_pthread},
    {"getaddrinfo(localhost)", op_getaddrinfo},
    {"getpwnam (NSS)", op_getpwnam},
    {"setlocale", op_setlocale},
    {"newlocale", op_newlocale},
    {"strdup", op_strdup},
    {"asprintf", op_asprintf},
};
#define NCASES ((int)(sizeof cases / sizeof cases[0]))

/* ---- One task --------------------------------------------------------- */

enum trigger { TRIG_ALLOC, TRIG_TOKEN, TRIG_GLOBAL, NTRIG };
static const char *const trig_name[] = {"alloc limit", "token", "global"};
static const ml_status trig_status[] = {ML_ALLOC_LIMIT, ML_CANCELLED,
                                        ML_GLOBAL_LIMIT};
enum safe_point { SP_CHECK, SP_MALLOC, NSP };
static const char *const sp_name[] = {"ml_check", "malloc"};

enum stage { ST_START, ST_IN_OP, ST_AFTER_OP, ST_PAST };

#define MAX_ITERS 100000

struct job {
	op_fn op;
	enum trigger trig;
	enum safe_point sp;
	ml_token *tok;
	volatile int stage;
	volatile int saw;   /* interrupted when op returned */
	volatile long done; /* iterations completed */
};

static void *task(void *arg)
{
	struct job *j = arg;
	if (j->trig == TRIG_TOKEN)
		ml_token_set(j->tok);
	for (long i = 0; i < MAX_ITERS; i++) {
		j->stage = ST_IN_OP;
		j->op((unsigned)i);
		j->stage = ST_AFTER_OP;
		if (j->sp == SP_CHECK) {
			/* ml_is_interrupted polls tokens: it would trip the
			 * token task itself. */
			if (j->trig != TRIG_TOKEN)
				j->saw = ml_is_interrupted();
			ml_check();
		} else {
			void *p = malloc(16);
			sink = p;
			free(p);
		}
		j->stage = ST_PAST;
		j->done++;
	}
	return NULL;
}

static uint64_t interval;

/* Run one task; report what is wrong.  Returns 0 if all is well. */
static int run_job(int c, enum trigger trig, enum safe_point sp)
{
	struct job j = {.op = cases[c].op, .trig = trig, .sp = sp};
	ml_limits l = ML_LIMITS_INIT;
	if (trig == TRIG_ALLOC)
		l.alloc_bytes = interval; /* the first sample trips */
	else if (trig == TRIG_GLOBAL)
		l.global = true;
	else if (!(l.token = j.tok = ml_token_new())) {
		fail("ml_token_new failed");
		return -1;
	}
	ml_outcome out = {.status = ML_EINVAL, .ret = sink};
	ml_status s = ml_run(&l, task, &j, &out);
	int bad = 0;
	const char *what = cases[c].name;
	if (s != trig_status[trig] || out.status != s) {
		fail("%s/%s/%s: ml_run returned %d (outcome %d), want %d", what,
		     trig_name[trig], sp_name[sp], s, out.status,
		     trig_status[trig]);
		bad = 1;
	}
	if (s != ML_OK && j.stage != ST_AFTER_OP) {
		fail("%s/%s/%s: the jump left the task at stage %d, not from "
		     "its safe point (%d)",
		     what, trig_name[trig], sp_name[sp], j.stage, ST_AFTER_OP);
		bad = 1;
	}
	if (s != ML_OK && sp == SP_CHECK && trig != TRIG_TOKEN && !j.saw) {
		fail("%s/%s: the trip did not happen inside the libc call",
		     what, trig_name[trig]);
		bad = 1;
	}
	if (ml_is_interrupted() || ml_is_masked()) {
		fail("%s: the thread is still interrupted/masked after ml_run",
		     what);
		bad = 1;
	}
	ml_token_free(j.tok);
	return bad ? -1 : 0;
}

/* ---- Is the runtime still usable? ------------------------------------- */

struct verify_state {
	const char *volatile step;
	const char *first_bad;
	int result;
};

#define VCHECK(v, cond, bad)                                \
	do {                                                \
		if (!(cond)) {                              \
			(bad)++;                            \
			if (!(v)->first_bad)                \
				(v)->first_bad = (v)->step; \
		}                                           \
	} while (0)

static int verify(struct verify_state *v, bool big_record)
{
	int bad = 0;
	v->step = "fputs/fflush on the shared FILE";
	VCHECK(v, fputs("V\n", E.shared) != EOF && fflush(E.shared) == 0, bad);
	v->step = "fprintf %f%ls on the shared FILE";
	VCHECK(v, !big_record || op_fprintf_wide(0) == 0, bad);
	v->step = "fputs on a shared memstream";
	VCHECK(v, op_fputs_shared(0) == 0, bad);
	v->step = "fflush(NULL) (the FILE list lock)";
	VCHECK(v, fflush(NULL) == 0, bad);
	v->step = "fopen/fclose";
	VCHECK(v, op_fopen(0) == 0, bad);
	v->step = "dlopen/dlclose of the test library";
	VCHECK(v, op_dlopen(0) == 0, bad);
	v->step = "dlopen/dlclose of libm.so.6";
	void *h = dlopen("libm.so.6", RTLD_NOW);
	VCHECK(v, h && dlclose(h) == 0, bad);
	v->step = "pthread_create";
	VCHECK(v, op_pthread(0) == 0, bad);
	v->step = "getpwnam";
	VCHECK(v, op_getpwnam(0) == 0, bad);
	v->step = "getaddrinfo";
	VCHECK(v, op_getaddrinfo(1) == 0, bad);
	v->step = "setlocale";
	VCHECK(v, setlocale(LC_TIME, NULL) != NULL, bad);
	v->step = "newlocale(C.UTF-8)";
	if (op_newlocale(1) != 0)
		atomic_fetch_add(&locale_poisoned, 1);
	v->step = "qsort, strdup, asprintf";
	VCHECK(v, op_qsort(3) == 0 && op_strdup(0) == 0 && op_asprintf(0) == 0,
	       bad);
	v->step = "malloc";
	void *p = malloc(1000);
	VCHECK(v, p != NULL, bad);
	sink = p;
	free(p);
	v->step = "state";
	VCHECK(v, !ml_is_interrupted() && !ml_is_masked(), bad);
	v->step = "done";
	return bad;
}

static void *verify_thread(void *arg)
{
	struct verify_state *v = arg;
	v->result = verify(v, true);
	return NULL;
}

/* From a second thread (bounded wait), then from this one. */
static void verify_both(const char *when)
{
	struct verify_state v = {"start", NULL, -1};
	pthread_t th;
	if (pthread_create(&th, NULL, verify_thread, &v) != 0) {
		fail("%s: cannot create the verifying thread", when);
		return;
	}
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	if (pthread_timedjoin_np(th, NULL, &until) != 0) {
		fail("%s: second thread stuck in %s (a lock was abandoned)",
		     when, v.step);
		_exit(3);
	}
	if (v.result)
		fail("%s: second thread: %d checks failed, first: %s", when,
		     v.result, v.first_bad);
	struct verify_state me = {"start", NULL, -1};
	if ((me.result = verify(&me, true)) != 0)
		fail("%s: same thread: %d checks failed, first: %s", when,
		     me.result, me.first_bad);
}

/* ---- A thread that keeps using the shared FILEs ----------------------- */

static atomic_long writer_progress;
static atomic_int writer_stop;

static void *writer(void *arg)
{
	while (!atomic_load(&writer_stop)) {
		fputs("W\n", E.shared);
		pthread_mutex_lock(&E.pub_lock);
		if (E.pub)
			fputs("W\n", E.pub);
		pthread_mutex_unlock(&E.pub_lock);
		atomic_fetch_add(&writer_progress, 1);
		nap_us(200);
	}
	return NULL;
}

/* The writer must keep going: it blocks for good on an abandoned lock. */
static void check_progress(atomic_long *counter, const char *who,
                           const char *when)
{
	long p0 = atomic_load(counter);
	for (int i = 0; i < 2000; i++) {
		if (atomic_load(counter) > p0 + 1)
			return;
		nap_us(5000);
	}
	fail("%s: %s made no progress in 10 s (a lock was abandoned)", when,
	     who);
	_exit(3);
}

static pthread_t start_writer(void)
{
	pthread_t th;
	if (pthread_create(&th, NULL, writer, NULL) != 0)
		tap_bail("cannot start the writer");
	return th;
}

static void stop_writer(pthread_t th, const char *when)
{
	check_progress(&writer_progress, "the writer thread", when);
	atomic_store(&writer_stop, 1);
	pthread_join(th, NULL);
}

static void child_setup(uint64_t s, unsigned watchdog_s)
{
	/* A task that is never interrupted must not fill the disk. */
	struct rlimit fsize = {256 << 20, 256 << 20};
	signal(SIGXFSZ, SIG_IGN);
	setrlimit(RLIMIT_FSIZE, &fsize);
	arm_watchdog(watchdog_s);
	env_setup();
	interval = s;
	if (ml_set_sample_interval(s) != 0)
		tap_bail("ml_set_sample_interval(%llu)", (unsigned long long)s);
	/* Only tasks with .global are subject to it: always exceeded. */
	ml_set_global_memory_limit(0);
}

static void child_finish(void)
{
	ml_set_global_memory_limit(ML_NO_LIMIT);
	check_shared_file();
	_exit((atomic_load(&failures) ? 1 : 0) |
	      (atomic_load(&locale_poisoned) ? 2 : 0));
}

/* ---- Single-threaded cases -------------------------------------------- */

struct case_arg {
	int c;
	uint64_t interval;
};

#define REPS 8

static void case_child(void *arg)
{
	const struct case_arg *a = arg;
	child_setup(a->interval, 100);
	pthread_t w = start_writer();
	char when[96];
	for (int r = 0; r < REPS; r++)
		for (int t = 0; t < NTRIG; t++)
			for (int sp = 0; sp < NSP; sp++) {
				run_job(a->c, t, sp);
				snprintf(when, sizeof when, "%s/%s/%s",
				         cases[a->c].name, trig_name[t],
				         sp_name[sp]);
				if (r == 0)
					verify_both(when);
			}
	stop_writer(w, cases[a->c].name);
	verify_both("at the end");
	child_finish();
}

/* ---- The same, 8 threads at once -------------------------------------- */

#define NWORKERS 8

static atomic_long worker_progress[NWORKERS], observer_progress;
static atomic_int observer_stop;
static int worker_reps;

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	unsigned x = (unsigned)id * 2654435761u + 1;
	for (int r = 0; r < worker_reps; r++)
		for (int i = 0; i < NCASES * NTRIG * NSP; i++) {
			x = x * 1103515245u + 12345u;
			int k = (int)((x >> 8) % (NCASES * NTRIG * NSP));
			run_job(k % NCASES, (k / NCASES) % NTRIG,
			        k / (NCASES * NTRIG));
			atomic_fetch_add(&worker_progress[id], 1);
		}
	return NULL;
}

static void *observer(void *arg)
{
	for (long round = 0; !atomic_load(&observer_stop); round++) {
		/* A 20 kB record now and then: the file stays small. */
		struct verify_state v = {"start", NULL, -1};
		if (verify(&v, round % 64 == 0))
			fail("observer: runtime checks failed, first: %s",
			     v.first_bad);
		atomic_fetch_add(&observer_progress, 1);
	}
	return NULL;
}

static void threads_child(void *arg)
{
	const struct case_arg *a = arg;
	child_setup(a->interval, 170);
	worker_reps = a->c;
	pthread_t w = start_writer(), obs, th[NWORKERS];
	if (pthread_create(&obs, NULL, observer, NULL) != 0)
		tap_bail("cannot start the observer");
	for (int i = 0; i < NWORKERS; i++)
		if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i))
			tap_bail("cannot start worker %d", i);
	for (int i = 0; i < NWORKERS; i++)
		pthread_join(th[i], NULL);
	check_progress(&observer_progress, "the observer thread",
	               "after the workers");
	atomic_store(&observer_stop, 1);
	pthread_join(obs, NULL);
	stop_writer(w, "after the workers");
	verify_both("after the workers");
	long total = 0;
	for (int i = 0; i < NWORKERS; i++)
		total += atomic_load(&worker_progress[i]);
	if (total != (long)NWORKERS * worker_reps * NCASES * NTRIG * NSP)
		fail("workers ran %ld tasks", total);
	child_finish();
}

/* ---- The pending bound ------------------------------------------------ */

/* A JUMP task that stays inside qsort, allocating from the comparator:
 * its trip is pending (qsort's frames lie between), and once 4*S bytes
 * were allocated while pending, allocations inside qsort fail with ENOMEM.
 * When qsort returns, the task's next allocation (or ml_check) delivers
 * the jump, to the right ml_run. */
struct pend {
	volatile int stage, inner_returned, outer_went_on;
	volatile long post_bytes, late_successes, allocs;
	volatile int got_null, null_errno, safe_point;
	ml_status inner_status;
	int v[64];
};
static struct pend *P;

#define PEND_BLOCK 16

static int cmp_pending(const void *a, const void *b)
{
	struct pend *p = P;
	if (!p->got_null) {
		for (long i = 0; i < 1000000; i++) {
			bool was = ml_is_interrupted();
			errno = 0;
			void *q = malloc(PEND_BLOCK);
			p->allocs++;
			if (!q) {
				p->got_null = 1;
				p->null_errno = errno;
				break;
			}
			sink = q;
			free(q);
			if (was || ml_is_interrupted())
				p->post_bytes += PEND_BLOCK;
		}
	} else {
		void *q = malloc(PEND_BLOCK);
		if (q)
			p->late_successes++;
		sink = q;
		free(q);
	}
	int x = *(const int *)a, y = *(const int *)b;
	return (x > y) - (x < y);
}

static void *pend_body(void *arg)
{
	struct pend *p = arg;
	for (int i = 0; i < 64; i++)
		p->v[i] = 63 - i;
	p->stage = ST_IN_OP;
	qsort(p->v, 64, sizeof p->v[0], cmp_pending);
	p->stage = ST_AFTER_OP;
	if (p->safe_point == SP_CHECK) {
		ml_check();
	} else {
		void *q = malloc(PEND_BLOCK);
		sink = q;
		free(q);
	}
	p->stage = ST_PAST;
	return NULL;
}

static void *pend_outer(void *arg)
{
	struct pend *p = arg;
	ml_limits l = ML_LIMITS_INIT;
	if (p->inner_status == ML_ALLOC_LIMIT)
		l.alloc_bytes = 4 * interval; /* the inner task trips */
	p->inner_status = ml_run(&l, pend_body, p, NULL);
	p->inner_returned = 1;
	void *q = malloc(100);
	sink = q;
	free(q);
	p->outer_went_on = 1;
	return NULL;
}

enum nest { NEST_NONE, NEST_INNER_TRIPS, NEST_OUTER_TRIPS };

static void pending_child(void *arg)
{
	const struct case_arg *a = arg;
	arm_watchdog(50);
	ml_set_sample_interval(interval = a->interval);
	static const char *const nest_name[] = {
	    "single task", "inner task trips", "outer task trips"};
	for (int nest = 0; nest < 3; nest++)
		for (int sp = 0; sp < NSP; sp++) {
			struct pend p = {.safe_point = sp};
			P = &p;
			ml_limits l = ML_LIMITS_INIT;
			ml_outcome out;
			ml_status s, want;
			if (nest == NEST_NONE) {
				l.alloc_bytes = 4 * interval;
				s = ml_run(&l, pend_body, &p, &out);
				want = ML_ALLOC_LIMIT;
			} else {
				p.inner_status = nest == NEST_INNER_TRIPS
				                     ? ML_ALLOC_LIMIT
				                     : ML_OK;
				if (nest == NEST_OUTER_TRIPS)
					l.alloc_bytes = 4 * interval;
				s = ml_run(&l, pend_outer, &p, &out);
				want = nest == NEST_INNER_TRIPS
				           ? ML_OK
				           : ML_ALLOC_LIMIT;
			}
			const char *n = nest_name[nest];
			const char *spn = sp_name[sp];
			if (s != want)
				fail("%s/%s: ml_run returned %d, want %d", n,
				     spn, s, want);
			if (p.stage != ST_AFTER_OP)
				fail("%s/%s: the jump came at stage %d, not "
				     "after qsort returned",
				     n, spn, p.stage);
			if (!p.got_null || p.null_errno != ENOMEM)
				fail("%s/%s: malloc inside qsort never failed "
				     "with ENOMEM (%ld allocations, errno %d)",
				     n, spn, p.allocs, p.null_errno);
			/* Within one allocation of the documented 4*S. */
			long cap = 4 * (long)interval;
			if (p.post_bytes < cap - PEND_BLOCK ||
			    p.post_bytes > cap + PEND_BLOCK)
				fail(
				    "%s/%s: %ld bytes allocated while the jump "
				    "was pending, want 4*S = %ld",
				    n, spn, p.post_bytes, cap);
			if (p.late_successes)
				fail("%s/%s: %ld allocations inside qsort "
				     "succeeded again after the cap",
				     n, spn, p.late_successes);
			for (int i = 1; i < 64; i++)
				if (p.v[i - 1] > p.v[i]) {
					fail("%s/%s: qsort did not finish", n,
					     spn);
					break;
				}
			if (nest == NEST_INNER_TRIPS &&
			    (!p.inner_returned ||
			     p.inner_status != ML_ALLOC_LIMIT ||
			     !p.outer_went_on))
				fail("%s/%s: the jump did not land in the "
				     "inner ml_run (returned %d, status %d, "
				     "outer went on %d)",
				     n, spn, p.inner_returned, p.inner_status,
				     p.outer_went_on);
			if (nest == NEST_OUTER_TRIPS &&
			    (p.inner_returned || p.outer_went_on))
				fail("%s/%s: the inner ml_run returned: the "
				     "jump did not land in the outer one",
				     n, spn);
			/* The thread is clean afterwards. */
			void *q = malloc(100);
			if (!q || ml_is_interrupted())
				fail("%s/%s: the thread is not clean after the "
				     "task",
				     n, spn);
			sink = q;
			free(q);
		}
	_exit(atomic_load(&failures) ? 1 : 0);
}

/* ---- Driver ----------------------------------------------------------- */

/* Failures of the cases (tap_done counts them too). */
static int real_failures;

static void report(int r, const char *fmt, const char *name, uint64_t s)
{
	char what[160];
	snprintf(what, sizeof what, fmt, name, (unsigned long long)s);
	bool ok;
	if (r == -1)
		ok = tap_ok(false, "%s: timed out (deadlock)", what);
	else if (r >= 128)
		ok = tap_ok(false, "%s: killed by signal %d", what, r - 128);
	else
		ok = tap_ok(!(r & ~2), "%s%s", what,
		            r & ~2 ? " (see diagnostics)" : "");
	real_failures += !ok;
	/* Locale loaders are never failed (lib/core/frames.c): a load that met
	 * ENOMEM half-way would be remembered by glibc as missing for good. */
	if (r >= 0 && r < 128)
		real_failures += !tap_ok(!(r & 2),
		                         "%s: newlocale(C.UTF-8) still works "
		                         "afterwards",
		                         what);
}

/* valgrind (.ci/run, docs/reliability.md) replaces glibc's allocator below
 * ours and preloads its vgpreload_*.so: detected like lib/alloc/underlying.c
 * does. */
static bool under_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");
	return p && strstr(p, "/vgpreload_");
}

int main(int argc, char **argv)
{
	if (argc == 3) { /* debugging: one case, in this process */
		struct case_arg a = {atoi(argv[1]), strtoull(argv[2], 0, 10)};
		case_child(&a);
	}
	/* Small S: trips come early, the pending cap (4*S) is hit and libc
	 * sees ENOMEM; large S: the calls mostly complete while pending. */
	static const uint64_t intervals[] = {64, 65536};
	for (int i = 0; i < 2; i++) {
		struct case_arg a = {0, 64 + 936 * (uint64_t)i};
		int r = tap_child(pending_child, &a, 60);
		report(r,
		       "%sS = %llu: a jump pending in qsort, allocations fail "
		       "after 4*S, the jump lands at the right ml_run",
		       "", a.interval);
	}
	for (int i = 0; i < 2; i++)
		for (int c = 0; c < NCASES; c++) {
			struct case_arg a = {c, intervals[i]};
			int r = tap_child(case_child, &a, 120);
			report(
			    r,
			    "%s, S = %llu: interrupted inside, locks released, "
			    "stdio/dlopen/threads work from both threads",
			    cases[c].name, intervals[i]);
		}
	for (int i = 0; i < 2; i++) {
		struct case_arg a = {i == 0 ? 6 : 3, intervals[i]};
		if (under_valgrind()) {
			tap_skip(
			    1,
			    "8 threads x all cases, S = %llu: valgrind runs "
			    "threads one at a time, beyond the watchdog",
			    (unsigned long long)intervals[i]);
			continue;
		}
		int r = tap_child(threads_child, &a, 180);
		report(r,
		       "%s8 threads x all cases, S = %llu: no deadlock, no "
		       "torn record, right statuses",
		       "", intervals[i]);
	}
	tap_done();
	return real_failures ? 1 : 0;
}
