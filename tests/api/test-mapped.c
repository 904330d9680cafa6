/* Memory a program maps itself (issue 34): private, anonymous, writable
 * mappings count as heap while they exist and are writable, exactly:
 * partial unmaps, whole unmaps the fast path must leave to the general
 * update, MAP_FIXED over counted and uncounted ranges, reserve
 * then commit, mremap (grow, shrink, move, MREMAP_FIXED), a fork child's
 * view, threads mapping and unmapping at once, a full table of ranges.
 * They are allocations too: a task's limit refuses one (FAIL delivery:
 * MAP_FAILED and ENOMEM, nothing counted), JUMP delivery leaves from the
 * mmap call with nothing mapped, and a task holds the samples of what it
 * mapped until it is unmapped, a partial unmap giving back its share.
 * MEMLIMITS_MAPPED=0 turns all of it off.
 *
 * The counted bytes are read as ml_global_memory_usage() less glibc's own
 * count (mallinfo2): with no global limit set the meter reads glibc's
 * count plus the mapped bytes, so the difference is exact whenever no
 * other thread allocates meanwhile.  Every check is exact except the held
 * estimates (statistical, fixed seed, bounds in the case). */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <memlimits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tap/tap.h"

#define MiB ((int64_t)1 << 20)
#define PG ((int64_t)4096)
#define RW (PROT_READ | PROT_WRITE)
#define PA (MAP_PRIVATE | MAP_ANONYMOUS)

static int64_t mapped(void)
{
	struct mallinfo2 mi = mallinfo2();
	return (int64_t)ml_global_memory_usage() -
	       (int64_t)(mi.uordblks + mi.hblkhd);
}

static char *map(size_t len, int prot, int flags, void *at)
{
	char *p = mmap(at, len, prot, flags, -1, 0);
	if (p == MAP_FAILED)
		tap_bail("mmap(%zu): %s", len, strerror(errno));
	return p;
}

/* A region the library never saw: mapped by the system call. */
static char *raw_map(size_t len)
{
	return (char *)syscall(SYS_mmap, NULL, len, RW, PA, -1, 0);
}

static void test_partial(void)
{
	int64_t base = mapped();
	char *p = map(8 * MiB, RW, PA, NULL);
	tap_is(mapped() - base, 8 * MiB, "8 MiB mapped: 8 MiB counted");
	munmap(p + MiB, MiB);
	tap_is(mapped() - base, 7 * MiB, "1 MiB unmapped in its middle: 7");
	munmap(p, PG);
	tap_is(mapped() - base, 7 * MiB - PG, "its first page unmapped");
	munmap(p + 5 * MiB, 3 * MiB);
	tap_is(mapped() - base, 4 * MiB - PG, "its last 3 MiB unmapped");
	munmap(p, 8 * MiB);
	tap_is(mapped() - base, 0, "the whole span, holes and all: 0");
	char *q = map(10, RW, PA, NULL);
	tap_is(mapped() - base, PG, "10 bytes mapped count their page");
	munmap(q, 10);
	tap_is(mapped() - base, 0, "and leave with it");
}

/* The fast path (api/mmap.c: a mapping after the last record, an unmap of
 * exactly the last record, counted, holding no samples) must hand every
 * other case to the general update: each check below is a case it must
 * not take (issue 34's cost work). */
static void test_whole(void)
{
	int64_t base = mapped();
	char *p = map(4 * MiB, RW, PA, NULL);
	munmap(p, MiB);
	tap_is(mapped() - base, 3 * MiB,
	       "the first MiB of the last record unmapped (same start, not "
	       "its end): 3 MiB");
	munmap(p + MiB, 3 * MiB);
	tap_is(mapped() - base, 0, "the rest: 0");

	char *r = map(2 * MiB, PROT_NONE, PA | MAP_NORESERVE, NULL);
	munmap(r, 2 * MiB);
	tap_is(mapped() - base, 0, "a reservation unmapped whole: still 0");

	p = map(2 * MiB, RW, PA, NULL);
	mprotect(p, MiB, PROT_READ);
	mprotect(p, MiB, RW);
	tap_is(mapped() - base, 2 * MiB,
	       "2 MiB, cut in two records by mprotect: 2 MiB");
	munmap(p, 2 * MiB);
	tap_is(mapped() - base, 0, "one munmap over both records: 0");

	p = map(2 * MiB, RW, PA, NULL);
	mprotect(p + MiB, MiB, PROT_READ);
	munmap(p, 2 * MiB);
	tap_is(mapped() - base, 0, "a whole unmap after a partial mprotect: 0");

	/* A record left by a raw munmap, then the kernel's same address
	 * mapped again: the new mapping replaces the stale record. */
	p = map(MiB, RW, PA, NULL);
	syscall(SYS_munmap, p, MiB);
	char *q = mmap(p, MiB, RW, PA, -1, 0);
	tap_ok(q == p && mapped() - base == MiB,
	       "an address mapped again over a stale record: 1 MiB (%s, "
	       "%lld)",
	       q == p ? "same address" : "another address",
	       (long long)(mapped() - base));
	munmap(q, MiB);
	tap_is(mapped() - base, 0, "and unmapped: 0");
}

