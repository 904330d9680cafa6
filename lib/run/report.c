/* Run mode: where the memory went.  A heap profile built from the samples
 * (call stacks weighted by sampled bytes), the memory held by call stack
 * (at the trip and at exit), the stack that tripped a limit, and at exit
 * (or at the trip, in abort mode) a report and a collapsed-stack profile
 * (memlimits(1), "REPORT"); with the profile, what was held at the peak
 * of the held estimate (FILE.peak) and at the trip (FILE.stop);
 * ml_write_held_profile for programs.
 *
 * The sample hook runs inside malloc: the slow path has interned the
 * sample's stack already (core/stacks.c, t->stack), and its bytes add up
 * in the sampling thread's own counter pair per stack id, in our own
 * mmap'd memory; the threads' counts are summed only when something is
 * written.  Symbols are looked up only then too (run/symbols.c). */
#define _GNU_SOURCE
#include "run/run.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#define TOP_SITES 8          /* stacks listed in the report */
#define SITE_FRAMES 16       /* frames shown per listed stack */
#define OUT_BYTES (1u << 20) /* output buffer, flushed at line boundaries */

/* The first stack that tripped a limit, and what was held then. */
static struct {
	ml_status why;
	uint64_t n;
	uint64_t s, total;    /* its samples; the count with them (alloc) */
	_Atomic bool refused; /* it was refused: not in the counts */
	int raw;              /* frames the unwinder found, ours included */
	uint32_t depth;
	uintptr_t ip[ML__STACK_DEPTH];
	uint64_t *held; /* by stack id, NULL: not taken */
	uint64_t held_total, heap;
} trip;
static _Atomic int written;
/* The report's part written when the first limit is reached (issue 41:
 * a process that then aborts, _exits or is killed left none): 0 not
 * written, 1 being written, 2 written (the report at exit completes it),
 * 3 the whole report is being written or was (at exit, or at the trip in
 * abort mode).  One writer at a time: both parts go to one place. */
enum { EARLY_NONE, EARLY_BUSY, EARLY_DONE, EARLY_FAILED, EARLY_WHOLE };
static _Atomic int early;

/* What was held, by stack id, at the last snapshot of the peak (with a
 * profile).  A snapshot is taken at a sample where the process's held
 * estimate has passed the last snapshot's by PEAK_SHIFT (1/32) of it, and
 * by PEAK_FLOOR at least: the last one taken is within that margin (plus
 * the one allocation being sampled, not held yet when the hook runs) of
 * the highest held estimate seen at a sample, and the snapshots number
 * at most log(peak / PEAK_FLOOR) / log(33/32) + 1: 345 for a 10 GiB peak.
 * Each walks the table of held blocks once; between them a sample costs
 * one load and one comparison. */
#define PEAK_SHIFT 5
#define PEAK_FLOOR (256u << 10)
static struct {
	_Atomic uint64_t next; /* the held estimate that takes the next */
	_Atomic bool busy;     /* a thread is taking or reading it */
	uint64_t *held;        /* by stack id, NULL: none taken */
	uint64_t total, heap;  /* its sum, the heap then */
} peak;

/* The heap where the meter runs (a heap limit, a timeline), else
 * ML_NO_LIMIT: asking the allocator (mallinfo2) takes its arenas' locks,
 * not a thing to do inside malloc. */
static uint64_t heap_now(void)
{
	return ML__METER_ON ? ml__meter_usage() : ML_NO_LIMIT;
}

void ml__profile_trip(ml_status why, uint64_t n, uint64_t s, uint64_t total)
{
	/* Called once per process (runmode.c guards it). */
	trip.depth = ml__stack_capture(trip.ip);
	if (!(trip.depth & ~ML__STACK_TRUNCATED)) {
		/* No frame of the program: whether the unwinder found any
		 * at all, for the report to say why. */
		void *ip[ML__STACK_DEPTH];
		trip.raw = ml__backtrace(ip, ML__STACK_DEPTH);
	}
	trip.n = n;
	trip.s = s;
	trip.total = total;
	trip.why = why;
	if (!ML__HELD_ON)
		return;
	uint64_t *held = ml__raw_alloc(ML__NIDS * sizeof *held);
	if (held) {
		trip.held_total = ml__held_by_stack(NULL, held);
		trip.heap = heap_now();
		trip.held = held;
	}
}

void ml__profile_peak(uint64_t held)
{
	if (held < atomic_load_explicit(&peak.next, memory_order_relaxed) ||
	    atomic_exchange(&peak.busy, true))
		return;
	if (!peak.held)
		peak.held = ml__raw_alloc(ML__NIDS * sizeof *peak.held);
	if (peak.held) {
		memset(peak.held, 0, ML__NIDS * sizeof *peak.held);
		peak.total = ml__held_by_stack(NULL, peak.held);
		peak.heap = heap_now();
	}
	uint64_t m = peak.total >> PEAK_SHIFT;
	/* No memory: no more tries. */
	atomic_store(&peak.next,
	             !peak.held
	                 ? UINT64_MAX
	                 : peak.total + (m > PEAK_FLOOR ? m : PEAK_FLOOR));
	atomic_store(&peak.busy, false);
}

/* A forked child starts with no trip of its own (its profile is reset
 * by runmode.c). */
