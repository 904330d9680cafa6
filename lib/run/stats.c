/* Run mode: sampling statistics (MEMLIMITS_STATS_DIR, memlimits run
 * --stats).  Every allocation of a thread is counted in the thread's own
 * record (from our pool, no lock on the allocation path); records are
 * folded into the process totals when their thread exits and read, as they
 * stand, when the file is written.  One JSON file per process,
 * DIR/memlimits.<pid>.json, written to a temporary name and renamed, so
 * that `memlimits stats` never sees half a file.  Format: memlimits(1). */
#define _GNU_SOURCE
#include "run/run.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h> /* rename() only: no stream is used */
#include <string.h>
#include <unistd.h>

#define NBUCKETS 65    /* 0, then [2^(i-1), 2^i) for i = 1..64 */
#define WINDOW 100000u /* allocations in a window without a sample */

struct counts {
	uint64_t allocs, bytes, sampled_allocs, samples;
	uint64_t dry_windows;
	uint64_t hist[NBUCKETS], hist_sampled[NBUCKETS];
};

struct tstats {
	struct tstats *next;
	uint64_t since_sample; /* allocations since the last sample */
	struct counts c;
};

ML__POOL(static, stats_pool, sizeof(struct tstats))
ML__LOCK(static, lock, ML__RANK_STATS) /* live list, totals */
static struct tstats *live;
static struct counts done; /* of exited threads */
static uint64_t nthreads;

static unsigned bucket(uint64_t n)
{
	return n ? 64u - (unsigned)__builtin_clzll(n) : 0;
}

void ml__stats_alloc(struct ml__thread *t, uint64_t n, uint64_t s)
{
	struct tstats *st = t->hook_local[ML__RUN_STATS];
	if (ml__unlikely(!st)) {
		st = ml__pool_get(&stats_pool);
		if (!st)
			return;
		memset(st, 0, sizeof *st);
		ml__spin_lock(&lock);
		st->next = live;
		live = st;
		nthreads++;
		ml__spin_unlock(&lock);
		t->hook_local[ML__RUN_STATS] = st;
	}
	unsigned b = bucket(n);
	ML__RBUMP(st->c.allocs, 1);
	ML__RBUMP(st->c.bytes, n);
	ML__RBUMP(st->c.hist[b], 1);
	if (s) {
		ML__RBUMP(st->c.sampled_allocs, 1);
		ML__RBUMP(st->c.samples, s);
		ML__RBUMP(st->c.hist_sampled[b], 1);
		st->since_sample = 0;
	} else if (++st->since_sample == WINDOW) {
		ML__RBUMP(st->c.dry_windows, 1);
		st->since_sample = 0;
	}
}

/* An allocation counted above that the allocator then failed. */
void ml__stats_failed(struct ml__thread *t, uint64_t n, uint64_t s)
{
	struct tstats *st = t->hook_local[ML__RUN_STATS];
	if (!st)
		return;
	unsigned b = bucket(n);
	ML__RBUMP(st->c.allocs, -1);
	ML__RBUMP(st->c.bytes, -n);
	ML__RBUMP(st->c.hist[b], -1);
	if (s) {
		ML__RBUMP(st->c.sampled_allocs, -1);
		ML__RBUMP(st->c.samples, -s);
		ML__RBUMP(st->c.hist_sampled[b], -1);
	}
}

static void fold(struct counts *into, const struct counts *c)
{
	into->allocs += ML__RLOAD(c->allocs);
	into->bytes += ML__RLOAD(c->bytes);
	into->sampled_allocs += ML__RLOAD(c->sampled_allocs);
	into->samples += ML__RLOAD(c->samples);
	into->dry_windows += ML__RLOAD(c->dry_windows);
	for (unsigned i = 0; i < NBUCKETS; i++) {
		into->hist[i] += ML__RLOAD(c->hist[i]);
		into->hist_sampled[i] += ML__RLOAD(c->hist_sampled[i]);
	}
}

/* Live threads go on counting while their records are read (written at
 * exit with threads still allocating: 2 files in 60 had a histogram that
 * did not add up to the count, and `memlimits stats` refused them).  The
 * histogram is the snapshot, the counts follow from it: a bucket's sampled
 * allocations, read a moment apart from its allocations, are at most
 * those, and the two totals are the histogram's sums. */
static void consistent(struct counts *c)
{
	c->allocs = c->sampled_allocs = 0;
	for (unsigned i = 0; i < NBUCKETS; i++) {
		if (c->hist_sampled[i] > c->hist[i])
			c->hist_sampled[i] = c->hist[i];
		c->allocs += c->hist[i];
		c->sampled_allocs += c->hist_sampled[i];
	}
}

