/* Run mode's timeline (MEMLIMITS_TIMELINE, `memlimits run --timeline
 * FILE`): the heap over time as TSV, for `memlimits plot`.  The format is
 * memlimits(1)'s ("TIMELINE"):
 *
 *   # memlimits timeline            comment lines first: readers skip
 *   # program /usr/bin/python3.11   the ones they do not know
 *   # start 1732531200.123456789    the origin, UNIX seconds
 *   # heap_limit 209715200          one line per limit set
 *   pid  seconds  heap_bytes  held_bytes  mapped_bytes  event  (TSV)
 *   4242 0.013    1052672              0        (held empty: not tracked)
 *   4242 1.204    209584128  ...  ...  heap_limit       (a limit reached)
 *   4242 1.310    1052672    ...  ...  exit
 *   # process 4243 /usr/lib/gcc/x86_64-linux-gnu/12/cc1
 *
 * heap_bytes is the whole heap, blocks and mappings; mapped_bytes its part
 * that the program mapped itself (issue 34; 0 with --no-mapped).  Files
 * of 0.3 have no mapped_bytes column: readers tell by the header.
 *
 * Each process image (the program, each exec, each forked child) appends
 * a "# process PID PROGRAM" line when it starts, among the rows: plot
 * labels each line with its program; readers that do not know the key
 * skip it, as they skip any comment.
 *
 * Written from the slow path, with no thread of its own: a row after a
 * sampled allocation is made (runmode.c's on_granted: the meter counts it
 * then, not at its sample) when the process's heap has moved by 1/256 of
 * the last row's heap (of the heap limit, when one is set) since the last
 * row, and no sooner than 10 ms after it unless it is a new peak (by that
 * much over the largest heap a row showed); a row whenever a limit is
 * reached (at most one per limit per 10 ms); a row at start, at fork in
 * the child and at exit.  The monotonic clock is read at samples only
 * (vDSO, no system call); a row is formatted on the stack and written
 * with one write(2) on an O_APPEND descriptor, so that the rows of the
 * program's processes, all appending to the one file, never
 * interleave.  The descriptor is close-on-exec and above 9; a program that
 * closes it (daemons close everything) is noticed (fstat before each row:
 * another file there is left alone) and the file opened again (once it
 * cannot be, the rows stop, said once).
 *
 * The origin is MEMLIMITS_TIMELINE_START (set by memlimits run when it
 * starts, so that the program and its children share it); without it,
 * the "# start" line of a file that has one, else this process's start.
 * Seconds are the origin's distance to this process's start (the
 * real-time clock, read once) plus the monotonic time since. */
#define _GNU_SOURCE
#include "run/run.h"

#include <fcntl.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ROW_NS (10 * 1000000ll) /* rows at least 10 ms apart */
#define MOVE_SHIFT 8            /* and the heap moved by 1/256 */
#define ROW_MAX 160             /* one row's bytes at most */

/* The descriptor and the file it was opened on, published together
 * under a sequence count (odd while a thread replaces them), so that a
 * thread compares the three as one: any thread may find the descriptor
 * closed and open the file again while others write rows. */
static _Atomic unsigned tl_seq;
static _Atomic int tl_fd = -1;
static _Atomic uint64_t tl_dev, tl_ino;
static char tl_path[ML__PATH_MAX]; /* %p expanded */
static int64_t mono0, offset_ns;   /* seconds = offset + (mono - mono0) */
static uint64_t pid;
static _Atomic int64_t last_ns;     /* the last heap row's time */
static _Atomic uint64_t last_heap;  /* and its heap */
static _Atomic int64_t event_ns[3]; /* the last row of each limit */
static _Atomic bool exit_written;
/* The file could not be opened again (said once): no more rows. */
static _Atomic bool gave_up;

