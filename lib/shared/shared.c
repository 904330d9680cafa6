/* Budgets shared by the processes of a server (issues 27 and 35;
 * docs/shared.md; ml_shared_join(3), ml_shared_create(3)).
 *
 * A budget is a table in shared memory: either a POSIX shared-memory
 * object, "/memlimits.UID.NAME" (/dev/shm), mode 0600, opened with
 * O_NOFOLLOW and refused unless this user owns it (root included) and its
 * head says layout 2 with a size that matches the file (ml_shared_join),
 * or an anonymous shared mapping with no name at all, inherited by the
 * children a server forks (ml_shared_create): nothing another user can
 * squat, nothing anyone can truncate, nothing left behind.  A by-name
 * table is mapped at the join and the descriptor closed at once; a
 * truncated object would raise SIGBUS at the next access, so a member of
 * a by-name budget keeps a SIGBUS handler that, for a fault inside the
 * table only, maps anonymous memory over it and marks the budget lost:
 * the next hook leaves it with one line on stderr and the member carries
 * on with its own limits (any other SIGBUS goes to the handler before
 * ours, or kills as it would have).
 *
 * The table: a 64-byte head (magic, layout, slot count, limit, high-water
 * mark) and N slots of 192 bytes (N chosen at creation).  A slot's `tag`
 * packs pid << 32 | generation << 2 | state; it is claimed and freed by
 * CAS only (FREE -> CLAIMING -> LIVE -> FREE), so that a member killed at
 * any instruction leaves no lock held.  What a member publishes (heap,
 * its largest eligible global task's held estimate and identity, what its
 * stopped tasks hold and since when) is written into one of two copies,
 * the one `seq` does not name, and then `seq` moves to it: a reader takes
 * the copy `seq` names and keeps it only if `seq` has not moved meanwhile,
 * so no pair is read torn, and a writer killed half-way leaves the copy in
 * force intact.
 *
 * Publication, from the meter's fold hook (every 32 KiB a thread
 * allocates or frees), atomics and a few system calls: when the heap has
 * moved by the batch since the last sum read it, the member publishes
 * and sums the table, sweeping the dead (kill(pid, 0) == ESRCH; every
 * 16th sum, and always before a choice, also /proc/PID/stat: a zombie, a
 * start time that differs (the pid was reused), or an exec token that
 * differs (the pid exec'd another image: its layout fields in stat,
 * randomised at every exec)).  When a fold's sum is over, the choice
 * waits for the held hook of the same thread (the allocation's sampled
 * block recorded as its task's): the crosser counts its own block.
 *
 * The choice: when the total exceeds the limit plus what stopped tasks
 * still hold plus what the tasks already asked to stop hold (each for
 * ML_SHARED_DEADLINE_MS at most: after that a request or a stopped task
 * that has not given its memory back is memory like any other), the
 * member that saw it posts a stop request (CAS 0 -> the task's identity)
 * in the slot whose largest task holds the most among slots with no
 * request pending, and wakes that process: the signal its slot
 * advertises, sent through a pidfd once its start time and exec token
 * are checked, with the identity as sigqueue's value.  The wake handler
 * interrupts the named task at once (no lock waited on: a try of the
 * global list's lock, else at the next safe point) and calls the
 * program's callback; the target publishes and clears the request at its
 * next fold or safe point.  A request is dropped when its task has ended
 * (the target clears it) or when a sum finds the total back under the
 * limit.  Nothing read from the table is trusted: indices bounded, no
 * pointer followed, values clamped, sums saturate; garbage can make a
 * member count wrong, never crash it or refuse an allocation, except
 * under run mode's --tree-heap-limit, whose refusals read the published
 * total: garbage there can refuse. */
#define _GNU_SOURCE
#include "shared/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAGIC 0x6d6c736861726502ull /* "mlshare", layout 2 */
#define LAYOUT 2u
#define PID_LIMIT 4194304 /* PID_MAX_LIMIT on 64-bit Linux */
#define HEAP_CLAMP ((uint64_t)1 << 50)
#define FULL_EVERY 16
#define DEADLINE_NS ((uint64_t)ML_SHARED_DEADLINE_MS * 1000000)

enum { FREE = 0, CLAIMING = 1, LIVE = 2 };

struct head {
	_Atomic uint64_t magic;  /* MAGIC, stored last by the maker */
	_Atomic uint32_t layout; /* LAYOUT */
	_Atomic uint32_t nslots; /* slots, as the file's size says too */
	_Atomic uint64_t limit;
	_Atomic uint32_t hw; /* slots [0, hw) may be in use */
	uint32_t pad0;
	char pad[32];
};

struct copy {
	_Atomic uint64_t heap;       /* published heap, bytes            */
	_Atomic uint64_t top_held;   /* largest eligible task's estimate */
	_Atomic uint64_t top_id;     /* its identity, 0: none            */
	_Atomic uint64_t stopping;   /* held by its stopped tasks        */
	_Atomic uint64_t stop_since; /* CLOCK_MONOTONIC ns, stopping > 0 */
};

struct slot {
	_Atomic uint64_t tag;      /* pid << 32 | gen << 2 | state       */
	_Atomic uint64_t start;    /* the pid's start time (clock ticks) */
	_Atomic uint64_t exec_tok; /* its image's token, 0: unknown      */
	_Atomic uint64_t seq;      /* publications; copy[seq & 1] holds  */
	_Atomic uint64_t request;  /* a stop request: a top_id, 0: none  */
	_Atomic uint64_t req_time; /* when it was posted (monotonic ns)  */
	_Atomic uint64_t wake;     /* the signal that wakes it, 0: none  */
	struct copy copy[2];
	uint64_t pad[7];
};

_Static_assert(sizeof(struct head) == 64, "head is one cache line");
_Static_assert(sizeof(struct slot) == 192, "a slot is three cache lines");

struct table {
	struct head head;
	struct slot slot[];
};

static size_t table_bytes(uint32_t n)
{
	return sizeof(struct head) + (size_t)n * sizeof(struct slot);
}

/* Process-local state.  tab is set last at a join and cleared first at a
 * leave; the hooks use it only while holding `pub` (a try-lock: a thread
 * that finds it taken skips, nobody waits on the allocation path).
 * nslots and the mapping's extent are ours, never read back from the
 * table. */
static struct table *_Atomic tab;
static uint32_t nslots;
static void *_Atomic map_base; /* for the SIGBUS handler */
static _Atomic size_t map_len;
static _Atomic bool map_lost; /* the object shrank under us */
static int my_slot = -1;      /* -1: none yet (a fork child claims lazily) */
static uint64_t my_tag;       /* the tag our slot has while it is ours */
static uint64_t my_start;     /* our start time */
static uint64_t my_token;     /* our image's exec token */
static pid_t my_pid;          /* getpid() of this lineage */
static uint32_t my_lineage;   /* ml__lineage when the above were set */
static uint64_t base;         /* heap inherited at a fork: not ours */
static uint64_t summed;       /* our heap as the last sum read it */
static uint64_t last_stopping, last_since;
/* The held estimates' net movement since we last published
 * (on_held_moved): blocks recorded less blocks freed, sampled weights. */