void ml__profile_trip_refused(void)
{
	atomic_store(&trip.refused, true);
}

/* A forked child's (runmode.c's fork hook, in the child, its one thread):
 * its report and profile are its own.  The parent's snapshot is of the
 * parent's heap: the child's own peak starts from nothing (its buffer,
 * our memory, is reused), and a snapshot another thread of the parent
 * was taking at the fork is not under way here (busy left set, the
 * child's report at exit waited for it for ever). */
void ml__profile_fork_child(void)
{
	atomic_store(&peak.next, 0);
	atomic_store(&peak.busy, false);
	peak.total = 0;
	if (peak.held)
		memset(peak.held, 0, ML__NIDS * sizeof *peak.held);
	trip.why = ML_OK;
	atomic_store(&trip.refused, false);
	trip.depth = 0;
	trip.held = NULL;
	atomic_store(&written, 0);
	atomic_store(&early, EARLY_NONE);
}

/* ---- Output without stdio --------------------------------------------- */

/* The rest out, the file closed; a failure said once, naming the file
 * (on our stderr, where a report on stderr that failed cannot go). */
static void finish(struct ml__out *o, const char *what, const char *path,
                   bool own_fd)
{
	ml__out_flush(o, o->len);
	if (own_fd && close(o->fd) != 0 && !o->err && errno != EINTR)
		o->err = errno;
	if (o->err)
		ml__out_failed(what, path, o->err);
}

/* Paths may hold "%p": the process id, for one file per process.  A name
 * that does not fit in buf is refused, never cut short. */
bool ml__run_expand(const char *path, char *buf, size_t cap, const char *what)
{
	struct ml__out n = {.buf = buf, .cap = cap - 1, .fd = -1};
	for (const char *p = path; *p && !n.cut; p++) {
		if (p[0] == '%' && p[1] == 'p') {
			ml__out_u(&n, (uint64_t)getpid(), 10);
			p++;
		} else {
			ml__out_put(&n, p, 1);
		}
	}
	if (n.cut) {
		ml__diag("cannot write the %s to %s: the name is longer than "
		         "%zu bytes",
		         what, path, cap - 1);
		return false;
	}
	buf[n.len] = 0;
	return true;
}

static int open_out(const char *what, const char *path, char *buf, size_t cap)
{
	if (!ml__run_expand(path, buf, cap, what))
		return -1;
	/* Appended: processes of one run share the file, memlimits run
	 * empties it first. */
	return ml__out_open(what, buf, O_CREAT | O_APPEND);
}

/* ---- Report ----------------------------------------------------------- */

/* A loaded object's link-map name; "" is the program itself. */
static void put_object_name(struct ml__out *o, const char *name)
{
	char exe[ML__PATH_MAX];
	if (name && *name) {
		ml__out_puts(o, name);
		return;
	}
	ml__self_exe(exe, sizeof exe);
	ml__out_puts(o, exe);
	ml__out_puts(o, " (the program)");
}

/* The allocations that the allocation limit refused allocated nothing:
 * their samples are not counted, so the count may end below the limit it
 * reached.  Said, lest the report read as a contradiction. */
static void put_refused(struct ml__out *o)
{
	uint64_t rs = atomic_load(&ml__run.refused_samples);
	uint64_t ra = atomic_load(&ml__run.refused_allocs);
	if (!ra)
		return;
	uint64_t s = atomic_load(&ml__interval);
	bool first = trip.why == ML_ALLOC_LIMIT && atomic_load(&trip.refused);
	ml__out_puts(o, "  not counted: the samples of the allocations this "
	                "limit refused (they allocated nothing)");
	if (first) {
		ml__out_puts(o, ":\n  the allocation that reached the limit (");
		ml__out_size(o, trip.n);
		ml__out_puts(o, ") had ");
		ml__out_u(o, trip.s, 10);
		ml__out_puts(o, " samples: counted, they would have taken the "
		                "count from ");
		ml__out_u(o, trip.total - trip.s, 10);
		ml__out_puts(o, " to ");
		ml__out_u(o, trip.total, 10);
		ml__out_puts(o, " samples (");
		ml__out_size(o, trip.total * s);
		ml__out_puts(o, ")");
		rs -= trip.s < rs ? trip.s : rs;
		ra--;
		if (ra) {
			ml__out_puts(o, ";\n  ");
			ml__out_u(o, ra, 10);
			ml__out_puts(o, " allocations refused after it had ");
			ml__out_u(o, rs, 10);
			ml__out_puts(o, " samples");
		}
	} else {
		ml__out_puts(o, ": ");
		ml__out_u(o, ra, 10);
		ml__out_puts(o, " allocations, ");
		ml__out_u(o, rs, 10);
		ml__out_puts(o, " samples");
	}
	ml__out_puts(o, "\n");
}

/* "N bytes (X MiB): blocks B, mapped M" (issue 34: the heap is both). */
static void put_split(struct ml__out *o, uint64_t heap, uint64_t mapped)
{
	if (mapped > heap)
		mapped = heap;
	ml__out_size(o, heap);
	ml__out_puts(o, ": blocks ");
	ml__out_human(o, heap - mapped);
	ml__out_puts(o, ", mapped ");
	ml__out_human(o, mapped);
}

