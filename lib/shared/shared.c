/* Budgets shared by the processes of a server (issue 27; docs/statistics.md,
 * "Shared budgets"; ml_shared_join(3)).
 *
 * One POSIX shared-memory object per budget and user, "/memlimits.UID.NAME"
 * (/dev/shm), mode 0600, opened with O_NOFOLLOW and refused unless this
 * user owns it (root included).  It is mapped at the join and the
 * descriptor closed at once: a server's master that joins before it forks
 * hands the mapping to its workers, which never reopen it.
 *
 * The table: a 64-byte head (magic, limit, a high-water mark of slots
 * used) and ML__SHARED_SLOTS slots of 64 bytes, one per member process.
 * A slot's `tag` packs pid << 32 | generation << 2 | state; it is claimed
 * and freed by CAS only (FREE -> CLAIMING -> LIVE -> FREE), so that a
 * member killed at any instruction leaves no lock held: at worst a slot
 * in CLAIMING with its pid, freed once that pid is gone.
 *
 * Publication, from the meter's fold hook (alloc/meter.c: every 32 KiB a
 * thread allocates or frees), atomics only: when this process's heap
 * (ml__meter_usage, less what it inherited at a fork) has moved by the
 * batch since the last sum read it, or a stop request or stopping task
 * waits, the member stores its heap, its largest eligible global task's
 * held estimate and identity, and what its tasks interrupted for a limit
 * still hold (`stopping`), then sums the table.  Dead members are swept
 * then (kill(pid, 0) == ESRCH; every 16th sum, and always before a
 * choice and in ml_shared_usage, also /proc/PID/stat: a zombie, or a start
 * time that differs, is a dead member whose pid was reused).
 *
 * The choice: when the total exceeds the limit plus what stopped tasks
 * still hold plus what the tasks already asked to stop hold, the member
 * that saw it posts a stop request (CAS 0 -> the task's identity) in the
 * slot whose largest task holds the most among slots with no request
 * pending.  The target obeys at its next fold or safe point, only if the
 * request names its own largest eligible task and its own view of the
 * total is still over; then it interrupts the task (ML_GLOBAL_LIMIT,
 * shared_trip), publishes, and clears the request.  Nothing read from the
 * table is trusted: indices are bounded, no pointer is followed, values
 * are clamped, sums saturate; garbage can make a member count wrong,
 * never crash or refuse an allocation. */
#define _GNU_SOURCE
#include "shared/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC 0x6d6c736861726501ull /* "mlshare", layout 1 */
#define PID_LIMIT 4194304           /* PID_MAX_LIMIT on 64-bit Linux */
#define HEAP_CLAMP ((uint64_t)1 << 50)
#define FULL_EVERY 16

enum { FREE = 0, CLAIMING = 1, LIVE = 2 };

struct head {
	_Atomic uint64_t magic;
	_Atomic uint64_t limit;
	_Atomic uint32_t hw; /* slots [0, hw) may be in use */
	uint32_t nslots;     /* ML__SHARED_SLOTS, for tools */
	char pad[40];
};

struct slot {
	_Atomic uint64_t tag;      /* pid << 32 | gen << 2 | state      */
	_Atomic uint64_t start;    /* the pid's start time (clock ticks) */
	_Atomic uint64_t heap;     /* published heap, bytes              */
	_Atomic uint64_t top_held; /* largest eligible task's estimate   */
	_Atomic uint64_t top_id;   /* its identity, 0: none              */
	_Atomic uint64_t stopping; /* held by its tasks already stopped  */
	_Atomic uint64_t request;  /* a stop request: a top_id, 0: none  */
	_Atomic uint64_t seq;      /* publications                       */
};

struct table {
	struct head head;
	struct slot slot[ML__SHARED_SLOTS];
};

_Static_assert(sizeof(struct head) == 64, "head is one cache line");
_Static_assert(sizeof(struct slot) == 64, "a slot is one cache line");

#define TABLE_BYTES (sizeof(struct table))

/* Process-local state.  tab is set last at a join and cleared first at a
 * leave; the hooks use it only while holding `pub` (a try-lock: a thread
 * that finds it taken skips, nobody waits on the allocation path). */