/* A task's body: maps 64 MiB and hands the address out. */
static void *map64_body(void *arg)
{
	*(char **)arg = map(64 * MiB, RW, PA, NULL);
	return NULL;
}

/* A task's mapping unmapped whole: its record holds samples, which the
 * whole unmap gives back. */
static void test_whole_held(void)
{
	ml_set_seed(35);
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	char *p = NULL;
	ml_task_run(t, map64_body, &p, NULL);
	/* 64 MiB at S = 80000: Poisson(838.9) samples; none is 0 with
	 * probability e^-838.9 (the seed is fixed anyway). */
	tap_ok(ml_task_held(t) > 0, "a task that mapped 64 MiB holds %lld",
	       (long long)ml_task_held(t));
	munmap(p, 64 * MiB);
	tap_is(ml_task_held(t), 0, "unmapped whole at once: nothing held");
	ml_task_free(t);
}

static void test_fixed(void)
{
	int64_t base = mapped();
	char *p = map(16 * MiB, RW, PA, NULL);
	map(4 * MiB, RW, PA | MAP_FIXED, p + 4 * MiB);
	tap_is(mapped() - base, 16 * MiB,
	       "MAP_FIXED writable over a counted range: counted once");
	map(4 * MiB, PROT_NONE, PA | MAP_FIXED, p + 8 * MiB);
	tap_is(mapped() - base, 12 * MiB,
	       "MAP_FIXED PROT_NONE over a counted range: 4 MiB less");
	map(4 * MiB, RW, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, p);
	tap_is(mapped() - base, 8 * MiB,
	       "MAP_FIXED shared over a counted range: 4 MiB less");
	map(2 * MiB, RW, PA | MAP_FIXED, p + 8 * MiB);
	tap_is(mapped() - base, 10 * MiB,
	       "MAP_FIXED writable over a reservation: 2 MiB more");
	char *u = raw_map(4 * MiB);
	map(MiB, RW, PA | MAP_FIXED, u + MiB);
	tap_is(mapped() - base, 11 * MiB,
	       "MAP_FIXED writable over a range never counted: 1 MiB more");
	munmap(u, 4 * MiB);
	tap_is(mapped() - base, 10 * MiB,
	       "unmapping that range: the 1 MiB goes, nothing else");
	int fd = memfd_create("test-mapped", 0);
	if (fd >= 0 && ftruncate(fd, 4 * MiB) == 0) {
		char *f = mmap(p + 12 * MiB, 4 * MiB, RW,
		               MAP_PRIVATE | MAP_FIXED, fd, 0);
		tap_ok(f != MAP_FAILED && mapped() - base == 6 * MiB,
		       "a private file mapping over a counted range: not "
		       "counted, the bytes it replaced leave (%lld)",
		       (long long)(mapped() - base));
		char *g = mmap(NULL, 4 * MiB, RW, MAP_PRIVATE, fd, 0);
		tap_ok(g != MAP_FAILED && mapped() - base == 6 * MiB,
		       "a private writable file mapping counts nothing");
		munmap(g, 4 * MiB);
	} else {
		tap_skip(2, "memfd_create: %s", strerror(errno));
	}
	if (fd >= 0)
		close(fd);
	munmap(p, 16 * MiB);
	tap_is(mapped() - base, 0, "all unmapped: 0");
}