/* The memory the program maps itself: which objects mapped the most,
 * and the mapping refused (issue 34). */
static void put_mapped(struct ml__out *o)
{
	ml__out_puts(o, "mapped memory: ");
	if (!(ml_capabilities() & ML_CAP_MAPPED)) {
		ml__out_puts(o,
		             "not counted (--no-mapped, or MEMLIMITS_MAPPED=0"
		             ")\n");
		return;
	}
	ml__out_human(o, ml__meter_mapped_now());
	ml__out_puts(o, " counted now (private anonymous writable mmap, "
	                "sbrk, IPC_PRIVATE shmat)\n");
	/* What the program got that is not counted, where the library can
	 * see it (issue 41: said here, not only in the docs). */
	uint64_t keyed = atomic_load(&ml__shm_keyed_bytes),
	         untracked = atomic_load(&ml__shm_untracked_bytes);
	if (keyed) {
		ml__out_puts(o, "  not counted: ");
		ml__out_human(o, keyed);
		ml__out_puts(o, " of SysV shared memory attached with a key "
		                "(shared between processes)\n");
	}
	if (untracked) {
		ml__out_puts(o, "  not counted: ");
		ml__out_human(o, untracked);
		ml__out_puts(o, " of IPC_PRIVATE SysV segments past the "
		                "table of attachments\n");
	}
	/* The objects by bytes mapped, largest first (3 at most). */
	bool shown[ML__MAPPED_BY] = {0};
	for (int k = 0; k < 3; k++) {
		int best = -1;
		for (int i = 0; i < ML__MAPPED_BY; i++) {
			const struct ml__mapped_by *b = &ml__mapped_by[i];
			if (shown[i] || !atomic_load(&b->obj) ||
			    !atomic_load(&b->name))
				continue;
			if (best < 0 ||
			    atomic_load(&b->bytes) >
			        atomic_load(&ml__mapped_by[best].bytes))
				best = i;
		}
		if (best < 0)
			break;
		shown[best] = true;
		const struct ml__mapped_by *b = &ml__mapped_by[best];
		ml__out_puts(o, k ? "  then " : "  mapped most by ");
		put_object_name(o, atomic_load(&b->name));
		ml__out_puts(o, ": ");
		ml__out_human(o, atomic_load(&b->bytes));
		ml__out_puts(o, " in ");
		ml__out_u(o, atomic_load(&b->count), 10);
		ml__out_puts(o, " mappings, the largest ");
		ml__out_human(o, atomic_load(&b->largest));
		ml__out_puts(o, "\n");
	}
	if (!atomic_load_explicit(&ml__mapped_refused.set,
	                          memory_order_acquire))
		return;
	ml__out_puts(o, "  refused: ");
	ml__out_puts(o, ml__mapped_refused.op);
	ml__out_puts(o, " of ");
	ml__out_size(o, ml__mapped_refused.bytes);
	struct ml__object ob;
	if (ml__find_object(ml__mapped_refused.pc, &ob) == 0) {
		ml__out_puts(o, " from ");
		put_object_name(o, ob.name);
	}
	uint64_t more = atomic_load(&ml__mapped_refusals);
	if (more > 1) {
		ml__out_puts(o, " (the first of ");
		ml__out_u(o, more, 10);
		ml__out_puts(o, " refused mappings)");
	}
	ml__out_puts(o, "\n");
}

/* "limit reached: ..." */
static void put_reached(struct ml__out *o)
{
	ml_status why = (ml_status)atomic_load(&ml__run.fired);
	ml__out_puts(o, "limit reached: ");
	if (why == ML_ALLOC_LIMIT)
		ml__out_puts(o,
		             "the allocation limit (estimated allocated bytes "
		             "reached it)\n");
	else if (why == ML_HELD_LIMIT)
		ml__out_puts(o,
		             "the held limit (an allocation would have taken "
		             "the estimated held bytes to it)\n");
	else if (why == ML_GLOBAL_LIMIT && atomic_load(&ml__run.tree_fired))
		ml__out_puts(
		    o, "the tree heap limit (an allocation of this process "
		       "would have taken the heap of\n  the program and its "
		       "descendants together over it: refused here)\n");
	else if (why == ML_GLOBAL_LIMIT)
		ml__out_puts(
		    o, "the heap limit (an allocation would have taken the "
		       "heap over it)\n");
	else if (why != ML_OK)
		ml__out_puts(o, ml_status_str(why)), ml__out_puts(o, "\n");
	else
		ml__out_puts(o, "none\n");
}

/* The limits and their figures now; `reached`: with the line saying
 * which was reached (the report's part at exit has it already). */