static _Atomic int64_t held_moved;
static uint64_t id_key; /* task identities: pointer ^ key */
static uint32_t sums;   /* sums done (every FULL_EVERY-th is full) */
/* A claim failed (a full table): never retried, said once. */
static bool claim_failed;
static char my_name[ML__SHARED_NAME_MAX + 1];
/* Pressure with the shared limit (ml_set_pressure_callback). */
static _Atomic bool shared_above, shared_pressure;
static _Atomic uint64_t pressure_total;
/* A fold found the total over: the choice waits for this thread's held
 * hook (its allocation's block recorded), or its next fold. */
static __thread bool choice_due __attribute__((tls_model("initial-exec")));

/* The wake (ml_shared_set_wake): the signal, 0 none, -1 not set yet (the
 * default, SIGCONT, at the first join); the program's callback. */
static _Atomic int wake_sig = -1;
static _Atomic ml_wake_fn wake_fn;
static void *_Atomic wake_arg;
static int wake_installed; /* the signal our handler is on, 0: none */
static bool wake_asked;    /* the program named the signal */
static struct sigaction wake_old;
/* A request the handler could not carry out (the global list's lock was
 * taken): done at the next fold or safe point. */
static _Atomic uint64_t wake_deferred;

/* join_lock first, then pub (both before the global list's lock). */
ML__LOCK(static, join_lock, ML__RANK_UNWIND)
ML__LOCK(static, pub, ML__RANK_UNWIND)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---- Processes --------------------------------------------------------- */

/* A process's start time, exec token and whether it is a zombie, from
 * /proc/PID/stat: field 22, the start time; fields 26-28 and 45-47, the
 * image's code, stack, data and brk start addresses, which every exec
 * sets anew (randomised, and another program's differ anyway) and
 * nothing else changes (the argument and environment fields, which
 * prctl(PR_SET_MM) can move, are left out), hashed into the token; 0
 * when the kernel hides them (another user, a process that is not
 * dumpable).  Fields counted after the last ')'.  1: read; 0: no such
 * process; -1: cannot tell.  No stdio, no malloc: async-signal-safe. */
static int proc_stat(pid_t pid, uint64_t *start, uint64_t *token)
{
	char path[48] = "/proc/", num[ML__UTOA_BYTES];
	strcat(path, ml__utoa((uint64_t)pid, 10, num));
	strcat(path, "/stat");
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH ? 0 : -1;
	char buf[1024];
	ssize_t n;
	do
		n = read(fd, buf, sizeof buf - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	if (n <= 0)
		return n == 0 ? 0 : -1;
	buf[n] = 0;
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ')
		return -1;
	p += 2; /* field 3, the state */
	if (*p == 'Z' || *p == 'X' || *p == 'x')
		return 0;
	uint64_t tok = 0, any = 0;
	for (int field = 3; field <= 47; field++) {
		if (field > 3) {
			p = strchr(p, ' ');
			if (!p)
				break;
			p++;
		}
		if (field != 22 && !(field >= 26 && field <= 28) &&
		    !(field >= 45 && field <= 47))
			continue;
		uint64_t v = 0;
		for (char *q = p; *q >= '0' && *q <= '9'; q++)
			v = v * 10 + (uint64_t)(*q - '0');
		if (field == 22) {
			*start = v;
			if (!token)
				return 1;
			continue;
		}
		any |= v;
		tok = (tok ^ v) * 0x100000001b3ull;
	}
	if (token)
		*token = any ? tok | 1 : 0;
	return 1;
}

static inline pid_t tag_pid(uint64_t tag)
{
	return (pid_t)(uint32_t)(tag >> 32);
}
static inline unsigned tag_state(uint64_t tag)
{
	return (unsigned)(tag & 3);
}
static inline uint64_t tag_make(pid_t pid, uint64_t old, unsigned state)
{
	uint64_t gen = ((old >> 2) + 1) & 0x3fffffff;
	return (uint64_t)(uint32_t)pid << 32 | gen << 2 | state;
}

/* The slot's process as /proc has it now is the one that claimed it:
 * same start time and, where both are known, the same image. */
static bool same_process(struct slot *s, pid_t pid, bool *known)
{
	uint64_t start = 0, token = 0;
	int r = proc_stat(pid, &start, &token);
	*known = r >= 0;
	if (r <= 0)
		return r < 0; /* gone: false; cannot tell: true */
	uint64_t want =
	    atomic_load_explicit(&s->exec_tok, memory_order_relaxed);
	if (start != atomic_load_explicit(&s->start, memory_order_relaxed))
		return false;
	return !want || !token || want == token;
}

/* Is the member of slot i, whose tag is `tag`, alive?  `full`: also check
 * its start time, exec token and zombie state in /proc. */
static bool member_alive(struct table *t, int i, uint64_t tag, bool full)
{
	pid_t pid = tag_pid(tag);
	if (pid <= 0 || pid > PID_LIMIT)
		return false;
	if (pid == my_pid)
		return i == my_slot; /* one slot per process: any other is
		                        a stale one of an image before exec */
	if (kill(pid, 0) != 0 && errno == ESRCH)
		return false;
	if (!full || tag_state(tag) != LIVE)
		return true; /* a claim writes start late */
	bool known;
	return same_process(&t->slot[i], pid, &known);
}

/* Free slot i (its member is gone), unless its tag changed meanwhile. */
static void slot_free(struct table *t, int i, uint64_t tag)
{
	atomic_compare_exchange_strong(&t->slot[i].tag, &tag,
	                               tag_make(0, tag, FREE));
}

static uint32_t slots_used(struct table *t)
{
	uint32_t hw = atomic_load_explicit(&t->head.hw, memory_order_relaxed);
	return hw < nslots ? hw : nslots;
}

static void raise_hw(struct table *t, uint32_t n)
{
	uint32_t hw = atomic_load(&t->head.hw);
	while ((hw < n || hw > nslots) &&
	       !atomic_compare_exchange_weak(&t->head.hw, &hw, n))
		;
}

/* The process's identity for this lineage (a fork child has its own). */
static bool know_self(void)
{
	if (my_pid && my_lineage == ml__lineage)
		return true;
	my_pid = getpid();
	my_lineage = ml__lineage;
	my_token = 0;
	return proc_stat(my_pid, &my_start, &my_token) == 1;
}

static int wake_now(void)
{
	int s = atomic_load(&wake_sig);
	return s > 0 && s == wake_installed ? s : 0;
}

/* Claim a free slot: ML_OK or ML_ENOMEM (none free). */
static int claim(struct table *t)
{
	if (!know_self())
		my_start = my_token = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (uint32_t i = 0; i < nslots; i++) {
			struct slot *s = &t->slot[i];
			uint64_t tag = atomic_load(&s->tag);
			if (tag_state(tag) != FREE) {
				/* The second pass sweeps the dead. */
				if (pass && !member_alive(t, (int)i, tag, true))
					slot_free(t, (int)i, tag);
				tag = atomic_load(&s->tag);
				if (tag_state(tag) != FREE)
					continue;
			}
			uint64_t mine = tag_make(my_pid, tag, CLAIMING);
			if (!atomic_compare_exchange_strong(&s->tag, &tag,
			                                    mine))
				continue;
			atomic_store(&s->start, my_start);
			atomic_store(&s->exec_tok, my_token);
			atomic_store(&s->request, 0);
			atomic_store(&s->req_time, 0);
			atomic_store(&s->wake, (uint64_t)wake_now());
			memset((void *)s->copy, 0, sizeof s->copy);
			atomic_store(&s->seq, 0);
			my_tag = (mine & ~(uint64_t)3) | LIVE;
			atomic_store(&s->tag, my_tag);
			my_slot = (int)i;
			summed = 0;
			last_stopping = last_since = 0;
			raise_hw(t, i + 1);
			return ML_OK;
		}
	}
	return ML_ENOMEM;
}

