/* The heap meter over whichever allocator is underneath (issue 26; run
 * over each by tests/api/test-allocators.sh, and over glibc alone): a
 * fixed pattern of allocations and frees on several threads, with blocks
 * freed on another thread than the one that allocated them, a thread
 * whose first call frees a block, and threads that exit, checked
 *  - against the bytes the test holds (the blocks' sizes as the meter
 *    counts them: glibc's chunk sizes, another allocator's usable sizes):
 *    within the documented slack (docs/statistics.md, "The global meter":
 *    less than B = 32 KiB per other live thread) while threads are
 *    parked, exactly once every thread has exited;
 *  - against the allocator's own statistics, where it keeps them
 *    (jemalloc's stats.allocated after flushing the thread caches,
 *    tcmalloc's generic.current_allocated_bytes, glibc's mallinfo2 with
 *    its per-thread caches' slack).
 * Sizes come from a fixed LCG: every run does the same. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <dlfcn.h>
#include <malloc.h>
#include <memlimits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define B ((int64_t)32768) /* ML__METER_BATCH */
enum { PARKED = 4, SHORT = 2, PER = 3000 };

static const char *kind;
static bool glibc;

/* The bytes the meter counts for a block. */
static int64_t bytes(void *p)
{
	if (!p)
		return 0;
	if (glibc) {
		uintptr_t header = (uintptr_t)p - sizeof(size_t);
		return (int64_t)(*(const size_t *)header & ~(size_t)7);
	}
	return (int64_t)malloc_usable_size(p);
}

static int64_t usage(void)
{
	return (int64_t)ml_global_memory_usage();
}

/* ---- The allocator's own figures --------------------------------------- */

static int (*je_mallctl)(const char *, void *, size_t *, void *, size_t);
static int (*tc_property)(const char *, size_t *);

/* Its caches' blocks must not stand in its figure: jemalloc's thread
 * caches count as allocated until flushed (tcmalloc's do not). */
static void flush_cache(void)
{
	if (je_mallctl)
		je_mallctl("thread.tcache.flush", NULL, NULL, NULL, 0);
}

/* Bytes in use as the allocator says, or -1 where it does not. */
static int64_t allocator_figure(void)
{
	size_t v = 0, len = sizeof v;
	if (je_mallctl) {
		uint64_t e = 1;
		flush_cache();
		if (je_mallctl("epoch", NULL, NULL, &e, sizeof e) != 0 ||
		    je_mallctl("stats.allocated", &v, &len, NULL, 0) != 0)
			return -1;
		return (int64_t)v;
	}
	if (tc_property)
		return tc_property("generic.current_allocated_bytes", &v)
		           ? (int64_t)v
		           : -1;
	if (glibc) {
		struct mallinfo2 mi = mallinfo2();
		return (int64_t)(mi.uordblks + mi.hblkhd);
	}
	return -1;
}

/* How far its figure's move between two readings may stand from the
 * meter's beyond the meter's own slack (live: the threads alive at the
 * first reading plus those at the second): glibc counts the chunks in
 * its per-thread caches (tcache: 7 in each of 64 bins, 240 128 bytes,
 * per thread alive); tcmalloc counts the
 * tails of its spans that fit no object (less than one object per span:
 * 64 KiB is far more than this pattern makes); jemalloc, caches flushed,
 * nothing. */
static int64_t allocator_slack(int live)
{
	if (glibc)
		return (int64_t)240128 * live;
	if (tc_property)
		return 65536;
	return 0;
}

/* ---- The pattern ------------------------------------------------------ */

static uint32_t lcg(uint32_t *x)
{
	*x = *x * 1103515245u + 12345u;
	return *x >> 8;
}

/* Mostly 1..2000 bytes; one in 50 of 33 KiB..300 KiB (above a batch); the
 * first a 3 MiB block. */
static size_t size_at(uint32_t *x, int i)
{
	uint32_t r = lcg(x);
	if (i == 0)
		return 3u << 20;
	if (r % 50 == 0)
		return 33 * 1024 + r % (267 * 1024);
	return 1 + r % 2000;
}