static void put_limits(struct ml__out *o, bool reached)
{
	if (reached)
		put_reached(o);
	ml__out_puts(o, "allocation limit: ");
	if (ml__run.alloc_limit == ML_NO_LIMIT) {
		ml__out_puts(o, "none\n");
	} else if (ml__malloc_in_front()) {
		ml__out_puts(o, "off (");
		ml__out_size(o, ml__run.alloc_limit);
		ml__out_puts(o, " asked): no allocation seen\n");
	} else {
		ml__out_size(o, ml__run.alloc_limit);
		ml__out_puts(o, ", reached at ");
		ml__out_u(o, ml__run.k, 10);
		ml__out_puts(o, " samples of all threads; counted so far: ");
		ml__out_u(o, ml__counts_samples(), 10);
		ml__out_puts(o, "\n");
		put_refused(o);
	}
	ml__out_puts(o, "allocator: ");
	ml__out_puts(o, ml__allocator_kind());
	if (strcmp(ml__allocator_kind(), "glibc")) {
		ml__out_puts(o, " (");
		ml__out_puts(o, ml__allocator_object(NULL, NULL));
		ml__out_puts(o, ")");
	}
	ml__out_puts(o, "\n");
	ml__out_puts(o, "held limit: ");
	if (ml__run.held_limit == ML_NO_LIMIT) {
		ml__out_puts(o, "none\n");
	} else {
		ml__out_size(o, ml__run.held_limit);
		ml__out_puts(o, "\n");
	}
	if (ml__run.tree) {
		ml__out_puts(o, "tree heap limit: ");
		ml__out_size(o, ml__shared_limit());
		ml__out_puts(
		    o, " for the program and its descendants "
		       "together\n  their heap at this report, as published: ");
		ml__out_size(o, ml__shared_usage());
		ml__out_puts(o, "\n");
	}
	ml__out_puts(o, "heap limit: ");
	if (ml__run.heap_limit == ML_NO_LIMIT) {
		ml__out_puts(o, "none\n");
	} else if (ml__run.heap_blind) {
		/* Nothing measured: no number. */
		ml__out_puts(o, "off (");
		ml__out_size(o, ml__run.heap_limit);
		ml__out_puts(o, " asked): the allocator in use (");
		ml__out_puts(o, ml__run.heap_blind);
		ml__out_puts(
		    o, ") is not glibc's, whose heap is all the meter can "
		       "read\n");
	} else {
		ml__out_size(o, ml__run.heap_limit);
		if (ml__run.heap_from) { /* a percentage: of what */
			ml__out_puts(o, " = ");
			ml__out_puts(o, ml__run.heap_from);
		}
		ml__out_puts(o, "\n  heap in use now: ");
		put_split(o, ml__meter_usage(), ml__meter_mapped_now());
		ml__out_puts(o, "\n  peak heap: ");
		uint64_t blocks, mapped;
		ml__meter_peak_split(&blocks, &mapped);
		put_split(o, blocks + mapped, mapped);
		ml__out_puts(o,
		             (ml_capabilities() & ML_CAP_MAPPED)
		                 ? "\n  (the heap is the blocks of the malloc "
		                   "family and the memory the program\n  maps "
		                   "itself: private anonymous writable "
		                   "mappings)\n"
		                 : "\n  (the heap is the blocks of the malloc "
		                   "family; memory the program maps\n  itself "
		                   "is not counted: --no-mapped)\n");
	}
	put_mapped(o);
}

/* The TOP_SITES ids of largest bytes[id] > 0, largest first; how many
 * ids have bytes at all in *n. */
static unsigned top_ids(const uint64_t *bytes, uint32_t *top, uint64_t *n)
{
	unsigned k = 0;
	*n = 0;
	for (uint32_t id = 0; id < ML__NIDS; id++) {
		uint64_t b = bytes[id];
		/* A stack whose every sampled allocation was refused holds
		 * nothing: not a site. */
		if (!b)
			continue;
		++*n;
		unsigned j = k;
		while (j > 0 && bytes[top[j - 1]] < b)
			j--;
		if (j == TOP_SITES)
			continue;
		if (k < TOP_SITES)
			k++;
		memmove(&top[j + 1], &top[j], (k - 1 - j) * sizeof top[0]);
		top[j] = id;
	}
	return k;
}

/* Never an empty section without the reason. */
static void put_no_frames(struct ml__out *o)
{
	ml__out_puts(o, "    (no frames: ");
	if (!ml__unwind_loaded()) {
		ml__out_puts(o, "the unwinder (libgcc_s) was not loaded at "
		                "start)\n");
	} else if (trip.raw <= 0) {
		ml__out_puts(o, "the unwinder found none)\n");
	} else {
		ml__out_u(o, (uint64_t)trip.raw, 10);
		ml__out_puts(o,
		             " found, all in the library itself: the unwinder "
		             "could not step past the\n    code that called "
		             "the allocator, which has no unwind "
		             "information)\n");
	}
}

/* "#1: 12 bytes, 50.0% of <what>[, 3 samples]" and the stack. */
static void put_sites(struct ml__out *o, struct ml__symbols *sy,
                      const uint64_t *bytes, const uint64_t *samples,
                      uint64_t total, const char *what)
{
	uint32_t top[TOP_SITES];
	uint64_t n;
	unsigned k = top_ids(bytes, top, &n);
	ml__out_puts(o, " (");
	ml__out_u(o, n, 10);
	ml__out_puts(o, " distinct stacks):\n");
	for (unsigned j = 0; j < k; j++) {
		uint32_t id = top[j];
		ml__out_puts(o, "#");
		ml__out_u(o, j + 1, 10);
		ml__out_puts(o, ": ");
		ml__out_size(o, bytes[id]);
		ml__out_puts(o, ", ");
		ml__out_ratio(o, bytes[id] * 100, total ? total : 1);
		ml__out_puts(o, "% of ");
		ml__out_puts(o, what);
		if (samples) {
			ml__out_puts(o, ", ");
			ml__out_u(o, samples[id], 10);
			ml__out_puts(o, " samples");
		}
		ml__out_puts(o, "\n");
		const struct ml__stack *st = ml__stack_get(id);
		if (st)
			ml__put_stack(o, sy, st->ip, st->depth, SITE_FRAMES);
		else
			ml__out_puts(o, "    [unknown] (stacks beyond the "
			                "table, or not captured)\n");
	}
	/* Never an empty section without the reason. */
	if (!k)
		ml__out_puts(o, samples
		                    ? "    (none: no allocation was sampled, "
		                      "or every sampled one was refused)\n"
		                    : "    (none: no sampled block is "
		                      "held)\n");
}