/* Our slot is still ours (nobody swept or overwrote it). */
static bool slot_ours(struct table *t)
{
	return my_slot >= 0 && (uint32_t)my_slot < nslots &&
	       atomic_load_explicit(&t->slot[my_slot].tag,
	                            memory_order_relaxed) == my_tag;
}

/* ---- The two copies ---------------------------------------------------- */

struct pubv {
	uint64_t heap, top_held, top_id, stopping, stop_since;
};

/* Write the copy seq does not name, then name it (one writer per slot:
 * its member, under `pub`).  The fence keeps this round's stores after
 * the last round's seq, which readers check. */
static void pub_write(struct slot *s, const struct pubv *v)
{
	uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
	struct copy *c = &s->copy[(q + 1) & 1];
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&c->heap, v->heap, memory_order_relaxed);
	atomic_store_explicit(&c->top_held, v->top_held, memory_order_relaxed);
	atomic_store_explicit(&c->top_id, v->top_id, memory_order_relaxed);
	atomic_store_explicit(&c->stopping, v->stopping, memory_order_relaxed);
	atomic_store_explicit(&c->stop_since, v->stop_since,
	                      memory_order_relaxed);
	atomic_store_explicit(&s->seq, q + 1, memory_order_release);
}

/* The copy in force, untorn: false if the writer kept moving (16 rounds
 * during one read: only a table written by something else). */
static bool pub_read(struct slot *s, struct pubv *v)
{
	for (int tries = 0; tries < 16; tries++) {
		uint64_t q =
		    atomic_load_explicit(&s->seq, memory_order_acquire);
		struct copy *c = &s->copy[q & 1];
		v->heap = atomic_load_explicit(&c->heap, memory_order_relaxed);
		v->top_held =
		    atomic_load_explicit(&c->top_held, memory_order_relaxed);
		v->top_id =
		    atomic_load_explicit(&c->top_id, memory_order_relaxed);
		v->stopping =
		    atomic_load_explicit(&c->stopping, memory_order_relaxed);
		v->stop_since =
		    atomic_load_explicit(&c->stop_since, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q)
			return true;
	}
	return false;
}

/* ---- What this process publishes --------------------------------------- */

struct top {
	struct ml_task *best;
	uint64_t held, stopping;
};

static void find_top(struct ml_task *task, void *arg)
{
	struct top *top = arg;
	int st = atomic_load_explicit(&task->status, memory_order_relaxed);
	uint64_t h = ml__held_bytes(task);
	if (st == ML_GLOBAL_LIMIT)
		top->stopping += h;
	else if (st == ML_OK && (!top->best || h > top->held)) {
		top->best = task;
		top->held = h;
	}
}

static uint64_t task_id(const struct ml_task *task)
{
	return task ? ((uint64_t)(uintptr_t)task ^ id_key) | 1 : 0;
}

static uint64_t heap_now(void)
{
	uint64_t u = ml__meter_usage();
	return u > base ? u - base : 0;
}

static void publish(struct table *t)
{
	struct slot *s = &t->slot[my_slot];
	struct top top = {0};
	ml__global_visit(find_top, &top);
	if (!top.stopping)
		last_since = 0;
	else if (!last_stopping || !last_since)
		last_since = now_ns();
	struct pubv v = {heap_now(), top.best ? top.held : 0, task_id(top.best),
	                 top.stopping, last_since};
	pub_write(s, &v);
	atomic_store_explicit(&held_moved, 0, memory_order_relaxed);
	last_stopping = top.stopping;
	if (slots_used(t) <= (uint32_t)my_slot)
		raise_hw(t, (uint32_t)my_slot + 1);
}