static void test_reserve(void)
{
	int64_t base = mapped();
	char *r = map(64 * MiB, PROT_NONE, PA | MAP_NORESERVE, NULL);
	tap_is(mapped() - base, 0, "a 64 MiB reservation counts nothing");
	tap_ok(mprotect(r, 16 * MiB, RW) == 0 && mapped() - base == 16 * MiB,
	       "16 MiB of it made writable: 16 MiB");
	/* Issue 41: counted memory stays counted whatever its protection,
	 * until unmapped or given back. */
	tap_ok(mprotect(r + 8 * MiB, 8 * MiB, PROT_READ) == 0 &&
	           mapped() - base == 16 * MiB,
	       "8 MiB of those made read-only: still 16 MiB");
	tap_ok(madvise(r, 8 * MiB, MADV_DONTNEED) == 0 &&
	           mapped() - base == 16 * MiB,
	       "MADV_DONTNEED on 8 writable MiB: still 16 MiB");
	tap_ok(madvise(r + 8 * MiB, 8 * MiB, MADV_DONTNEED) == 0 &&
	           mapped() - base == 8 * MiB,
	       "MADV_DONTNEED on the 8 read-only MiB: given back, 8 MiB");
	tap_ok(mprotect(r + 8 * MiB, 8 * MiB, RW) == 0 &&
	           mprotect(r + 8 * MiB, 8 * MiB, PROT_NONE) == 0 &&
	           madvise(r + 8 * MiB, 8 * MiB, MADV_FREE) == 0 &&
	           mapped() - base == 8 * MiB,
	       "committed again, PROT_NONE, MADV_FREE: 8 MiB");
	map(8 * MiB, RW, PA | MAP_FIXED, r + 32 * MiB);
	tap_is(mapped() - base, 16 * MiB, "8 MiB committed by MAP_FIXED");
	tap_ok(mprotect(r, 64 * MiB, RW) == 0 && mapped() - base == 64 * MiB,
	       "all of it writable: 64 MiB");
	char *u = raw_map(MiB);
	mprotect(u, MiB, PROT_NONE);
	mprotect(u, MiB, RW);
	tap_is(mapped() - base, 64 * MiB,
	       "mprotect of a range never seen changes nothing");
	syscall(SYS_munmap, u, MiB);
	munmap(r, 64 * MiB);
	tap_is(mapped() - base, 0, "unmapped: 0");
}

static void test_mremap(void)
{
	int64_t base = mapped();
	char *p = map(8 * MiB, RW, PA, NULL);
	memset(p, 1, 8 * MiB);
	char *q = mremap(p, 8 * MiB, 16 * MiB, MREMAP_MAYMOVE);
	tap_ok(q != MAP_FAILED && mapped() - base == 16 * MiB && q[0] == 1,
	       "grown to 16 MiB (moved: %s): 16", q == p ? "no" : "yes");
	q = mremap(q, 16 * MiB, 2 * MiB, 0);
	tap_ok(q != MAP_FAILED && mapped() - base == 2 * MiB,
	       "shrunk to 2 MiB: 2");
	char *d = map(8 * MiB, RW, PA, NULL);
	char *m = mremap(q, 2 * MiB, 2 * MiB, MREMAP_MAYMOVE | MREMAP_FIXED,
	                 d + 2 * MiB);
	tap_ok(m == d + 2 * MiB && mapped() - base == 8 * MiB && m[0] == 1,
	       "moved onto 2 MiB of a counted 8 MiB (MREMAP_FIXED): 8");
	munmap(d, 8 * MiB);
	tap_is(mapped() - base, 0, "unmapped: 0");
	char *r = map(4 * MiB, PROT_NONE, PA, NULL);
	char *r2 = mremap(r, 4 * MiB, 8 * MiB, MREMAP_MAYMOVE);
	tap_ok(r2 != MAP_FAILED && mapped() - base == 0,
	       "a reservation grown: still nothing");
	tap_ok(mprotect(r2, 8 * MiB, RW) == 0 && mapped() - base == 8 * MiB,
	       "then made writable: 8 MiB");
	munmap(r2, 8 * MiB);
	tap_is(mapped() - base, 0, "unmapped: 0");
}