/* Were stacks captured at the samples (a report file or a profile)? */
static bool stacks_kept(void)
{
	return atomic_load_explicit(&ml__stacks_wanted, memory_order_relaxed) !=
	       0;
}

static void put_held(struct ml__out *o, struct ml__symbols *sy,
                     const char *when, const uint64_t *held, uint64_t total)
{
	ml__out_puts(o, "memory held ");
	ml__out_puts(o, when);
	ml__out_puts(o, " (estimated from the samples): ");
	ml__out_size(o, total);
	if (!stacks_kept()) {
		ml__out_puts(o, "\n");
		return;
	}
	ml__out_puts(o, ", by call stack");
	put_sites(o, sy, held, NULL, total, "held bytes");
}

/* The profile's name with suffix (".peak", ".stop") in buf[cap]. */
static bool held_path(const char *suffix, char *buf, size_t cap)
{
	size_t n = strlen(suffix);
	if (!ml__run_expand(ml__run.profile_path, buf, cap - n, "profile"))
		return false;
	memcpy(buf + strlen(buf), suffix, n + 1);
	return true;
}

/* "  memlimits flamegraph PATH   what it draws" */
static void put_picture(struct ml__out *o, const char *cmd, const char *path,
                        const char *what)
{
	ml__out_puts(o, "  memlimits ");
	ml__out_puts(o, cmd);
	ml__out_puts(o, " ");
	ml__out_puts(o, path);
	ml__out_puts(o, "\n      ");
	ml__out_puts(o, what);
	ml__out_puts(o, "\n");
}

/* The commands that draw the pictures of the files this process writes:
 * in the report, and alone on stderr when no report is written (the
 * program's own process, no limit reached), so that a user who asked for
 * a timeline or a profile learns what to do with it. */
static void put_pictures(struct ml__out *o)
{
	char path[ML__PATH_MAX];
	const char *p = ml__run.profile_path, *t = ml__run.timeline_path;
	if (!p && !t)
		return;
	ml__out_puts(o, "pictures (SVG; -o OUT.svg, else FILE.svg):\n");
	if (t && ml__run_expand(t, path, sizeof path, "timeline"))
		put_picture(o, "plot", path,
		            "the heap of each process over time, the limits");
	if (p && trip.held && held_path(".stop", path, sizeof path))
		put_picture(o, "flamegraph", path,
		            "what was held when the limit stopped the program, "
		            "by call stack");
	if (p && peak.held && held_path(".peak", path, sizeof path))
		put_picture(o, "flamegraph", path,
		            "what was held at the peak, by call stack");
	if (p && ml__run_expand(p, path, sizeof path, "profile"))
		put_picture(o, "flamegraph", path,
		            "the bytes allocated over the whole run, by call "
		            "stack");
}

/* No report written (no limit reached, no report file): the pictures'
 * commands alone on stderr, by the program's own process only (a build's
 * hundreds of processes would each say it). */
static void note_pictures(char *buf)
{
	int fd;
	if (!ml__run.profile_path && !ml__run.timeline_path)
		return;
	if (ml__run.report_pid != (uint64_t)getpid() ||
	    (fd = ml__diag_fd()) < 0)
		return;
	struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
	ml__out_puts(&o, "memlimits: no limit reached; ");
	put_pictures(&o);
	finish(&o, "report", "stderr", false);
}

/* "==== memlimits report: pid N, PROGRAM" (heading says which). */
static void put_heading(struct ml__out *o, struct ml__symbols *sy,
                        const char *heading)
{
	ml__out_puts(o, heading);
	ml__out_u(o, (uint64_t)getpid(), 10);
	ml__out_puts(o, ", ");
	ml__out_puts(o, ml__symbols_exe(sy));
	ml__out_puts(o, "\n");
}

static void put_trip_stack(struct ml__out *o, struct ml__symbols *sy)
{
	if (trip.why == ML_OK)
		return;
	ml__out_puts(o, "stack that tripped the ");
	ml__out_puts(o, trip.why == ML_ALLOC_LIMIT         ? "allocation"
	                : trip.why == ML_HELD_LIMIT        ? "held"
	                : atomic_load(&ml__run.tree_fired) ? "tree heap"
	                                                   : "heap");
	ml__out_puts(o, " limit, in an allocation of ");
	ml__out_size(o, trip.n);
	ml__out_puts(o, ":\n");
	if (trip.depth & ~ML__STACK_TRUNCATED)
		ml__put_stack(o, sy, trip.ip, trip.depth, ML__STACK_DEPTH);
	else
		put_no_frames(o);
}