static int64_t clock_ns(clockid_t c)
{
	struct timespec ts;
	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* "S.NNNNNNNNN" (up to 9 decimals) in ns; -1 if it is not that. */
static int64_t parse_start(const char *s, const char *end)
{
	int64_t v = 0, frac = 0;
	int digits = 0;
	const char *p = s;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (v > (INT64_MAX / 1000000000 - 9) / 10)
			return -1;
		v = v * 10 + (*p - '0');
	}
	if (p == s)
		return -1;
	if (p < end && *p == '.')
		for (p++; p < end && *p >= '0' && *p <= '9'; p++)
			if (digits < 9)
				frac = frac * 10 + (*p - '0'), digits++;
	if (p != end)
		return -1;
	while (digits++ < 9)
		frac *= 10;
	return v * 1000000000 + frac;
}

/* The "# start" line of the file's first 4 KiB, -1 if none. */
static int64_t start_in_file(const char *path)
{
	char buf[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = 0;
	for (char *l = buf; l && *l == '#';
	     l = strchr(l, '\n'), l = l ? l + 1 : l) {
		char *e = strchr(l, '\n');
		if (!e)
			break;
		if (!strncmp(l, "# start ", 8))
			return parse_start(l + 8, e);
	}
	return -1;
}

static void put_seconds(struct ml__out *o, int64_t mono)
{
	int64_t ns = offset_ns + (mono - mono0);
	if (ns < 0)
		ns = 0;
	uint64_t ms = (uint64_t)ns / 1000000;
	ml__out_u(o, ms / 1000, 10);
	ml__out_puts(o, ".");
	char d[3] = {(char)('0' + ms % 1000 / 100), (char)('0' + ms % 100 / 10),
	             (char)('0' + ms % 10)};
	ml__out_put(o, d, 3);
}

struct ident {
	unsigned seq;
	int fd;
	uint64_t dev, ino;
};

/* The three as one (a seqlock's reader); false while another thread
 * replaces them (a few stores: the row is not worth waiting for). */
static bool ident_get(struct ident *id)
{
	for (int tries = 0; tries < 64; tries++) {
		unsigned s =
		    atomic_load_explicit(&tl_seq, memory_order_acquire);
		if (s & 1)
			continue;
		id->fd = atomic_load_explicit(&tl_fd, memory_order_relaxed);
		id->dev = atomic_load_explicit(&tl_dev, memory_order_relaxed);
		id->ino = atomic_load_explicit(&tl_ino, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&tl_seq, memory_order_relaxed) == s) {
			id->seq = s;
			return true;
		}
	}
	return false;
}

/* fd on the file st describes, in place of what id read; false if
 * another thread replaced that first. */
static bool ident_put(unsigned seq, int fd, const struct stat *st)
{
	if (!atomic_compare_exchange_strong_explicit(&tl_seq, &seq, seq + 1,
	                                             memory_order_acquire,
	                                             memory_order_relaxed))
		return false;
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&tl_dev, (uint64_t)st->st_dev,
	                      memory_order_relaxed);
	atomic_store_explicit(&tl_ino, (uint64_t)st->st_ino,
	                      memory_order_relaxed);
	atomic_store_explicit(&tl_fd, fd, memory_order_relaxed);
	atomic_store_explicit(&tl_seq, seq + 2, memory_order_release);
	return true;
}

/* Our descriptor, opened again if the program closed it or put another
 * file in its place (that one is not ours to close). */
static int get_fd(void)
{
	struct ident id;
	if (!ident_get(&id))
		return -1;
	struct stat st;
	if (id.fd >= 0 && fstat(id.fd, &st) == 0 &&
	    (uint64_t)st.st_dev == id.dev && (uint64_t)st.st_ino == id.ino)
		return id.fd;
	if (atomic_load(&gave_up))
		return -1;
	int nfd = ml__out_open("timeline", tl_path, O_APPEND);
	if (nfd < 0) {
		atomic_store(&gave_up, true);
		return -1;
	}
	if (nfd < 10) {
		int high = fcntl(nfd, F_DUPFD_CLOEXEC, 10);
		close(nfd);
		if (high < 0)
			return -1;
		nfd = high;
	}
	if (fstat(nfd, &st) != 0) {
		close(nfd);
		return -1;
	}
	if (!ident_put(id.seq, nfd, &st)) {
		close(nfd); /* another thread's is in place */
		return ident_get(&id) ? id.fd : -1;
	}
	return nfd;
}