static uint64_t add_sat(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

static uint64_t clamp(uint64_t v)
{
	return v < HEAP_CLAMP ? v : HEAP_CLAMP;
}

/* The members' totals, the dead swept; `skip`: a slot whose pending
 * request is not counted as stopping (the target's own view). */
struct view {
	uint64_t total, stopping, limit;
	int best; /* slot to ask, -1: none */
	uint64_t best_held, best_id;
	bool requests; /* some request pending */
};

/* A fresh moment (within the deadline of `now`)?  0 is none. */
static bool fresh(uint64_t since, uint64_t now)
{
	return since && now - since < DEADLINE_NS;
}

/* `readonly`: ml_shared_usage's scan, which frees nothing and leaves the
 * fold's reference alone; the dead are skipped all the same. */
static void sum(struct table *t, bool full, int skip, bool readonly,
                struct view *v)
{
	memset(v, 0, sizeof *v);
	v->best = -1;
	v->limit = atomic_load_explicit(&t->head.limit, memory_order_relaxed);
	uint64_t now = now_ns();
	uint32_t n = slots_used(t);
	for (uint32_t i = 0; i < n; i++) {
		struct slot *s = &t->slot[i];
		uint64_t tag =
		    atomic_load_explicit(&s->tag, memory_order_acquire);
		unsigned st = tag_state(tag);
		if (st == FREE)
			continue;
		if (st != LIVE && st != CLAIMING) {
			if (!readonly)
				slot_free(t, (int)i, tag); /* garbage */
			continue;
		}
		if ((int)i != my_slot && !member_alive(t, (int)i, tag, full)) {
			if (!readonly)
				slot_free(t, (int)i, tag);
			continue;
		}
		struct pubv p;
		if (st != LIVE || !pub_read(s, &p))
			continue;
		uint64_t held = clamp(p.top_held);
		uint64_t req =
		    atomic_load_explicit(&s->request, memory_order_relaxed);
		uint64_t heap = clamp(p.heap);
		if ((int)i == my_slot && !readonly)
			summed = heap; /* the fold's reference (on_fold) */
		v->total = add_sat(v->total, heap);
		/* Memory on its way back counts as such for the deadline
		 * only: then it is memory like any other, and the next
		 * largest holder is chosen. */
		if (fresh(p.stop_since, now))
			v->stopping = add_sat(v->stopping, clamp(p.stopping));
		if (req) {
			v->requests = true;
			uint64_t rt = atomic_load_explicit(
			    &s->req_time, memory_order_relaxed);
			if ((int)i != skip && (!rt || fresh(rt, now)))
				v->stopping = add_sat(v->stopping, held);
		} else if (p.top_id && (v->best < 0 || held > v->best_held)) {
			v->best = (int)i;
			v->best_held = held;
			v->best_id = p.top_id;
		}
	}
	if (!readonly)
		sums++;
}

static bool over(const struct view *v)
{
	return v->total > add_sat(v->limit, v->stopping);
}

/* Pressure with the shared limit: once per upward crossing of the
 * fraction, heard at the next safe point (damped as the meter's). */
static void pressure_note(const struct view *v)
{
	uint64_t ppm;
	void *arg;
	if (!ml__pressure_get(&ppm, &arg) || !ppm)
		return;
	uint64_t th = (uint64_t)((unsigned __int128)v->limit * ppm / 1000000);
	th = th ? th : 1;
	if (v->total >= th) {
		if (!atomic_exchange(&shared_above, true)) {
			atomic_store(&pressure_total, v->total);
			atomic_store(&shared_pressure, true);
		}
	} else if (v->total < th - th / 32) {
		atomic_store(&shared_above, false);
	}
}

/* Clear a request `req` and then its time (unless a new request stamped
 * it meanwhile): a request whose time reads 0 was just posted. */
static void req_clear(struct slot *s, uint64_t req)
{
	uint64_t rt = atomic_load(&s->req_time);
	if (atomic_compare_exchange_strong(&s->request, &req, 0))
		atomic_compare_exchange_strong(&s->req_time, &rt, 0);
}

/* Interrupt the live global task whose identity is `id`, if it runs. */
struct trip_arg {
	uint64_t id;
	bool found, tripped;
};

static void trip_if(struct ml_task *task, void *arg)
{
	struct trip_arg *a = arg;
	if (a->found || task_id(task) != a->id)
		return;
	a->found = true;
	if (atomic_load_explicit(&task->status, memory_order_relaxed) != ML_OK)
		return;
	task->shared_trip = true;
	if (ml__task_trip(task, ML_GLOBAL_LIMIT) != ML_GLOBAL_LIMIT)
		task->shared_trip = false; /* stopped for something else */
	else
		a->tripped = true;
}

/* A stop request in our slot: interrupt the task it names if it still
 * runs and the total is still over, publish (what it holds now counts as
 * stopping) and clear the request. */
static void obey(struct table *t)
{
	struct slot *s = &t->slot[my_slot];
	uint64_t req = atomic_load_explicit(&s->request, memory_order_acquire);
	if (!req)
		return;
	struct view v;
	publish(t);
	sum(t, true, my_slot, false, &v);
	if (over(&v)) {
		struct trip_arg a = {req, false, false};
		ml__global_visit(trip_if, &a);
		if (a.tripped)
			publish(t); /* its estimate now counts as stopping */
	}
	req_clear(s, req);
}

/* The handler could not take the global list: trip now. */
static void deferred(void)
{
	uint64_t id = atomic_exchange(&wake_deferred, 0);
	if (id) {
		struct trip_arg a = {id, false, false};
		ml__global_visit(trip_if, &a);
	}
}

/* ---- Waking the target -------------------------------------------------- */

/* Send the slot's process its wake signal with the request's identity,
 * once we know it is the process that claimed the slot, in the image
 * that installed the handler: through a pidfd (opened first, so that the
 * checks and the signal reach the same process), or, on kernels before
 * 5.3, sigqueue after the same checks. */
static void wake(struct table *t, int i, uint64_t id)
{
	struct slot *s = &t->slot[i];
	uint64_t tag = atomic_load(&s->tag);
	uint64_t sig = atomic_load(&s->wake);
	pid_t pid = tag_pid(tag);
	if (tag_state(tag) != LIVE || pid <= 0 || pid > PID_LIMIT ||
	    pid == my_pid || sig == 0 || sig > (uint64_t)SIGRTMAX ||
	    sig == SIGKILL || sig == SIGSTOP)
		return;
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
#else
	int fd = -1;
	errno = ENOSYS;
#endif
	if (fd < 0 && errno != ENOSYS)
		return;
	bool known;
	if (!same_process(s, pid, &known) || !known) {
		if (fd >= 0)
			close(fd);
		return;
	}
	union sigval val = {.sival_ptr = (void *)(uintptr_t)id};
	if (fd < 0) {
		sigqueue(pid, (int)sig, val);
		return;
	}
#if defined(SYS_pidfd_open) && defined(SYS_pidfd_send_signal)
	siginfo_t si;
	memset(&si, 0, sizeof si);
	si.si_signo = (int)sig;
	si.si_code = SI_QUEUE;
	si.si_pid = my_pid;
	si.si_uid = getuid();
	si.si_value = val;
	syscall(SYS_pidfd_send_signal, fd, (int)sig, &si, 0);
#endif
	close(fd);
}

/* The wake signal's handler: a request sent by wake() (SI_QUEUE, the
 * identity of one of our live tasks) interrupts that task and calls the
 * program's callback.  Async-signal-safe: atomics, a try-lock, no table
 * access (a leave may be unmapping it). */
static void wake_handler(int sig, siginfo_t *si, void *uc)
{
	(void)sig;
	(void)uc;
	if (!si || si->si_code != SI_QUEUE || !atomic_load(&tab))
		return; /* not ours: a SIGCONT from a shell, kill(1) */
	int saved = errno;
	uint64_t id = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	struct trip_arg a = {id, false, false};
	if (!ml__global_try_visit(trip_if, &a))
		atomic_store(&wake_deferred, id); /* the next safe point */
	else if (!a.found) {
		errno = saved;
		return; /* not a task of ours (any more) */
	}
	ml_wake_fn fn = atomic_load(&wake_fn);
	if (fn)
		fn(atomic_load(&wake_arg));
	errno = saved;
}

/* Install or remove our handler so that it is on wake_sig (join_lock
 * held).  At a join with the default signal, a program's own handler on
 * it is left alone (the member is then not woken, and says so); a signal
 * named by ml_shared_set_wake is taken. */
static void wake_install(bool asked)
{
	int want = atomic_load(&wake_sig);
	if (want < 0)
		want = SIGCONT, atomic_store(&wake_sig, SIGCONT);
	if (want == wake_installed)
		return;
	if (wake_installed) {
		sigaction(wake_installed, &wake_old, NULL);
		wake_installed = 0;
	}
	if (!want)
		return;
	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = wake_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART;
	sigfillset(&sa.sa_mask);
	if (sigaction(want, NULL, &old) != 0)
		return;
	bool ours =
	    (old.sa_flags & SA_SIGINFO) && old.sa_sigaction == wake_handler;
	bool theirs =
	    !ours && ((old.sa_flags & SA_SIGINFO) ||
	              (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN));
	if (!asked && theirs) {
		ml__diag("shared budget: signal %d has a handler of the "
		         "program's: this member is not woken when asked to "
		         "stop (ml_shared_set_wake(3))",
		         want);
		return;
	}
	if (ours) {
		memset(&wake_old, 0, sizeof wake_old);
		wake_old.sa_handler = SIG_DFL;
		wake_installed = want;
	} else if (sigaction(want, &sa, &wake_old) == 0) {
		wake_installed = want;
	}
}

/* ---- A table that shrank under us (by-name budgets) ---------------------- */

static struct sigaction bus_old;
static bool bus_installed;

static void bus_handler(int sig, siginfo_t *si, void *uc)
{
	/* si_addr means something only for a fault (si_code > 0); a
	 * SIGBUS sent with kill or sigqueue carries the sender there. */
	bool fault = si && si->si_code > 0;
	char *a = fault ? (char *)si->si_addr : NULL;
	char *m = atomic_load(&map_base);
	size_t len = atomic_load(&map_len);
	if (m && a >= m && a < m + len) {
		/* Zeros in place of the table: the access retries and
		 * reads an empty table, the next hook leaves it. */
		if (ml__sys_mmap(m, len, PROT_READ | PROT_WRITE,
		                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1,
		                 0) != MAP_FAILED) {
			atomic_store(&map_lost, true);
			return;
		}
	}
	if (bus_old.sa_flags & SA_SIGINFO) {
		bus_old.sa_sigaction(sig, si, uc);
	} else if (bus_old.sa_handler != SIG_DFL &&
	           bus_old.sa_handler != SIG_IGN) {
		bus_old.sa_handler(sig);
	} else if (fault) {
		/* As without us: the fault comes back and kills. */
		signal(SIGBUS, SIG_DFL);
	} else if (bus_old.sa_handler == SIG_DFL) {
		/* Sent, not a fault: nothing comes back, so send it again
		 * to the default action (blocked in here: delivered as the
		 * handler returns). */
		signal(SIGBUS, SIG_DFL);
		raise(SIGBUS);
	} /* sent and ignored before us: ignored */
}

static void bus_install(void)
{
	if (bus_installed)
		return;
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = bus_handler;
	sa.sa_flags = SA_SIGINFO;
	sigemptyset(&sa.sa_mask);
	bus_installed = sigaction(SIGBUS, &sa, &bus_old) == 0;
}

/* ---- Choosing ------------------------------------------------------------ */

/* The total is back under the limit: the requests still pending are
 * dropped (their targets need not stop any more). */
static void drop_requests(struct table *t, const struct view *v)
{
	if (!v->requests || v->total > v->limit)
		return;
	uint32_t n = slots_used(t);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t r = atomic_load_explicit(&t->slot[i].request,
		                                  memory_order_relaxed);
		if (r)
			req_clear(&t->slot[i], r);
	}
}