static struct table *_Atomic tab;
static int my_slot = -1;    /* -1: none yet (a fork child claims lazily) */
static uint64_t my_tag;     /* the tag our slot has while it is ours */
static uint64_t my_start;   /* our start time */
static pid_t my_pid;        /* getpid() of this lineage */
static uint32_t my_lineage; /* ml__lineage when the above were set */
static uint64_t base;       /* heap inherited at a fork: not ours */
static uint64_t summed;     /* our heap as the last sum read it */
static uint64_t last_stopping;
/* The held estimates' net movement since we last published
 * (on_held_moved): blocks recorded less blocks freed, sampled weights. */
static _Atomic int64_t held_moved;
static uint64_t id_key; /* task identities: pointer ^ key */
static uint32_t sums;   /* sums done (every FULL_EVERY-th is full) */
static bool claim_failed;
static char my_name[ML__SHARED_NAME_MAX + 1];
/* Pressure with the shared limit (ml_set_pressure_callback). */
static _Atomic bool shared_above, shared_pressure;
static _Atomic uint64_t pressure_total;

/* join_lock first, then pub (both before the global list's lock). */
ML__LOCK(static, join_lock, ML__RANK_UNWIND)
ML__LOCK(static, pub, ML__RANK_UNWIND)

/* ---- Processes --------------------------------------------------------- */

/* A process's start time and whether it is a zombie, from
 * /proc/PID/stat (field 22; fields counted after the last ')').
 * 1: read; 0: no such process; -1: cannot tell.  No stdio, no malloc. */
static int proc_stat(pid_t pid, uint64_t *start)
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
	for (int field = 3; field < 22; field++) {
		p = strchr(p, ' ');
		if (!p)
			return -1;
		p++;
	}
	uint64_t v = 0;
	for (; *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (uint64_t)(*p - '0');
	*start = v;
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

/* Is the member of slot i, whose tag is `tag`, alive?  `full`: also check
 * its start time and zombie state in /proc. */
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
	if (!full)
		return true;
	uint64_t start = 0;
	int r = proc_stat(pid, &start);
	if (r == 0)
		return false;
	if (r < 0 || tag_state(tag) != LIVE)
		return true; /* cannot tell; a claim writes start late */
	return start ==
	       atomic_load_explicit(&t->slot[i].start, memory_order_relaxed);
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
	return hw < ML__SHARED_SLOTS ? hw : ML__SHARED_SLOTS;
}

static void raise_hw(struct table *t, uint32_t n)
{
	uint32_t hw = atomic_load(&t->head.hw);
	while ((hw < n || hw > ML__SHARED_SLOTS) &&
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
	return proc_stat(my_pid, &my_start) == 1;
}

/* Claim a free slot: ML_OK or ML_ENOMEM (none free). */
static int claim(struct table *t)
{
	if (!know_self())
		my_start = 0;
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < ML__SHARED_SLOTS; i++) {
			struct slot *s = &t->slot[i];
			uint64_t tag = atomic_load(&s->tag);
			if (tag_state(tag) != FREE) {
				/* The second pass sweeps the dead. */
				if (pass && !member_alive(t, i, tag, true))
					slot_free(t, i, tag);
				tag = atomic_load(&s->tag);
				if (tag_state(tag) != FREE)
					continue;
			}
			uint64_t mine = tag_make(my_pid, tag, CLAIMING);
			if (!atomic_compare_exchange_strong(&s->tag, &tag,
			                                    mine))
				continue;
			atomic_store(&s->start, my_start);
			atomic_store(&s->heap, 0);
			atomic_store(&s->top_held, 0);
			atomic_store(&s->top_id, 0);
			atomic_store(&s->stopping, 0);
			atomic_store(&s->request, 0);
			atomic_store(&s->seq, 0);
			my_tag = (mine & ~(uint64_t)3) | LIVE;
			atomic_store(&s->tag, my_tag);
			my_slot = i;
			summed = 0;
			raise_hw(t, (uint32_t)i + 1);
			return ML_OK;
		}
	}
	return ML_ENOMEM;
}

/* Our slot is still ours (nobody swept or overwrote it). */
static bool slot_ours(struct table *t)
{
	return my_slot >= 0 && my_slot < ML__SHARED_SLOTS &&
	       atomic_load_explicit(&t->slot[my_slot].tag,
	                            memory_order_relaxed) == my_tag;
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
	uint64_t heap = heap_now();
	atomic_store_explicit(&s->heap, heap, memory_order_relaxed);
	atomic_store_explicit(&s->top_held, top.best ? top.held : 0,
	                      memory_order_relaxed);
	atomic_store_explicit(&s->top_id, task_id(top.best),
	                      memory_order_relaxed);
	atomic_store_explicit(&s->stopping, top.stopping, memory_order_relaxed);
	atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
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
};