struct worker {
	int id;
	void *own[PER];
	/* Blocks handed to the next worker, which frees them. */
	void *out[PER];
	int nout;
	int64_t held; /* bytes of own[] still allocated */
};

static struct worker parked[PARKED], shorts[SHORT];
static pthread_barrier_t made, freed, done;
static void *main_blocks[64];
static int64_t main_held;
static _Thread_local void *volatile sink;

/* Allocate PER blocks; free every third; give every other of the rest to
 * out[] (another thread frees them). */
static void make(struct worker *w)
{
	uint32_t x = 0x9e3779b9u * (uint32_t)(w->id + 1);
	w->held = 0;
	w->nout = 0;
	for (int i = 0; i < PER; i++) {
		size_t n = size_at(&x, i);
		void *p = i % 7 == 3 ? calloc(1, n) : malloc(n);
		if (!p)
			tap_bail("allocation of %zu bytes failed", n);
		memset(p, 1, n < 64 ? n : 64);
		if (i % 11 == 5) { /* and a realloc now and then */
			void *q = realloc(p, n + 3000);
			if (!q)
				tap_bail("realloc failed");
			p = q;
		}
		w->own[i] = p;
	}
	for (int i = 0; i < PER; i++) {
		if (i % 3 == 0) {
			free(w->own[i]);
			w->own[i] = NULL;
		} else if (i % 3 == 1) {
			w->out[w->nout++] = w->own[i];
			w->own[i] = NULL;
		} else {
			w->held += bytes(w->own[i]);
		}
	}
}

static int64_t out_bytes(const struct worker *w)
{
	int64_t s = 0;
	for (int i = 0; i < w->nout; i++)
		s += bytes(w->out[i]);
	return s;
}

static void free_out(struct worker *w)
{
	for (int i = 0; i < w->nout; i++)
		free(w->out[i]);
	w->nout = 0;
}

static void *parked_main(void *arg)
{
	struct worker *w = arg;
	make(w);
	pthread_barrier_wait(&made);
	/* The previous worker's blocks, freed here. */
	free_out(&parked[(w->id + PARKED - 1) % PARKED]);
	flush_cache();
	pthread_barrier_wait(&freed);
	/* main reads the meter and the allocator here */
	pthread_barrier_wait(&done);
	return NULL;
}

static void *short_main(void *arg)
{
	struct worker *w = arg;
	make(w);
	return NULL; /* exits: its delta is folded; main frees its out[] */
}

/* Its first malloc-family call frees a block main allocated. */
static void *free_first_main(void *arg)
{
	free(arg);
	return NULL;
}

static void *nothing(void *arg)
{
	void *p = malloc(100);
	sink = p;
	free(p);
	return arg;
}

/* Small stacks, so that glibc keeps every one in its cache (40 MiB) with
 * the thread data it allocated for it: the same blocks serve the threads
 * below, which then leave nothing behind. */
static pthread_attr_t attr;

static void warm_up(void)
{
	pthread_t t[PARKED + SHORT + 1];
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 256 * 1024);
	for (int i = 0; i < PARKED + SHORT + 1; i++)
		if (pthread_create(&t[i], &attr, nothing, NULL) != 0)
			tap_bail("pthread_create failed");
	for (int i = 0; i < PARKED + SHORT + 1; i++)
		pthread_join(t[i], NULL);
}