/* Sum, and when over, ask the largest holder (after a full sweep); when
 * back under, drop the requests still pending. */
static void check(struct table *t, bool full)
{
	struct view v;
	sum(t, full || sums % FULL_EVERY == 0, -1, false, &v);
	if (over(&v) && !full)
		sum(t, true, -1, false, &v);
	pressure_note(&v);
	drop_requests(t, &v);
	if (!over(&v) || v.best < 0)
		return;
	uint64_t none = 0;
	struct slot *s = &t->slot[v.best];
	if (!atomic_compare_exchange_strong(&s->request, &none, v.best_id))
		return;
	atomic_store(&s->req_time, now_ns());
	if (v.best == my_slot)
		obey(t);
	else
		wake(t, v.best, v.best_id);
}

/* Our slot, claimed if need be (a fork child); a failed claim (a full
 * table) is said once and never retried. */
static bool have_slot(struct table *t)
{
	if (my_lineage == ml__lineage && slot_ours(t))
		return true;
	if (my_lineage != ml__lineage || claim_failed)
		return false; /* a fork child before its handler ran */
	if (claim(t) != ML_OK) {
		claim_failed = true;
		ml__diag("shared budget %s: no free slot of %u: this process "
		         "is not counted",
		         my_name[0] ? my_name : "(unnamed)", (unsigned)nslots);
		return false;
	}
	return true;
}

static uint64_t batch_of(struct table *t)
{
	uint64_t b =
	    atomic_load_explicit(&t->head.limit, memory_order_relaxed) / 8192;
	return b > ML__SHARED_MIN_BATCH ? b : ML__SHARED_MIN_BATCH;
}

static struct table *drop_lost(void);

/* The table as the hooks see it (pub held): NULL when none, or when it
 * was lost (shrunk, replaced: its magic gone), which leaves it. */
static struct table *table_ok(void)
{
	struct table *t = atomic_load(&tab);
	if (!t)
		return NULL;
	if (atomic_load_explicit(&map_lost, memory_order_relaxed) ||
	    atomic_load_explicit(&t->head.magic, memory_order_relaxed) != MAGIC)
		return drop_lost();
	return t;
}

/* The meter's fold hook: inside malloc, atomics, a few system calls, no
 * lock waited on. */
static void on_fold(void)
{
	if (!atomic_load_explicit(&tab, memory_order_relaxed) ||
	    !ml__spin_trylock(&pub))
		return;
	struct table *t = table_ok();
	if (t && my_lineage == ml__lineage && have_slot(t)) {
		uint64_t heap = heap_now();
		uint64_t moved = heap > summed ? heap - summed : summed - heap;
		if (atomic_load_explicit(&wake_deferred, memory_order_relaxed))
			deferred();
		if (atomic_load_explicit(&t->slot[my_slot].request,
		                         memory_order_relaxed)) {
			obey(t);
		} else if (choice_due) {
			/* No held hook since the fold that found us over
			 * (an allocation not sampled): choose now. */
			choice_due = false;
			publish(t);
			check(t, false);
		} else if (moved >= batch_of(t) || last_stopping) {
			struct view v;
			publish(t);
			sum(t, sums % FULL_EVERY == 0, -1, false, &v);
			/* Over: this fold runs inside an allocation whose
			 * block is not yet its task's; the choice waits
			 * for the held hook that records it. */
			if (over(&v)) {
				choice_due = true;
			} else {
				pressure_note(&v);
				drop_requests(t, &v);
			}
		}
	}
	ml__spin_unlock(&pub);
}