/* The part written at the limit: which limit, its value, the heap or
 * the count then; the figures that change later (the counts with the
 * refusals, the peak, the mapping refused) are the part at exit's. */
static void put_at_limit(struct ml__out *o)
{
	ml_status why = (ml_status)atomic_load(&ml__run.fired);
	bool tree = atomic_load(&ml__run.tree_fired);
	put_reached(o);
	ml__out_puts(o, "  the limit: ");
	if (why == ML_ALLOC_LIMIT) {
		ml__out_size(o, ml__run.alloc_limit);
		ml__out_puts(o, " (");
		ml__out_u(o, ml__run.k, 10);
		ml__out_puts(o, " samples), the count then ");
		ml__out_u(o, trip.total, 10);
	} else if (why == ML_HELD_LIMIT) {
		ml__out_size(o, ml__run.held_limit);
	} else {
		ml__out_size(o, tree ? ml__shared_limit() : ml__run.heap_limit);
		if (!tree && !ml__run.heap_blind && ML__METER_ON) {
			ml__out_puts(o, ", the heap then ");
			ml__out_size(o, ml__meter_usage());
		}
	}
	ml__out_puts(o, "\n");
}

/* Where the report goes: the file (opened), or our copy of stderr; -1
 * none (said).  path: the name, for a failure's line. */
static int report_fd(char *path, size_t cap)
{
	int fd;
	if (ml__run.report_path)
		return open_out("report", ml__run.report_path, path, cap);
	/* Our copy of stderr: the program may have closed fd 2. */
	if ((fd = ml__diag_fd()) < 0)
		return -1;
	memcpy(path, "stderr", 7);
	return fd;
}

/* A bounded wait (a few seconds of yields) for the thread writing the
 * limit's part; what early is then. */
static int early_settled(void)
{
	int e = EARLY_NONE;
	for (unsigned i = 0; i < (1u << 22); i++) {
		if ((e = atomic_load(&early)) != EARLY_BUSY)
			break;
		sched_yield();
	}
	return e;
}

/* Another thread's refusal after the first limit: wait (bounded) for the
 * limit's part, claimed just after the first limit's CAS (fire), so that
 * this thread, which may exit at its refusal, does not end the process
 * before it is out: between that CAS and the claim early still reads
 * NONE (a thread that waited only while BUSY left a racing exit with no
 * report on stderr in 1 of 8 runs under load). */
void ml__report_wait(void)
{
	if (ml__run.on_limit == ML__ON_LIMIT_ABORT || !ml__run.profiling)
		return; /* nothing is claimed */
	for (unsigned i = 0; i < (1u << 22); i++) {
		int e = atomic_load(&early);
		if (e != EARLY_NONE && e != EARLY_BUSY)
			break;
		sched_yield();
	}
}

/* The whole report's turn (at exit, or at the trip in abort mode): true
 * when the limit's part was written before, and the rest is due. */
static bool whole_turn(void)
{
	for (;;) {
		int e = early_settled();
		if (e == EARLY_BUSY) /* its writer is stuck: write anyway */
			return atomic_exchange(&early, EARLY_WHOLE) ==
			       EARLY_DONE;
		if (atomic_compare_exchange_strong(&early, &e, EARLY_WHOLE))
			return e == EARLY_DONE;
	}
}

bool ml__report_claim(void)
{
	/* Abort mode writes the whole report at the trip (fire). */
	if (ml__run.on_limit == ML__ON_LIMIT_ABORT || !ml__run.profiling)
		return false;
	int none = EARLY_NONE;
	return atomic_compare_exchange_strong(&early, &none, EARLY_BUSY);
}

void ml__report_at_limit(void)
{
	/* Inside the allocation that reached the limit: our own memory, no
	 * demangler (it allocates), write(2) only.  The other threads'
	 * refusals wait for this (fire): it is short. */
	char path[ML__PATH_MAX];
	int fd = report_fd(path, sizeof path);
	struct ml__symbols *sy = fd >= 0 ? ml__symbols_open(false) : NULL;
	char *buf = sy ? ml__raw_alloc(OUT_BYTES) : NULL;
	int done = EARLY_FAILED; /* the report at exit is whole */
	if (buf) {
		struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
		put_heading(&o, sy, "==== memlimits report: pid ");
		put_at_limit(&o);
		put_trip_stack(&o, sy);
		ml__out_puts(&o, "(written when the limit was reached; the "
		                 "rest of the report at exit)\n");
		finish(&o, "report", path, ml__run.report_path != NULL);
		done = o.err ? EARLY_FAILED : EARLY_DONE;
	} else if (fd >= 0 && ml__run.report_path) {
		close(fd);
	}
	ml__symbols_close(sy);
	ml__raw_free(buf, OUT_BYTES);
	atomic_store(&early, done);
}