static void test_threads(void)
{
	warm_up();
	ml_set_global_memory_limit((uint64_t)1 << 40);
	flush_cache();
	int64_t base = usage(), abase = allocator_figure();

	/* A block freed first thing by a new thread. */
	void *first = malloc(5000);
	sink = first;
	pthread_t ff;
	if (pthread_create(&ff, &attr, free_first_main, first) != 0 ||
	    pthread_join(ff, NULL) != 0)
		tap_bail("pthread_create failed");

	/* Threads that make their blocks and exit. */
	pthread_t st[SHORT];
	for (int i = 0; i < SHORT; i++) {
		shorts[i].id = 100 + i;
		if (pthread_create(&st[i], &attr, short_main, &shorts[i]) != 0)
			tap_bail("pthread_create failed");
	}
	for (int i = 0; i < SHORT; i++)
		pthread_join(st[i], NULL);
	int64_t expect = 0;
	for (int i = 0; i < SHORT; i++)
		expect += shorts[i].held + out_bytes(&shorts[i]);
	tap_is(usage() - base, expect,
	       "threads that exited: folded exactly (their blocks, less what "
	       "they freed)");

	/* Blocks of exited threads freed here. */
	for (int i = 0; i < SHORT; i++) {
		expect -= out_bytes(&shorts[i]);
		free_out(&shorts[i]);
	}
	for (int i = 0; i < 64; i++) {
		main_blocks[i] = malloc((size_t)(i + 1) * 1000);
		main_held += bytes(main_blocks[i]);
	}
	expect += main_held;
	tap_is(usage() - base, expect,
	       "this thread's own frees of others' blocks and allocations: "
	       "exact");

	/* Parked threads: each allocates, gives a third to the next, frees
	 * the previous one's, and waits. */
	pthread_barrier_init(&made, NULL, PARKED);
	pthread_barrier_init(&freed, NULL, PARKED + 1);
	pthread_barrier_init(&done, NULL, PARKED + 1);
	pthread_t pt[PARKED];
	for (int i = 0; i < PARKED; i++) {
		parked[i].id = i;
		if (pthread_create(&pt[i], &attr, parked_main, &parked[i]) != 0)
			tap_bail("pthread_create failed");
	}
	pthread_barrier_wait(&freed);
	for (int i = 0; i < PARKED; i++)
		expect += parked[i].held;
	int64_t got = usage() - base, diff = got - expect;
	tap_ok(diff > -B * PARKED && diff < B * PARKED,
	       "%d threads parked: the meter's %lld within %lld of the %lld "
	       "bytes held (B per other live thread)",
	       PARKED, (long long)got, (long long)(B * PARKED),
	       (long long)expect);
	int64_t fig = allocator_figure();
	if (abase >= 0 && fig >= 0) {
		int64_t slack = B * PARKED + allocator_slack(1 + PARKED + 1);
		int64_t d = (got) - (fig - abase);
		tap_ok(d > -slack - 1 && d < slack + 1,
		       "%s's own figure moved by %lld, the meter by %lld "
		       "(within %lld)",
		       kind, (long long)(fig - abase), (long long)got,
		       (long long)slack);
	} else {
		tap_skip(1, "%s keeps no figure of its bytes in use", kind);
	}
	pthread_barrier_wait(&done);
	for (int i = 0; i < PARKED; i++)
		pthread_join(pt[i], NULL);
	tap_is(usage() - base, expect,
	       "all threads exited: the meter is exact again");

	/* Everything freed, on this thread. */
	for (int i = 0; i < PARKED; i++)
		for (int j = 0; j < PER; j++)
			free(parked[i].own[j]);
	for (int i = 0; i < SHORT; i++)
		for (int j = 0; j < PER; j++)
			free(shorts[i].own[j]);
	for (int i = 0; i < 64; i++)
		free(main_blocks[i]);
	tap_is(usage() - base, 0, "all freed: back to the start");
	fig = allocator_figure();
	if (abase >= 0 && fig >= 0) {
		int64_t slack = allocator_slack(2);
		int64_t d = fig - abase;
		tap_ok(d >= -slack && d <= slack,
		       "%s's own figure is back too (moved by %lld, within "
		       "%lld)",
		       kind, (long long)d, (long long)slack);
	} else {
		tap_skip(1, "%s keeps no figure of its bytes in use", kind);
	}
}

int main(void)
{
	kind = ml_allocator();
	glibc = !strcmp(kind, "glibc");
	if (!strcmp(kind, "jemalloc"))
		*(void **)&je_mallctl = dlsym(RTLD_DEFAULT, "mallctl");
	else if (!strcmp(kind, "tcmalloc"))
		*(void **)&tc_property =
		    dlsym(RTLD_DEFAULT, "MallocExtension_GetNumericProperty");
	if (tap_under_valgrind()) {
		tap_skip(1, "under valgrind the meter counts its replacement's "
		            "sizes");
		return tap_done();
	}
	test_threads();
	return tap_done();
}