/* The held hook: a sampled block recorded or freed.  A fold runs inside
 * the allocation, before its block is recorded: a choice it deferred is
 * made here, with the block in its task's estimate (issue 35: a 250 MiB
 * body buffer crossing the limit got a 60 MiB bystander stopped).
 * Otherwise the estimates are republished once they have moved by a
 * batch, net, as the heap is (a member that goes quiet after a large
 * block would leave its old figure in the table); publication only, no
 * sum: the folds sum and choose (summing here cost pgbench -S about 6 %
 * of its transactions per second). */
static void on_held_moved(int64_t d)
{
	if (!atomic_load_explicit(&tab, memory_order_relaxed))
		return;
	int64_t m =
	    atomic_fetch_add_explicit(&held_moved, d, memory_order_relaxed) + d;
	if ((!choice_due &&
	     (m < 0 ? -(uint64_t)m : (uint64_t)m) < ML__SHARED_MIN_BATCH) ||
	    !ml__spin_trylock(&pub))
		return;
	struct table *t = table_ok();
	m = atomic_load_explicit(&held_moved, memory_order_relaxed);
	if (t && my_lineage == ml__lineage && slot_ours(t)) {
		if (atomic_load_explicit(&t->slot[my_slot].request,
		                         memory_order_relaxed)) {
			obey(t);
		} else if (choice_due) {
			choice_due = false;
			publish(t);
			check(t, false);
		} else if ((m < 0 ? -(uint64_t)m : (uint64_t)m) >=
		           batch_of(t)) {
			publish(t);
		}
	}
	ml__spin_unlock(&pub);
}

/* At every safe point (ml_check, ml_is_interrupted, the end of ml_run
 * and of a slice): a request the wake handler left, a stop request, a
 * deferred choice, stopping tasks to republish; the pressure callback
 * with the shared limit. */
static void on_safe_point(void)
{
	if (!atomic_load_explicit(&tab, memory_order_relaxed))
		return;
	/* The table is read only under `pub`: a leave unmaps it. */
	if (ml__spin_trylock(&pub)) {
		struct table *t = table_ok();
		if (atomic_load_explicit(&wake_deferred, memory_order_relaxed))
			deferred();
		if (t && have_slot(t)) {
			if (atomic_load(&t->slot[my_slot].request))
				obey(t);
			else if (last_stopping || choice_due) {
				choice_due = false;
				publish(t);
				check(t, false);
			}
		}
		ml__spin_unlock(&pub);
	}
	if (atomic_load_explicit(&shared_pressure, memory_order_relaxed) &&
	    atomic_exchange(&shared_pressure, false)) {
		uint64_t ppm;
		void *arg;
		ml_pressure_fn fn = ml__pressure_get(&ppm, &arg);
		uint64_t limit = ml__shared_limit();
		if (fn && limit)
			fn(atomic_load(&pressure_total), limit, arg);
	}
}

/* A fork child: a member with a slot of its own (claimed at its first
 * fold or safe point); the heap it inherited is its parent's. */
static void atfork_child(void)
{
	if (!atomic_load(&tab))
		return;
	my_slot = -1;
	my_pid = 0;
	know_self();
	base = ml__meter_usage();
	summed = 0;
	claim_failed = false;
	atomic_store(&held_moved, 0);
	atomic_store(&wake_deferred, 0);
	last_stopping = last_since = 0;
	choice_due = false;
	atomic_store(&shared_above, false);
	atomic_store(&shared_pressure, false);
}

__attribute__((constructor(103))) static void shared_init(void)
{
	ml__atfork(NULL, NULL, atfork_child,
	           "a forked child is not a member of its parent's shared "
	           "budget");
}

/* Wait for the publisher of the moment (short: it never blocks). */
static void pub_lock(void)
{
	ml__spin_lock(&pub);
}
static void pub_unlock(void)
{
	ml__spin_unlock(&pub);
}

/* ---- Joining and leaving ------------------------------------------------ */

/* Slots for a table made now: MEMLIMITS_SHARED_SLOTS, read once at start
 * (ml__shared_from_env), else the default. */
static uint32_t env_slots;

static bool slots_ok(uint64_t n)
{
	return n >= 1 && n <= ML__SHARED_SLOTS_MAX;
}

/* Fill a new table in: the head's magic last, so that a joiner by name
 * that sees it sees the rest. */
static void table_init(struct table *t, uint32_t n, uint64_t limit)
{
	atomic_store(&t->head.layout, LAYOUT);
	atomic_store(&t->head.nslots, n);
	atomic_store(&t->head.limit, limit);
	atomic_store(&t->head.hw, 0);
	atomic_store_explicit(&t->head.magic, MAGIC, memory_order_release);
}

static int open_table(const char *name, uint64_t limit, struct table **out,
                      uint32_t *out_n)
{
	char obj[128];
	if (!ml__shared_object_name(name, obj, sizeof obj))
		return ML_EINVAL;
	int flags = O_RDWR | O_CLOEXEC | O_NOFOLLOW | (limit ? O_CREAT : 0);
	int fd = shm_open(obj, flags, 0600);
	if (fd < 0)
		return errno == ENOMEM || errno == EMFILE || errno == ENFILE ||
		               errno == ENOSPC
		           ? ML_ENOMEM
		           : ML_EINVAL;
	struct stat st;
	int rc = ML_EINVAL;
	bool fill = false;
	uint32_t n = env_slots ? env_slots : ML__SHARED_SLOTS;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 077)) {
		errno = EACCES;
		goto out;
	}
	if (st.st_size == 0 && limit) {
		if (ftruncate(fd, (off_t)table_bytes(n)) != 0) {
			rc = ML_ENOMEM;
			goto out;
		}
		fill = true;
	} else {
		/* The slot count is the file's size; the head must agree. */
		if (st.st_size < (off_t)table_bytes(1) ||
		    (st.st_size - (off_t)sizeof(struct head)) %
		        (off_t)sizeof(struct slot))
			goto out;
		uint64_t k =
		    (uint64_t)(st.st_size - (off_t)sizeof(struct head)) /
		    sizeof(struct slot);
		if (!slots_ok(k))
			goto out;
		n = (uint32_t)k;
	}
	if (fstat(fd, &st) != 0 || st.st_size != (off_t)table_bytes(n))
		goto out; /* changed meanwhile */
	void *p = ml__sys_mmap(NULL, table_bytes(n), PROT_READ | PROT_WRITE,
	                       MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = ML_ENOMEM;
		goto out;
	}
	struct table *t = p;
	if (fill) {
		table_init(t, n, limit);
	} else if (atomic_load_explicit(&t->head.magic, memory_order_acquire) !=
	               MAGIC ||
	           atomic_load(&t->head.layout) != LAYOUT ||
	           atomic_load(&t->head.nslots) != n ||
	           atomic_load(&t->head.limit) == 0) {
		/* Not made (yet), or another layout, or not a table. */
		ml__sys_munmap(p, table_bytes(n));
		goto out;
	} else if (limit) {
		atomic_store(&t->head.limit, limit);
	}
	*out = t;
	*out_n = n;
	rc = ML_OK;