void ml__stats_thread_exit(struct ml__thread *t)
{
	struct tstats *st = t->hook_local[ML__RUN_STATS];
	t->hook_local[ML__RUN_STATS] = NULL;
	if (!st)
		return;
	ml__spin_lock(&lock);
	for (struct tstats **p = &live; *p; p = &(*p)->next)
		if (*p == st) {
			*p = st->next;
			break;
		}
	fold(&done, &st->c);
	ml__spin_unlock(&lock);
	ml__pool_put(&stats_pool, st);
}

/* fork: the child is a new process with one thread and its own file;
 * everything counted so far was the parent's.  `lock` was held across the
 * fork (forklock.c) and no other thread runs here, so the list is whole. */
void ml__stats_fork_child(void)
{
	struct tstats *mine = ml__self.hook_local[ML__RUN_STATS];
	/* The other threads' records are not theirs any more: leaked, as
	 * their slots may be anywhere in the pool's free list state. */
	memset(&done, 0, sizeof done);
	live = mine;
	nthreads = mine ? 1 : 0;
	if (mine) {
		mine->next = NULL;
		memset(&mine->c, 0, sizeof mine->c);
		mine->since_sample = 0;
	}
}

/* ---- JSON without stdio ----------------------------------------------- */

/* A non-negative fraction with 9 decimals: "0.012500000". */
static void put_frac(struct ml__out *o, double v)
{
	if (!(v >= 0) || v > 1e18)
		v = 0;
	uint64_t whole = (uint64_t)v;
	uint64_t nano = (uint64_t)((v - (double)whole) * 1e9 + 0.5);
	if (nano >= 1000000000u) {
		whole++;
		nano -= 1000000000u;
	}
	ml__out_u(o, whole, 10);
	/* Nine digits with their leading zeros: those of 10^9 + nano after
	 * its leading 1. */
	char b[ML__UTOA_BYTES];
	char *d = ml__utoa(1000000000u + nano, 10, b);
	d[0] = '.';
	ml__out_puts(o, d);
}

static void put_str(struct ml__out *o, const char *s)
{
	ml__out_puts(o, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char esc[7] = {'\\', (char)c, 0};
		if (c == '"' || c == '\\') {
			ml__out_puts(o, esc);
		} else if (c < 0x20) {
			esc[1] = 'u';
			memcpy(esc + 2, "00", 2);
			esc[4] = "0123456789abcdef"[c >> 4];
			esc[5] = "0123456789abcdef"[c & 15];
			esc[6] = 0;
			ml__out_puts(o, esc);
		} else {
			esc[0] = (char)c;
			esc[1] = 0;
			ml__out_puts(o, esc);
		}
	}
	ml__out_puts(o, "\"");
}

static void field_u(struct ml__out *o, const char *name, uint64_t v)
{
	ml__out_puts(o, ",\n  \"");
	ml__out_puts(o, name);
	ml__out_puts(o, "\": ");
	ml__out_u(o, v, 10);
}

static void field_frac(struct ml__out *o, const char *name, double v)
{
	ml__out_puts(o, ",\n  \"");
	ml__out_puts(o, name);
	ml__out_puts(o, "\": ");
	put_frac(o, v);
}