/* Run mode's held memory now, ML_NO_LIMIT when not tracked: given by
 * runmode.c at start, so that this file calls nothing of it (runmode.c
 * calls this one: no loop between the two). */
static uint64_t (*held_now)(void);

static void row(int64_t mono, uint64_t heap, const char *event)
{
	char buf[ROW_MAX];
	struct ml__out o = {.buf = buf, .cap = sizeof buf, .fd = -1};
	ml__out_u(&o, pid, 10);
	ml__out_puts(&o, "\t");
	put_seconds(&o, mono);
	ml__out_puts(&o, "\t");
	ml__out_u(&o, heap, 10);
	ml__out_puts(&o, "\t");
	uint64_t held = held_now ? held_now() : ML_NO_LIMIT;
	if (held != ML_NO_LIMIT)
		ml__out_u(&o, held, 10);
	ml__out_puts(&o, "\t");
	ml__out_u(&o, ml__meter_mapped_now(), 10);
	ml__out_puts(&o, "\t");
	ml__out_puts(&o, event ? event : "");
	ml__out_puts(&o, "\n");
	int fd = get_fd();
	if (fd >= 0 && !o.cut)
		ml__out_write(fd, buf, o.len);
}

static void header(int fd)
{
	char buf[ML__PATH_MAX + 512], exe[ML__PATH_MAX];
	struct ml__out o = {.buf = buf, .cap = sizeof buf, .fd = -1};
	ml__self_exe(exe, sizeof exe);
	ml__out_puts(&o, "# memlimits timeline\n# program ");
	/* One line whatever the name holds. */
	for (char *c = exe; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = '?';
	ml__out_puts(&o, exe);
	ml__out_puts(&o, "\n# start ");
	int64_t start = clock_ns(CLOCK_REALTIME) - offset_ns;
	ml__out_u(&o, (uint64_t)start / 1000000000, 10);
	char frac[10] = ".";
	uint64_t f = (uint64_t)start % 1000000000;
	for (int i = 9; i >= 1; i--, f /= 10)
		frac[i] = (char)('0' + f % 10);
	ml__out_put(&o, frac, 10);
	static const char *const names[] = {"alloc_limit", "heap_limit",
	                                    "held_limit"};
	const uint64_t limits[] = {ml__run.alloc_limit, ml__run.heap_limit,
	                           ml__run.held_limit};
	for (int i = 0; i < 3; i++) {
		if (limits[i] == ML_NO_LIMIT)
			continue;
		ml__out_puts(&o, "\n# ");
		ml__out_puts(&o, names[i]);
		ml__out_puts(&o, " ");
		ml__out_u(&o, limits[i], 10);
	}
	ml__out_puts(&o, "\npid\tseconds\theap_bytes\theld_bytes\tmapped_bytes"
	                 "\tevent\n");
	if (!o.cut)
		ml__out_write(fd, buf, o.len);
}

/* "# process PID PROGRAM": which program this pid runs from now on. */
static void process_line(void)
{
	char buf[ML__PATH_MAX + 64], exe[ML__PATH_MAX];
	struct ml__out o = {.buf = buf, .cap = sizeof buf, .fd = -1};
	ml__self_exe(exe, sizeof exe);
	for (char *c = exe; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = '?';
	ml__out_puts(&o, "# process ");
	ml__out_u(&o, pid, 10);
	ml__out_puts(&o, " ");
	ml__out_puts(&o, exe);
	ml__out_puts(&o, "\n");
	int fd = get_fd();
	if (fd >= 0 && !o.cut)
		ml__out_write(fd, buf, o.len);
}

void ml__timeline_start(uint64_t (*held)(void))
{
	held_now = held;
	if (!ml__run_expand(ml__run.timeline_path, tl_path, sizeof tl_path,
	                    "timeline"))
		return;
	pid = (uint64_t)getpid();
	mono0 = clock_ns(CLOCK_MONOTONIC);
	int64_t real0 = clock_ns(CLOCK_REALTIME);
	const char *v = ml__getenv("MEMLIMITS_TIMELINE_START");
	int64_t start = v ? parse_start(v, v + strlen(v)) : -1;
	if (v && start < 0)
		ml__diag("ignoring MEMLIMITS_TIMELINE_START=%s: expected UNIX "
		         "seconds (1732531200.25)",
		         v);
	if (start < 0)
		start = start_in_file(tl_path);
	offset_ns = start >= 0 && start <= real0 ? real0 - start : 0;
	int fd = get_fd();
	if (fd < 0)
		return;
	/* The first process writes the comments and the header; a lock
	 * for two that start at once. */
	struct stat st;
	flock(fd, LOCK_EX);
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == 0)
		header(fd);
	flock(fd, LOCK_UN);
	process_line();
	atomic_store(&last_ns, mono0);
	atomic_store(&last_heap, ml__meter_usage());
	row(mono0, atomic_load(&last_heap), NULL);
}

/* The largest heap a row has shown: a new peak is written however soon
 * after the last row (a picture must not miss the top), so the rows are
 * at most 256 per doubling of the heap (256 up to a heap limit) beyond
 * the 10 ms ones. */
static _Atomic uint64_t peak_row;

void ml__timeline_sample(void)
{
	int64_t now = clock_ns(CLOCK_MONOTONIC);
	int64_t last = atomic_load_explicit(&last_ns, memory_order_relaxed);
	uint64_t heap = ml__meter_usage();
	uint64_t was = atomic_load_explicit(&last_heap, memory_order_relaxed);
	uint64_t base =
	    ml__run.heap_limit != ML_NO_LIMIT ? ml__run.heap_limit : was;
	uint64_t peak = atomic_load_explicit(&peak_row, memory_order_relaxed);
	bool new_peak = heap > peak && heap - peak >= (base >> MOVE_SHIFT);
	if (now - last < ROW_NS && !new_peak)
		return;
	uint64_t moved = heap > was ? heap - was : was - heap;
	if (moved < (base >> MOVE_SHIFT) || !moved)
		return;
	/* One thread writes the row. */
	if (!atomic_compare_exchange_strong(&last_ns, &last, now))
		return;
	atomic_store_explicit(&last_heap, heap, memory_order_relaxed);
	if (heap > peak)
		atomic_store_explicit(&peak_row, heap, memory_order_relaxed);
	row(now, heap, NULL);
}

void ml__timeline_event(ml_status why)
{
	int i = why == ML_ALLOC_LIMIT    ? 0
	        : why == ML_GLOBAL_LIMIT ? 1
	        : why == ML_HELD_LIMIT   ? 2
	                                 : -1;
	if (i < 0 || atomic_load(&tl_fd) < 0)
		return;
	static const char *const events[] = {"alloc_limit", "heap_limit",
	                                     "held_limit"};
	int64_t now = clock_ns(CLOCK_MONOTONIC);
	int64_t last = atomic_load(&event_ns[i]);
	if (last && now - last < ROW_NS)
		return;
	if (!atomic_compare_exchange_strong(&event_ns[i], &last, now))
		return;
	row(now, ml__meter_usage(), events[i]);
}

void ml__timeline_exit(void)
{
	if (atomic_load(&tl_fd) < 0 || atomic_exchange(&exit_written, true))
		return;
	row(clock_ns(CLOCK_MONOTONIC), ml__meter_usage(), "exit");
}

void ml__timeline_fork_child(void)
{
	if (atomic_load(&tl_fd) < 0)
		return;
	/* A thread of the parent was replacing the descriptor: ours may be
	 * half written (then it differs from the file and is replaced). */
	unsigned seq = atomic_load(&tl_seq);
	if (seq & 1)
		atomic_store(&tl_seq, seq + 1);
	pid = (uint64_t)getpid();
	atomic_store(&exit_written, false);
	for (int i = 0; i < 3; i++)
		atomic_store(&event_ns[i], 0);
	process_line();
	int64_t now = clock_ns(CLOCK_MONOTONIC);
	atomic_store(&last_ns, now);
	atomic_store(&last_heap, ml__meter_usage());
	row(now, atomic_load(&last_heap), NULL);
}