out:
	close(fd);
	return rc;
}

/* Join the table t of n slots (join_lock held): ML_OK, or ML_ENOMEM (no
 * free slot) with t unmapped. */
static int join_table(struct table *t, uint32_t n, const char *name,
                      bool by_name)
{
	if (!id_key) {
		uint64_t x = (uint64_t)(uintptr_t)&id_key ^
		             ((uint64_t)getpid() << 32) ^ (uint64_t)t ^
		             now_ns();
		id_key = ml__splitmix64(&x);
	}
	my_pid = 0;
	know_self();
	base = 0;
	nslots = n;
	claim_failed = false;
	choice_due = false;
	atomic_store(&wake_deferred, 0);
	atomic_store(&map_lost, false);
	if (by_name)
		bus_install();
	wake_install(wake_asked);
	/* The meter runs from now on, limit or not.  The choice reads the
	 * held estimates of global tasks, which need held tracking from
	 * their registration on (tasks/held.c). */
	ml__meter_keep(true);
	pub_lock();
	int rc = claim(t);
	if (rc == ML_OK) {
		strcpy(my_name, name);
		publish(t);
		atomic_store(&map_len, table_bytes(n));
		atomic_store(&map_base, (void *)t);
		atomic_store(&tab, t);
		atomic_store(&ml__meter_fold_hook, on_fold);
		atomic_store(&ml__held_moved_hook, on_held_moved);
		atomic_store(&ml__safe_point_hook, on_safe_point);
		check(t, true);
	}
	pub_unlock();
	if (rc != ML_OK) {
		ml__meter_keep(false);
		ml__sys_munmap(t, table_bytes(n));
	}
	return rc;
}

int ml__shared_join(const char *name, uint64_t limit)
{
	if (!ml__shared_name_ok(name))
		return ML_EINVAL;
	int rc;
	ml__spin_lock(&join_lock);
	struct table *t = atomic_load(&tab);
	if (t) {
		if (strcmp(name, my_name))
			rc = ML_EINVAL;
		else {
			if (limit)
				atomic_store(&t->head.limit, limit);
			rc = ML_OK;
		}
		ml__spin_unlock(&join_lock);
		return rc;
	}
	uint32_t n = 0;
	rc = open_table(name, limit, &t, &n);
	if (rc == ML_OK)
		rc = join_table(t, n, name, true);
	ml__spin_unlock(&join_lock);
	return rc;
}