static void format(struct ml__out *o, const struct counts *c, uint64_t threads,
                   const char *exe)
{
	uint64_t interval = atomic_load(&ml__interval);
	ml__out_puts(o,
	             "{\n  \"format\": \"memlimits-stats\",\n  \"version\": 3");
	field_u(o, "pid", (uint64_t)getpid());
	field_u(o, "ppid", (uint64_t)getppid());
	ml__out_puts(o, ",\n  \"program\": ");
	put_str(o, exe);
	field_u(o, "interval", interval);
	field_u(o, "threads", threads);
	field_u(o, "allocations", c->allocs);
	field_u(o, "bytes", c->bytes);
	field_u(o, "sampled_allocations", c->sampled_allocs);
	field_u(o, "samples", c->samples);
	field_u(o, "estimated_bytes", c->samples * interval);
	/* Sampled fraction of the allocations, and samples per expected
	 * sample (bytes / interval): near 1 when the sampler is unbiased. */
	field_frac(o, "allocation_sample_rate",
	           c->allocs ? (double)c->sampled_allocs / (double)c->allocs
	                     : 0);
	field_frac(o, "expected_samples", (double)c->bytes / (double)interval);
	/* Version 2 (issue 29): what `memlimits stats --format prometheus`
	 * needs; version 1 files have none of these. */
	uint64_t m[ML__M_N], limit = atomic_load(&ml__global_limit);
	ml__metrics_sum(m);
	field_u(o, "tasks_started", m[ML__M_STARTED]);
	field_u(o, "interrupted_alloc_limit",
	        m[ML__M_INTERRUPTED + ML_ALLOC_LIMIT - 1]);
	field_u(o, "interrupted_global_limit",
	        m[ML__M_INTERRUPTED + ML_GLOBAL_LIMIT - 1]);
	field_u(o, "interrupted_cancelled",
	        m[ML__M_INTERRUPTED + ML_CANCELLED - 1]);
	field_u(o, "interrupted_held_limit",
	        m[ML__M_INTERRUPTED + ML_HELD_LIMIT - 1]);
	field_u(o, "pressure_callbacks", m[ML__M_PRESSURE]);
	field_u(o, "heap_bytes", ml__meter_usage());
	/* Version 3 (issue 34): the part of heap_bytes the program mapped
	 * itself. */
	field_u(o, "mapped_bytes", ml__meter_mapped_now());
	field_u(o, "global_limit", limit == ML_NO_LIMIT ? 0 : limit);
	field_u(o, "shared_usage", ml__shared_usage());
	field_u(o, "window", WINDOW);
	field_u(o, "unsampled_windows", c->dry_windows);
	ml__out_puts(o, ",\n  \"histogram\": [");
	bool first = true;
	for (unsigned i = 0; i < NBUCKETS; i++) {
		if (!c->hist[i])
			continue;
		ml__out_puts(o, first ? "\n    [" : ",\n    [");
		first = false;
		ml__out_u(o, i ? (uint64_t)1 << (i - 1) : 0, 10);
		ml__out_puts(o, ", ");
		ml__out_u(o, c->hist[i], 10);
		ml__out_puts(o, ", ");
		ml__out_u(o, c->hist_sampled[i], 10);
		ml__out_puts(o, "]");
	}
	ml__out_puts(o, first ? "]\n}\n" : "\n  ]\n}\n");
}

/* DIR PREFIX PID SUFFIX into buf[ML__PATH_MAX]; false when it does not
 * fit (a name of ML__PATH_MAX - 1 bytes or more is refused). */
static bool stats_name(char *buf, const char *prefix, uint64_t pid,
                       const char *suffix)
{
	struct ml__out n = {.buf = buf, .cap = ML__PATH_MAX - 2, .fd = -1};
	ml__out_puts(&n, ml__run.stats_dir);
	ml__out_puts(&n, prefix);
	ml__out_u(&n, pid, 10);
	ml__out_puts(&n, suffix);
	buf[n.len] = 0;
	return !n.cut;
}

void ml__stats_write(void)
{
	static _Atomic int writing;
	if (!ml__run.stats_dir || atomic_exchange(&writing, 1))
		return;
	struct counts c = {0};
	ml__spin_lock(&lock);
	fold(&c, &done);
	for (struct tstats *st = live; st; st = st->next)
		fold(&c, &st->c);
	uint64_t threads = nthreads;
	ml__spin_unlock(&lock);
	consistent(&c);

	char exe[1024];
	ml__self_exe(exe, sizeof exe);
	char buf[8192];
	struct ml__out o = {.buf = buf, .cap = sizeof buf, .fd = -1};
	format(&o, &c, threads, exe);

	char tmp[ML__PATH_MAX], path[ML__PATH_MAX];
	uint64_t pid = (uint64_t)getpid();
	bool named = stats_name(tmp, "/.memlimits.", pid, ".json.tmp") &&
	             stats_name(path, "/memlimits.", pid, ".json");
	if (!named || o.cut) {
		ml__diag("cannot write the statistics to %s: %s",
		         ml__run.stats_dir,
		         o.cut ? "too much to write" : "path too long");
		return;
	}
	/* Our own new file: whatever has the name (a stale file of an
	 * earlier process with this pid, a FIFO, a symbolic link) goes, and
	 * O_EXCL neither follows a link nor opens a FIFO. */
	unlink(tmp);
	int fd = ml__out_open("statistics", tmp, O_CREAT | O_EXCL | O_NOFOLLOW);
	if (fd < 0)
		return;
	int err = ml__out_write(fd, o.buf, o.len);
	if (close(fd) != 0 && !err && errno != EINTR)
		err = errno;
	if (!err && rename(tmp, path) != 0)
		err = errno;
	if (err) {
		ml__out_failed("statistics", path, err);
		unlink(tmp);
	}
}