static void test_fork(void)
{
	int64_t base = mapped();
	char *p = map(32 * MiB, RW, PA, NULL);
	int fds[2];
	if (pipe(fds) != 0)
		tap_bail("pipe");
	pid_t pid = fork();
	if (pid == 0) {
		int64_t v[2];
		v[0] = mapped() - base;
		munmap(p + 8 * MiB, 16 * MiB);
		v[1] = mapped() - base;
		_exit(write(fds[1], v, sizeof v) == sizeof v ? 0 : 1);
	}
	int64_t v[2] = {-1, -1};
	int st = -1;
	ssize_t got = read(fds[0], v, sizeof v);
	waitpid(pid, &st, 0);
	tap_ok(got == sizeof v && v[0] == 32 * MiB && v[1] == 16 * MiB,
	       "a fork child inherits the 32 MiB counted (%lld) and unmaps "
	       "16 of them (%lld)",
	       (long long)v[0], (long long)v[1]);
	tap_is(mapped() - base, 32 * MiB, "the parent still counts its 32");
	munmap(p, 32 * MiB);
	close(fds[0]);
	close(fds[1]);
}

/* Threads: each maps, cuts, grows and unmaps its own mappings; a barrier
 * stops them all while the main thread reads the count. */
#define THREADS 8
#define ITER 400
#define KEEP 16
static pthread_barrier_t bar;
struct worker {
	unsigned id;
	char *kept[KEEP];
	size_t kept_len[KEEP];
	int64_t live;
	bool bad;
};

static void *worker(void *arg)
{
	struct worker *w = arg;
	uint64_t x = 0x9e3779b97f4a7c15u * (w->id + 1);
	for (int i = 0; i < ITER; i++) {
		x = x * 6364136223846793005u + 1442695040888963407u;
		size_t pages =
		    3 + (x >> 33) % 64; /* the hole is not the tail */
		char *p = mmap(NULL, pages * PG, RW, PA, -1, 0);
		if (p == MAP_FAILED) {
			w->bad = true;
			break;
		}
		size_t len = pages * PG;
		if (x & (1u << 20)) /* a hole in its middle */
			munmap(p + PG, PG);
		if (x & (1u << 21)) { /* cut its tail */
			munmap(p + len - PG, PG);
			len -= PG;
		}
		if (i % (ITER / KEEP) == 0) {
			int k = i / (ITER / KEEP);
			/* kept whole: the hole filled again */
			if (x & (1u << 20))
				map(PG, RW, PA | MAP_FIXED, p + PG);
			w->kept[k] = p;
			w->kept_len[k] = len;
			w->live += (int64_t)len;
		} else {
			munmap(p, len);
		}
	}
	pthread_barrier_wait(&bar); /* the main thread reads */
	pthread_barrier_wait(&bar);
	for (int k = 0; k < KEEP; k++)
		if (w->kept[k])
			munmap(w->kept[k], w->kept_len[k]);
	return NULL;
}