int ml__shared_create(uint64_t limit, uint32_t slots)
{
	if (!limit || (slots && !slots_ok(slots)))
		return ML_EINVAL;
	uint32_t n = slots ? slots : ML__SHARED_SLOTS;
	ml__spin_lock(&join_lock);
	if (atomic_load(&tab)) {
		ml__spin_unlock(&join_lock);
		return ML_EINVAL;
	}
	/* Shared with the children forked from now on, and with nobody
	 * else: no name, no file to truncate. */
	void *p = ml__sys_mmap(NULL, table_bytes(n), PROT_READ | PROT_WRITE,
	                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int rc = ML_ENOMEM;
	if (p != MAP_FAILED) {
		table_init(p, n, limit);
		rc = join_table(p, n, "", false);
	}
	ml__spin_unlock(&join_lock);
	return rc;
}

/* Leave (pub held, t taken out of `tab` by the caller). */
static void leave_table(struct table *t)
{
	atomic_store(&ml__meter_fold_hook, NULL);
	atomic_store(&ml__held_moved_hook, NULL);
	atomic_store(&ml__safe_point_hook, NULL);
	if (!atomic_load(&map_lost) && my_lineage == ml__lineage &&
	    slot_ours(t)) {
		struct pubv v = {0};
		pub_write(&t->slot[my_slot], &v);
		slot_free(t, my_slot, my_tag);
	}
	my_slot = -1;
	my_name[0] = 0;
	atomic_store(&map_base, NULL);
	ml__sys_munmap(t, table_bytes(nslots));
}

/* The table shrank or was replaced under us (pub held): leave it, say so
 * once, carry on with our own limits. */
static struct table *drop_lost(void)
{
	struct table *t = atomic_exchange(&tab, NULL);
	if (t) {
		ml__diag("shared budget %s: its table was truncated or "
		         "overwritten; this process leaves it and keeps its "
		         "own limits",
		         my_name[0] ? my_name : "(unnamed)");
		leave_table(t);
	}
	return NULL;
}

int ml__shared_leave(void)
{
	ml__spin_lock(&join_lock);
	struct table *t = atomic_exchange(&tab, NULL);
	if (!t) {
		ml__spin_unlock(&join_lock);
		return ML_EINVAL;
	}
	pub_lock(); /* nobody is in a hook with the table now */
	leave_table(t);
	pub_unlock();
	ml__meter_keep(false);
	ml__spin_unlock(&join_lock);
	return ML_OK;
}

uint64_t ml__shared_usage(void)
{
	uint64_t total = 0;
	pub_lock();
	struct table *t = table_ok();
	if (t) {
		struct view v;
		sum(t, true, -1, true, &v);
		total = v.total;
		/* Our own heap as of now (a read, not a publication). */
		if (slot_ours(t) && my_lineage == ml__lineage) {
			struct pubv p;
			if (pub_read(&t->slot[my_slot], &p) &&
			    total >= clamp(p.heap))
				total =
				    add_sat(total - clamp(p.heap), heap_now());
		}
	}
	pub_unlock();
	return total;
}

size_t ml__shared_members(ml_shared_member *out, size_t n)
{
	size_t k = 0;
	pub_lock();
	struct table *t = table_ok();
	uint32_t used = t ? slots_used(t) : 0;
	for (uint32_t i = 0; i < used; i++) {
		struct slot *s = &t->slot[i];
		uint64_t tag = atomic_load(&s->tag);
		struct pubv p;
		if (tag_state(tag) != LIVE || !pub_read(s, &p))
			continue;
		bool self = (int)i == my_slot && slot_ours(t) &&
		            my_lineage == ml__lineage;
		if (!self && kill(tag_pid(tag), 0) != 0 && errno == ESRCH)
			continue;
		if (k < n && out) {
			ml_shared_member *m = &out[k];
			memset(m, 0, sizeof *m);
			m->pid = (int32_t)tag_pid(tag);
			m->heap = self ? heap_now() : clamp(p.heap);
			m->held = clamp(p.top_held);
			m->stopping = clamp(p.stopping);
			m->flags =
			    (self ? ML_SHARED_SELF : 0) |
			    (atomic_load(&s->request) ? ML_SHARED_ASKED : 0) |
			    (atomic_load(&s->wake) ? ML_SHARED_WAKEABLE : 0);
		}
		k++;
	}
	pub_unlock();
	return k;
}

uint64_t ml__shared_limit(void)
{
	pub_lock();
	struct table *t = table_ok();
	uint64_t limit = t ? atomic_load(&t->head.limit) : 0;
	pub_unlock();
	return limit;
}

bool ml__shared_member(void)
{
	return atomic_load(&tab) != NULL;
}

uint64_t ml__shared_overshoot(uint64_t n)
{
	if (!atomic_load_explicit(&tab, memory_order_relaxed) ||
	    !ml__spin_trylock(&pub))
		return 0; /* busy: another thread is publishing */
	struct table *t = table_ok();
	if (!t) {
		ml__spin_unlock(&pub);
		return 0;
	}
	/* Not counted (a fork child that found no free slot): what it
	 * would add cannot be seen by the others, so it is refused
	 * (--tree-heap-limit fails closed). */
	if (my_lineage == ml__lineage && !slot_ours(t) && claim_failed) {
		ml__spin_unlock(&pub);
		return n ? n : 1;
	}
	uint64_t total = 0, limit = atomic_load(&t->head.limit);
	uint32_t k = slots_used(t);
	for (uint32_t i = 0; i < k; i++) {
		uint64_t tag = atomic_load(&t->slot[i].tag);
		struct pubv p;
		if (tag_state(tag) == LIVE && (int)i != my_slot &&
		    pub_read(&t->slot[i], &p))
			total = add_sat(total, clamp(p.heap));
	}
	ml__spin_unlock(&pub);
	total = add_sat(add_sat(total, heap_now()), n);
	return total > limit ? total - limit : 0;
}

int ml__shared_set_wake(int signo, ml_wake_fn fn, void *arg)
{
	if (signo < -1 || signo > SIGRTMAX || signo == SIGKILL ||
	    signo == SIGSTOP || signo == SIGSEGV || signo == SIGBUS ||
	    signo == SIGILL || signo == SIGFPE || signo == SIGABRT ||
	    signo == SIGTRAP || signo == SIGSYS)
		return ML_EINVAL;
	ml__spin_lock(&join_lock);
	atomic_store(&wake_arg, arg);
	atomic_store(&wake_fn, fn);
	if (signo >= 0) {
		wake_asked = true;
		atomic_store(&wake_sig, signo);
		if (atomic_load(&tab))
			wake_install(true);
	}
	/* Our slot says whether we can be woken, and by what. */
	pub_lock();
	struct table *t = atomic_load(&tab);
	if (t && slot_ours(t))
		atomic_store(&t->slot[my_slot].wake, (uint64_t)wake_now());
	pub_unlock();
	ml__spin_unlock(&join_lock);
	return ML_OK;
}

void ml__shared_from_env(void)
{
	uint64_t slots;
	const char *sl = ml__getenv("MEMLIMITS_SHARED_SLOTS");
	if (sl && *sl) {
		if (ml__parse_u64(sl, &slots) == 0 && slots_ok(slots))
			env_slots = (uint32_t)slots;
		else
			ml__diag("ignoring MEMLIMITS_SHARED_SLOTS: 1 to %u "
			         "expected",
			         (unsigned)ML__SHARED_SLOTS_MAX);
	}
	const char *v = ml__getenv("MEMLIMITS_SHARED");
	if (!v || !*v)
		return;
	char name[ML__SHARED_NAME_MAX + 1];
	const char *colon = strchr(v, ':');
	size_t n = colon ? (size_t)(colon - v) : strlen(v);
	uint64_t limit = 0;
	if (n > ML__SHARED_NAME_MAX ||
	    (colon && (ml__parse_size(colon + 1, &limit) != 0 || !limit))) {
		ml__diag("ignoring MEMLIMITS_SHARED: NAME[:SIZE] expected");
		return;
	}
	memcpy(name, v, n);
	name[n] = 0;
	/* Run mode's tree budget (memlimits run --tree-heap-limit):
	 * MEMLIMITS_SHARED_TREE is the pid of the program run started.  Only
	 * that process makes the table (run made the object, empty, and
	 * removes it when the program ends); its descendants join the
	 * table in force and never make one. */
	const char *tree = ml__getenv("MEMLIMITS_SHARED_TREE");
	uint64_t first;
	bool in_tree = tree && ml__parse_u64(tree, &first) == 0;
	if (in_tree && first != (uint64_t)getpid())
		limit = 0;
	int rc = ml__shared_join(name, limit);
	if (rc == ML_OK)
		return;
	if (in_tree) {
		/* Fails closed: a process the tree cannot count does not
		 * run (it would run without the tree's limit). */
		ml__diag("MEMLIMITS_SHARED=%s: cannot join the run's tree "
		         "budget (%s): this process does not start",
		         v,
		         rc == ML_ENOMEM ? "no free slot, or no memory"
		                         : "the run has ended, or the budget "
		                           "is not this user's");
		_exit(127);
	}
	ml__diag("MEMLIMITS_SHARED=%s: not joined (%s)", v,
	         rc == ML_ENOMEM ? "no memory, or no free slot"
	                         : "bad name, no such budget, or not "
	                           "this user's");
}

/* ---- The public functions ---------------------------------------------- */

ML_EXPORT int ml_shared_join(const char *name, uint64_t limit)
{
	return ml__shared_join(name, limit);
}

ML_EXPORT int ml_shared_leave(void)
{
	return ml__shared_leave();
}

ML_EXPORT uint64_t ml_shared_usage(void)
{
	return ml__shared_usage();
}

ML_EXPORT uint64_t ml_shared_limit(void)
{
	return ml__shared_limit();
}

ML_EXPORT int ml_shared_create(uint64_t limit, uint32_t slots)
{
	return ml__shared_create(limit, slots);
}

ML_EXPORT int ml_shared_set_wake(int signo, ml_wake_fn fn, void *arg)
{
	return ml__shared_set_wake(signo, fn, arg);
}

ML_EXPORT size_t ml_shared_members(ml_shared_member *out, size_t n)
{
	return ml__shared_members(out, n);
}