static void write_report(struct ml__symbols *sy, char *buf, uint64_t *tmp,
                         bool rest)
{
	ml_status why = (ml_status)atomic_load(&ml__run.fired);
	char path[ML__PATH_MAX];
	int fd;
	if (ml__run.report_path && why == ML_OK && ml__run.report_pid &&
	    ml__run.report_pid != (uint64_t)getpid()) {
		return; /* neither the program run started nor limited */
	} else if (!ml__run.report_path && why == ML_OK) {
		return; /* on stderr only when a limit was reached */
	} else if ((fd = report_fd(path, sizeof path)) < 0) {
		return;
	}
	struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
	uint64_t *samples = tmp + ML__NIDS;
	struct ml__prof_count all = ml__counts_profile(tmp, samples);
	uint64_t total = all.bytes;
	/* The limits and the stack that tripped went out at the limit: the
	 * rest here, under a heading of its own (nothing said twice). */
	if (rest)
		put_heading(
		    &o, sy,
		    "==== memlimits, the rest of the report at exit: pid ");
	else
		put_heading(&o, sy, "==== memlimits report: pid ");
	put_limits(&o, !rest);
	if (ml__malloc_in_front()) {
		/* Nothing reached us: no figure. */
		ml__out_puts(&o, "no allocation seen: the malloc of ");
		ml__out_puts(&o, ml__malloc_in_front());
		ml__out_puts(&o, " comes before the library's\n");
		goto end;
	}
	ml__out_puts(&o, "estimated bytes allocated: ");
	ml__out_size(&o, total);
	ml__out_puts(&o, " (");
	ml__out_u(&o, all.samples, 10);
	ml__out_puts(&o, " samples, interval ");
	ml__out_u(&o, atomic_load(&ml__interval), 10);
	ml__out_puts(&o, " bytes)");
	uint64_t rs = atomic_load(&ml__run.refused_samples);
	if (rs) {
		/* What the count would be with the refused allocations. */
		ml__out_puts(&o, ";\n  with the ");
		ml__out_u(&o, rs, 10);
		ml__out_puts(&o, " samples of the allocations refused by the "
		                 "allocation limit: ");
		ml__out_size(&o, total + rs * atomic_load(&ml__interval));
		ml__out_puts(&o, " (");
		ml__out_u(&o, all.samples + rs, 10);
		ml__out_puts(&o, " samples)");
	}
	ml__out_puts(&o, "\n");

	if (stacks_kept()) {
		ml__out_puts(&o, "top allocation sites by sampled bytes");
		put_sites(&o, sy, tmp, samples, total, "sampled bytes");
	} else {
		ml__out_puts(&o, "top allocation sites: not recorded (stacks "
		                 "are captured at every sample only with "
		                 "--report FILE or --profile FILE)\n");
	}
	if (!ML__HELD_ON)
		ml__out_puts(
		    &o,
		    "memory held: not tracked (run mode tracks it "
		    "with --held-limit, --report FILE or --profile FILE)\n");
	if (trip.held)
		put_held(&o, sy, "at the trip", trip.held, trip.held_total);
	/* Written at the trip (abort mode): the trip's figure is the one. */
	if (ML__HELD_ON &&
	    !(why != ML_OK && ml__run.on_limit == ML__ON_LIMIT_ABORT)) {
		memset(tmp, 0, ML__NIDS * sizeof *tmp);
		uint64_t held = ml__held_by_stack(NULL, tmp);
		put_held(&o, sy, "at exit", tmp, held);
	}
	if (!rest)
		put_trip_stack(&o, sy);
	put_pictures(&o);
end:
	ml__out_puts(&o, "==== end of memlimits report\n");
	finish(&o, "report", path, ml__run.report_path != NULL);
}

/* One collapsed-stack line per stack id with bytes: "[prog;]outer;...;
 * inner bytes". */
static void put_collapsed(struct ml__out *o, struct ml__symbols *sy,
                          const char *prog, const uint64_t *bytes)
{
	for (uint32_t id = 1; id <= ML__NIDS; id++) {
		uint32_t i = id % ML__NIDS; /* stack 0, [unknown], last */
		if (!bytes[i])
			continue;
		ml__put_collapsed(o, sy, prog, ml__stack_get(i));
		ml__out_puts(o, " ");
		ml__out_u(o, bytes[i], 10);
		ml__out_puts(o, "\n");
	}
}

/* Collapsed stacks of the sampled bytes, under the program's name. */
static void write_profile(struct ml__symbols *sy, char *buf, uint64_t *tmp)
{
	char path[ML__PATH_MAX];
	int fd = open_out("profile", ml__run.profile_path, path, sizeof path);
	if (fd < 0)
		return;
	struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
	ml__counts_profile(tmp, NULL);
	put_collapsed(&o, sy, ml__symbols_exe(sy), tmp);
	finish(&o, "profile", path, true);
}

/* FILE.peak or FILE.stop: a few comment lines saying what the stacks are
 * (memlimits(1), "PROFILE"; `memlimits flamegraph` titles the picture
 * from them), then the collapsed stacks of what was held, under the
 * program's name.  Appended: each process of the run adds its block. */