static void test_threads(void)
{
	static struct worker w[THREADS];
	pthread_t th[THREADS];
	pthread_barrier_init(&bar, NULL, THREADS + 1);
	int64_t base = mapped();
	for (unsigned i = 0; i < THREADS; i++) {
		w[i].id = i;
		if (pthread_create(&th[i], NULL, worker, &w[i]) != 0)
			tap_bail("pthread_create");
	}
	pthread_barrier_wait(&bar);
	int64_t want = 0;
	bool bad = false;
	for (unsigned i = 0; i < THREADS; i++) {
		want += w[i].live;
		bad |= w[i].bad;
	}
	int64_t mid = mapped() - base;
	pthread_barrier_wait(&bar);
	for (unsigned i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	tap_ok(!bad && mid == want,
	       "%d threads x %d mappings, cut and unmapped at once: the "
	       "count is the bytes they keep (%lld, kept %lld)",
	       THREADS, ITER, (long long)mid, (long long)want);
	tap_is(mapped() - base, 0, "all unmapped: 0");
}

/* A task refuses a mapping. */
struct refusal {
	int64_t base, after;
	char *small, *big;
	int err;
};

static void *refused_body(void *arg)
{
	struct refusal *r = arg;
	r->small = mmap(NULL, 256 << 10, RW, PA, -1, 0);
	errno = 0;
	r->big = mmap(NULL, 4 * MiB, RW, PA, -1, 0);
	r->err = errno;
	r->after = mapped() - r->base;
	return NULL;
}

static void test_fail(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = MiB;
	l.exact_alloc = true;
	l.delivery = ML_DELIVER_FAIL;
	struct refusal r = {.base = mapped()};
	ml_outcome out;
	ml_status st = ml_run(&l, refused_body, &r, &out);
	tap_ok(st == ML_ALLOC_LIMIT && r.small != MAP_FAILED &&
	           r.big == MAP_FAILED && r.err == ENOMEM &&
	           r.after == 256 << 10,
	       "an exact budget of 1 MiB, FAIL: 256 KiB mapped, 4 MiB "
	       "refused with ENOMEM and not counted (status %s, after %lld)",
	       ml_status_str(st), (long long)r.after);
	munmap(r.small, 256 << 10);
	/* The sampled limit: 64 MiB carry about 839 samples at the default
	 * interval, 1 MiB needs 14 (P(fewer) < 1e-300). */
	ml_limits s = ML_LIMITS_INIT;
	s.alloc_bytes = MiB;
	s.delivery = ML_DELIVER_FAIL;
	struct refusal r2 = {.base = mapped()};
	st = ml_run(&s, refused_body, &r2, &out);
	tap_ok(st == ML_ALLOC_LIMIT && r2.big == MAP_FAILED &&
	           r2.err == ENOMEM && r2.after <= 256 << 10,
	       "a sampled limit of 1 MiB, FAIL: 4 MiB refused (status %s)",
	       ml_status_str(st));
	if (r2.small != MAP_FAILED)
		munmap(r2.small, 256 << 10);
	/* JUMP: out of mmap itself, nothing mapped. */
	s.delivery = ML_DELIVER_JUMP;
	struct refusal r3 = {.base = mapped(), .after = -1};
	st = ml_run(&s, refused_body, &r3, &out);
	int64_t now = mapped() - r3.base;
	tap_ok(st == ML_ALLOC_LIMIT && r3.after == -1 &&
	           (now == 0 || now == 256 << 10),
	       "JUMP: the task leaves from the mapping, which is not made "
	       "(%lld counted after)",
	       (long long)now);
	if (now)
		munmap(r3.small, 256 << 10);
}

/* Held samples: a task holds what it mapped; a partial unmap gives back
 * its share, the last byte the rest. */

static void test_held(void)
{
	ml_set_seed(34);
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	char *p = NULL;
	ml_task_run(t, map64_body, &p, NULL);
	double h = (double)ml_task_held(t) / MiB;
	/* 64 MiB at S = 80000: Poisson(838.9) samples, sd 2.21 MiB; 5.5 sd
	 * either way (false alarm < 4e-8; the seed is fixed anyway). */
	tap_ok(h > 64 - 12.2 && h < 64 + 12.2,
	       "a task that mapped 64 MiB holds %.1f MiB", h);
	munmap(p + 16 * MiB, 32 * MiB);
	double h2 = (double)ml_task_held(t) / MiB;
	/* The 32 MiB left carry Binomial thinning of the samples: Poisson
	 * (419.4), sd 1.56 MiB; 5.5 sd. */
	tap_ok(h2 > 32 - 8.6 && h2 < 32 + 8.6 && h2 < h,
	       "half of it unmapped from the middle: %.1f MiB held", h2);
	munmap(p, 64 * MiB);
	tap_is(ml_task_held(t), 0, "all unmapped: nothing held");
	ml_task_free(t);
}

/* The table full: pieces go uncounted, never counted twice. */
static void test_full(void)
{
	enum { PAGES = 70000 };
	int64_t base = mapped();
	char *r = map((size_t)PAGES * PG, PROT_NONE, PA | MAP_NORESERVE, NULL);
	for (int i = 0; i < PAGES; i++)
		map(PG, RW, PA | MAP_FIXED, r + (size_t)i * PG);
	int64_t got = mapped() - base;
	tap_ok(got <= PAGES * PG && got >= (65536 - 2) * PG,
	       "%d pages mapped one by one over a reservation, 65536 "
	       "records: %lld pages counted, never more",
	       PAGES, (long long)(got / PG));
	munmap(r, (size_t)PAGES * PG);
	tap_is(mapped() - base, 0, "all unmapped: 0");
}

static int off_main(void)
{
	if (ml_capabilities() & ML_CAP_MAPPED)
		return 1;
	int64_t base = mapped();
	char *p = mmap(NULL, 16 * MiB, RW, PA, -1, 0);
	if (p == MAP_FAILED || mapped() != base)
		return 2;
	return munmap(p, 16 * MiB) == 0 ? 0 : 3;
}

static const char *self; /* argv[0]: under valgrind /proc/self/exe is
                          * valgrind's */

static void test_off(void)
{
	tap_ok(ml_capabilities() & ML_CAP_MAPPED,
	       "ml_capabilities() has ML_CAP_MAPPED by default");
	pid_t pid = fork();
	if (pid == 0) {
		char *argv[] = {"test-mapped", "--off", NULL};
		char *envp[] = {"MEMLIMITS_MAPPED=0", NULL};
		execve(self, argv, envp);
		_exit(127);
	}
	int st = -1;
	waitpid(pid, &st, 0);
	tap_ok(WIFEXITED(st) && WEXITSTATUS(st) == 0,
	       "MEMLIMITS_MAPPED=0: no ML_CAP_MAPPED, 16 MiB mapped count "
	       "nothing (status %d)",
	       WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

/* Issue 41, item 3: a mapping's held record is published only once its
 * range's record exists.  One thread maps the same 4 MiB with MAP_FIXED
 * 100000 times inside a task (each mapping sampled: about 52 samples),
 * another unmaps it over and over: an unmap that removed the range's
 * record before the mapping had published its held record dropped
 * nothing, and the held record, made after, stayed for good.  Once both
 * stop and the range is unmapped, the task holds nothing. */
#define RACE_LEN (4 * MiB)
static char *race_at;
static atomic_bool race_stop;

static void *race_unmapper(void *arg)
{
	(void)arg;
	while (!atomic_load(&race_stop))
		munmap(race_at, RACE_LEN);
	return NULL;
}

static void *race_body(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100000; i++)
		if (mmap(race_at, RACE_LEN, RW, PA | MAP_FIXED, -1, 0) ==
		    MAP_FAILED)
			tap_bail("mmap MAP_FIXED: %s", strerror(errno));
	return NULL;
}

static void test_race_held(void)
{
	ml_set_seed(41);
	/* Far below where the kernel places mappings (top-down from under
	 * the stack): the range the other thread unmaps over and over is
	 * never handed out to anything else meanwhile (the library's own
	 * tables, glibc's arenas), which its next munmap would take away. */
	race_at = MAP_FAILED;
	for (uintptr_t at = (uintptr_t)1 << 34;
	     race_at == MAP_FAILED && at < (uintptr_t)1 << 40; at <<= 1)
		race_at = mmap((void *)at, RACE_LEN, PROT_NONE,
		               PA | MAP_FIXED_NOREPLACE, -1, 0);
	if (race_at == MAP_FAILED)
		tap_bail("no room low in the address space: %s",
		         strerror(errno));
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	pthread_t th;
	pthread_create(&th, NULL, race_unmapper, NULL);
	ml_task_run(t, race_body, NULL, NULL);
	atomic_store(&race_stop, true);
	pthread_join(th, NULL);
	munmap(race_at, RACE_LEN);
	tap_is(ml_task_held(t), 0,
	       "100000 MAP_FIXED mappings in a task, unmapped by another "
	       "thread as they come, then unmapped: nothing held");
	ml_task_free(t);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--off"))
		return off_main();
	self = argv[0];
	tap_case("test_partial", test_partial, 30);
	tap_case("test_whole", test_whole, 30);
	tap_case("test_whole_held", test_whole_held, 30);
	tap_case("test_fixed", test_fixed, 30);
	tap_case("test_reserve", test_reserve, 30);
	tap_case("test_mremap", test_mremap, 30);
	tap_case("test_fork", test_fork, 30);
	tap_case("test_threads", test_threads, 60);
	tap_case("test_fail", test_fail, 30);
	tap_case("test_held", test_held, 30);
	tap_case("test_full", test_full, 120);
	tap_case("test_off", test_off, 30);
	tap_case("test_race_held", test_race_held, 120);
	return tap_done();
}