static void sum(struct table *t, bool full, int skip, struct view *v)
{
	memset(v, 0, sizeof *v);
	v->best = -1;
	v->limit = atomic_load_explicit(&t->head.limit, memory_order_relaxed);
	uint32_t n = slots_used(t);
	for (uint32_t i = 0; i < n; i++) {
		struct slot *s = &t->slot[i];
		uint64_t tag =
		    atomic_load_explicit(&s->tag, memory_order_acquire);
		unsigned st = tag_state(tag);
		if (st == FREE)
			continue;
		if (st != LIVE && st != CLAIMING) {
			slot_free(t, (int)i, tag); /* garbage */
			continue;
		}
		if ((int)i != my_slot && !member_alive(t, (int)i, tag, full)) {
			slot_free(t, (int)i, tag);
			continue;
		}
		if (st != LIVE)
			continue;
		uint64_t held = clamp(
		    atomic_load_explicit(&s->top_held, memory_order_relaxed));
		uint64_t id =
		    atomic_load_explicit(&s->top_id, memory_order_relaxed);
		uint64_t req =
		    atomic_load_explicit(&s->request, memory_order_relaxed);
		uint64_t heap =
		    clamp(atomic_load_explicit(&s->heap, memory_order_relaxed));
		if ((int)i == my_slot)
			summed = heap; /* the fold's reference (on_fold) */
		v->total = add_sat(v->total, heap);
		v->stopping = add_sat(v->stopping,
		                      clamp(atomic_load_explicit(
		                          &s->stopping, memory_order_relaxed)));
		if (req && (int)i != skip)
			v->stopping = add_sat(v->stopping, held);
		if (!req && id && (v->best < 0 || held > v->best_held)) {
			v->best = (int)i;
			v->best_held = held;
			v->best_id = id;
		}
	}
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

/* A stop request in our slot: obey it if it names our largest eligible
 * task and our view of the total is over. */
struct trip_arg {
	uint64_t id;
	bool done;
};

static void trip_if(struct ml_task *task, void *arg)
{
	struct trip_arg *a = arg;
	if (a->done || task_id(task) != a->id)
		return;
	task->shared_trip = true;
	if (ml__task_trip(task, ML_GLOBAL_LIMIT) != ML_GLOBAL_LIMIT)
		task->shared_trip = false; /* stopped for something else */
	a->done = true;
}

static void obey(struct table *t)
{
	struct slot *s = &t->slot[my_slot];
	uint64_t req = atomic_load_explicit(&s->request, memory_order_acquire);
	if (!req)
		return;
	struct top top = {0};
	ml__global_visit(find_top, &top);
	struct view v;
	publish(t);
	sum(t, true, my_slot, &v);
	if (top.best && task_id(top.best) == req && over(&v)) {
		struct trip_arg a = {req, false};
		ml__global_visit(trip_if, &a);
		publish(t); /* its estimate now counts as stopping */
	}
	atomic_compare_exchange_strong(&s->request, &req, 0);
}

/* Sum, and when over, ask the largest holder (after a full sweep). */
static void check(struct table *t, bool full)
{
	struct view v;
	sum(t, full || sums % FULL_EVERY == 0, -1, &v);
	if (over(&v) && !full)
		sum(t, true, -1, &v);
	pressure_note(&v);
	if (!over(&v) || v.best < 0)
		return;
	uint64_t none = 0;
	struct slot *s = &t->slot[v.best];
	if (atomic_compare_exchange_strong(&s->request, &none, v.best_id) &&
	    v.best == my_slot)
		obey(t);
}

/* Our slot, claimed if need be (a fork child, a slot swept by someone
 * who thought us dead). */
static bool have_slot(struct table *t)
{
	if (my_lineage == ml__lineage && slot_ours(t))
		return true;
	if (my_lineage != ml__lineage)
		return false; /* a fork child before its handler ran */
	if (claim(t) != ML_OK) {
		claim_failed = true;
		return false;
	}
	claim_failed = false;
	return true;
}

static uint64_t batch_of(struct table *t)
{
	uint64_t b =
	    atomic_load_explicit(&t->head.limit, memory_order_relaxed) /
	    (8 * ML__SHARED_SLOTS);
	return b > ML__SHARED_MIN_BATCH ? b : ML__SHARED_MIN_BATCH;
}

/* The meter's fold hook: inside malloc, atomics, a few system calls, no
 * lock waited on. */
static void on_fold(void)
{
	if (!atomic_load_explicit(&tab, memory_order_relaxed) ||
	    !ml__spin_trylock(&pub))
		return;
	struct table *t = atomic_load(&tab);
	if (t && my_lineage == ml__lineage) {
		uint64_t heap = heap_now();
		uint64_t moved = heap > summed ? heap - summed : summed - heap;
		/* A fork child claims its slot at its first fold; after a
		 * failed claim (a full table), once per batch. */
		bool mine = slot_ours(t);
		if (!mine && (!claim_failed || moved >= batch_of(t)))
			mine = have_slot(t);
		if (mine) {
			if (atomic_load_explicit(&t->slot[my_slot].request,
			                         memory_order_relaxed))
				obey(t);
			else if (moved >= batch_of(t) || last_stopping) {
				publish(t);
				check(t, false);
			}
		}
	}
	ml__spin_unlock(&pub);
}

/* The held hook: a sampled block recorded or freed.  A fold runs inside
 * the allocation, before its block is recorded: what it published was
 * our largest task's estimate without that block, and a member that then
 * goes quiet (a worker waiting for the rest of a request body) would
 * leave it so, so that a chooser elsewhere sees every task at its old
 * figure and asks the wrong one.  So the estimates are republished once
 * they have moved by a batch, net, as the heap is.  Publication only: the
 * total moves with the heap, whose folds sum and choose (a sum reads
 * every slot and probes the members: a server's backends recording and
 * freeing their statements' blocks would pay for it at every batch of
 * sampled weight, about 6 % of pgbench -S's transactions per second). */
static void on_held_moved(int64_t d)
{
	if (!atomic_load_explicit(&tab, memory_order_relaxed))
		return;
	int64_t m =
	    atomic_fetch_add_explicit(&held_moved, d, memory_order_relaxed) + d;
	if ((m < 0 ? -(uint64_t)m : (uint64_t)m) < ML__SHARED_MIN_BATCH ||
	    !ml__spin_trylock(&pub))
		return;
	struct table *t = atomic_load(&tab);
	m = atomic_load_explicit(&held_moved, memory_order_relaxed);
	if (t && my_lineage == ml__lineage && slot_ours(t) &&
	    (m < 0 ? -(uint64_t)m : (uint64_t)m) >= batch_of(t)) {
		if (atomic_load_explicit(&t->slot[my_slot].request,
		                         memory_order_relaxed)) {
			obey(t);
		} else {
			/* No sum: the fold that moves the heap a batch from
			 * what the last sum read still sums and chooses. */
			publish(t);
		}
	}
	ml__spin_unlock(&pub);
}

/* At every safe point (ml_check, ml_is_interrupted, the end of ml_run
 * and of a slice): a stop request, or stopping tasks to republish; the
 * pressure callback with the shared limit. */
static void on_safe_point(void)
{
	if (!atomic_load_explicit(&tab, memory_order_relaxed))
		return;
	/* The table is read only under `pub`: a leave unmaps it. */
	if (ml__spin_trylock(&pub)) {
		struct table *t = atomic_load(&tab);
		if (t && (slot_ours(t) || !claim_failed) && have_slot(t)) {
			if (atomic_load(&t->slot[my_slot].request))
				obey(t);
			else if (last_stopping) {
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
	atomic_store(&held_moved, 0);
	last_stopping = 0;
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

static int open_table(const char *name, uint64_t limit, struct table **out)
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
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & 077)) {
		errno = EACCES;
		goto out;
	}
	if (st.st_size == 0 && limit && ftruncate(fd, TABLE_BYTES) != 0) {
		rc = ML_ENOMEM;
		goto out;
	}
	if (fstat(fd, &st) != 0 || st.st_size != (off_t)TABLE_BYTES)
		goto out; /* another layout, or not made yet */
	void *p = ml__sys_mmap(NULL, TABLE_BYTES, PROT_READ | PROT_WRITE,
	                       MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		rc = ML_ENOMEM;
		goto out;
	}
	struct table *t = p;
	if (limit) {
		uint64_t m = atomic_load(&t->head.magic);
		if (m != MAGIC)
			atomic_compare_exchange_strong(&t->head.magic, &m,
			                               MAGIC);
		atomic_store(&t->head.magic, MAGIC);
		t->head.nslots = ML__SHARED_SLOTS;
		atomic_store(&t->head.limit, limit);
	} else if (atomic_load(&t->head.magic) != MAGIC ||
	           atomic_load(&t->head.limit) == 0) {
		ml__sys_munmap(p, TABLE_BYTES);
		goto out; /* not made (yet) */
	}
	*out = t;
	rc = ML_OK;
out:
	close(fd);
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
	rc = open_table(name, limit, &t);
	if (rc != ML_OK) {
		ml__spin_unlock(&join_lock);
		return rc;
	}
	if (!id_key) {
		uint64_t x = (uint64_t)(uintptr_t)&id_key ^
		             ((uint64_t)getpid() << 32) ^ (uint64_t)t;
		id_key = ml__splitmix64(&x);
	}
	my_pid = 0;
	know_self();
	base = 0;
	/* The meter runs from now on, limit or not.  The choice reads the
	 * held estimates of global tasks, which need held tracking from
	 * their registration on (tasks/held.c). */
	ml__meter_keep(true);
	pub_lock();
	rc = claim(t);
	if (rc == ML_OK) {
		strcpy(my_name, name);
		publish(t);
		atomic_store(&tab, t);
		atomic_store(&ml__meter_fold_hook, on_fold);
		atomic_store(&ml__held_moved_hook, on_held_moved);
		atomic_store(&ml__safe_point_hook, on_safe_point);
		check(t, true);
	}
	pub_unlock();
	if (rc != ML_OK) {
		ml__meter_keep(false);
		ml__sys_munmap(t, TABLE_BYTES);
	}
	ml__spin_unlock(&join_lock);
	return rc;
}

int ml__shared_leave(void)
{
	ml__spin_lock(&join_lock);
	struct table *t = atomic_load(&tab);
	if (!t) {
		ml__spin_unlock(&join_lock);
		return ML_EINVAL;
	}
	atomic_store(&ml__meter_fold_hook, NULL);
	atomic_store(&ml__held_moved_hook, NULL);
	atomic_store(&ml__safe_point_hook, NULL);
	atomic_store(&tab, NULL);
	pub_lock(); /* nobody is in a hook with the table now */
	if (my_lineage == ml__lineage && slot_ours(t)) {
		atomic_store(&t->slot[my_slot].heap, 0);
		slot_free(t, my_slot, my_tag);
	}
	my_slot = -1;
	my_name[0] = 0;
	pub_unlock();
	ml__sys_munmap(t, TABLE_BYTES);
	ml__meter_keep(false);
	ml__spin_unlock(&join_lock);
	return ML_OK;
}

uint64_t ml__shared_usage(void)
{
	uint64_t total = 0;
	pub_lock();
	struct table *t = atomic_load(&tab);
	if (t && have_slot(t)) {
		publish(t);
		check(t, true);
		struct view v;
		sum(t, true, -1, &v);
		total = v.total;
	}
	pub_unlock();
	return total;
}

uint64_t ml__shared_limit(void)
{
	pub_lock();
	struct table *t = atomic_load(&tab);
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
	struct table *t = atomic_load(&tab);
	if (!t) {
		ml__spin_unlock(&pub);
		return 0;
	}
	uint64_t total = 0, limit = atomic_load(&t->head.limit);
	uint32_t k = slots_used(t);
	for (uint32_t i = 0; i < k; i++) {
		uint64_t tag = atomic_load(&t->slot[i].tag);
		if (tag_state(tag) == LIVE && (int)i != my_slot)
			total = add_sat(total,
			                clamp(atomic_load(&t->slot[i].heap)));
	}
	ml__spin_unlock(&pub);
	total = add_sat(add_sat(total, heap_now()), n);
	return total > limit ? total - limit : 0;
}

void ml__shared_from_env(void)
{
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
	 * table in force and never make one, so that one starting after
	 * the removal leaves no object behind (it runs without the tree
	 * limit, and says so). */
	const char *tree = ml__getenv("MEMLIMITS_SHARED_TREE");
	uint64_t first;
	if (tree && ml__parse_u64(tree, &first) == 0 &&
	    first != (uint64_t)getpid())
		limit = 0;
	int rc = ml__shared_join(name, limit);
	if (rc != ML_OK)
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