static void write_held(struct ml__symbols *sy, char *buf, const char *suffix,
                       const uint64_t *held, uint64_t total, uint64_t heap)
{
	char path[ML__PATH_MAX];
	if (!held_path(suffix, path, sizeof path))
		return;
	int fd = ml__out_open("profile", path, O_CREAT | O_APPEND);
	if (fd < 0)
		return;
	struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
	bool stop = suffix[1] == 's';
	ml__out_puts(&o, stop ? "# memlimits held at the stop\n"
	                      : "# memlimits held at the peak\n");
	ml__out_puts(&o, "# pid ");
	ml__out_u(&o, (uint64_t)getpid(), 10);
	ml__out_puts(&o, "\n# program ");
	/* One line whatever the name holds. */
	for (const char *c = ml__symbols_exe(sy); *c; c++)
		ml__out_put(&o, *c == '\n' || *c == '\r' ? "?" : c, 1);
	ml__out_puts(&o, "\n# held_bytes ");
	ml__out_u(&o, total, 10);
	ml__out_puts(&o, "\n");
	if (heap != ML_NO_LIMIT) {
		ml__out_puts(&o, "# heap_bytes ");
		ml__out_u(&o, heap, 10);
		ml__out_puts(&o, "\n");
	}
	if (stop) {
		/* The limit that stopped it, and its value. */
		ml_status why = trip.why;
		bool tree = atomic_load(&ml__run.tree_fired);
		uint64_t v = why == ML_ALLOC_LIMIT  ? ml__run.alloc_limit
		             : why == ML_HELD_LIMIT ? ml__run.held_limit
		             : tree                 ? ml__shared_limit()
		                                    : ml__run.heap_limit;
		ml__out_puts(&o, why == ML_ALLOC_LIMIT  ? "# alloc_limit "
		                 : why == ML_HELD_LIMIT ? "# held_limit "
		                 : tree                 ? "# tree_heap_limit "
		                                        : "# heap_limit ");
		ml__out_u(&o, v, 10);
		ml__out_puts(&o, "\n");
	}
	put_collapsed(&o, sy, ml__symbols_exe(sy), held);
	finish(&o, "profile", path, true);
}

void ml__report_write(void)
{
	/* Once: at the trip in abort mode, else at exit.  Nothing to write
	 * (no file named, no limit reached): no symbols to load either. */
	if (atomic_exchange(&written, 1))
		return;
	bool fired = atomic_load(&ml__run.fired) != ML_OK;
	if (!ml__run.report_path && !fired) {
		char *b = ml__raw_alloc(OUT_BYTES);
		if (b) {
			note_pictures(b);
			ml__raw_free(b, OUT_BYTES);
		}
		if (!ml__run.profile_path)
			return;
	}
	/* After the limit's part, if a thread is writing it. */
	bool rest = whole_turn();
	/* A report written at the trip (abort mode) is written inside an
	 * allocation: no demangler, which allocates. */
	bool inside = ml__run.on_limit == ML__ON_LIMIT_ABORT && fired;
	struct ml__symbols *sy = ml__symbols_open(!inside);
	char *buf = ml__raw_alloc(OUT_BYTES);
	uint64_t *tmp = ml__raw_alloc(2 * ML__NIDS * sizeof *tmp);
	/* The peak's snapshot is ours until the end (another thread may be
	 * taking one). */
	while (atomic_exchange(&peak.busy, true))
		sched_yield();
	atomic_store(&peak.next, UINT64_MAX);
	if (sy && buf && tmp) {
		write_report(sy, buf, tmp, rest);
		if (ml__run.profile_path)
			write_profile(sy, buf, tmp);
		if (ml__run.profile_path && peak.held && peak.total)
			write_held(sy, buf, ".peak", peak.held, peak.total,
			           peak.heap);
		if (ml__run.profile_path && trip.held)
			write_held(sy, buf, ".stop", trip.held, trip.held_total,
			           trip.heap);
	} else {
		ml__diag("no memory for the report");
	}
	atomic_store(&peak.busy, false);
	ml__symbols_close(sy);
	ml__raw_free(buf, OUT_BYTES);
	ml__raw_free(tmp, 2 * ML__NIDS * sizeof *tmp);
}

/* ---- ml_write_held_profile -------------------------------------------- */

ML_EXPORT int ml_write_held_profile(const ml_task *task, int fd)
{
	if (task && !ml__task_valid(task)) {
		errno = EINVAL;
		return ML_EINVAL;
	}
	int fl = fcntl(fd, F_GETFL);
	if (fd < 0 || fl < 0 || (fl & O_ACCMODE) == O_RDONLY) {
		errno = EBADF;
		return ML_EINVAL;
	}
	/* The symbol lookups and the demangler may allocate: on our own
	 * behalf, so never sampled nor refused. */
	struct ml__thread *t = &ml__self;
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__force_slow(t);
	int rc = 0;
	char *buf = ml__raw_alloc(OUT_BYTES);
	uint64_t *sums = ml__raw_alloc(ML__NIDS * sizeof *sums);
	struct ml__symbols *sy = ml__symbols_open(true);
	if (buf && sums && sy) {
		ml__held_by_stack(task, sums);
		struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
		put_collapsed(&o, sy, NULL, sums);
		ml__out_flush(&o, o.len);
		if (o.err) {
			errno = o.err;
			rc = ML_EINVAL;
		}
	} else {
		errno = ENOMEM;
		rc = ML_ENOMEM;
	}
	ml__symbols_close(sy);
	ml__raw_free(buf, OUT_BYTES);
	ml__raw_free(sums, ML__NIDS * sizeof *sums);
	t->busy = busy;
	ml__unforce(t);
	return rc;
}
