/* Run mode's engine: one root task per thread, the process-wide budget,
 * and what happens when a limit is reached.  It sees the core only through
 * the hook table it installs (tasks/tasks.h, struct ml__hooks): a sample
 * taken, an allocation refused or failed, a thread started or ended, a
 * fork.  Root tasks come from our pool and sit at the bottom of each
 * thread's task stack; their samples add up in one process-wide count
 * (struct ml__run), in batches, so that a sample writes only the thread's
 * own record (issue 17). */
#define _GNU_SOURCE
#include "run/run.h"

#include <string.h>
#include <unistd.h>

/* A thread's run-mode record: its root task and its one slice, at the
 * bottom of the thread's stack for the thread's whole life, and what the
 * thread counts on its own. */
struct root {
	struct ml__slice slice;
	struct ml_task task;
	struct ml__run_counts counts; /* counts.c */
	/* This thread's sample tripped the allocation limit; cleared at
	 * the next sample: an unsample before it is that allocation's. */
	bool tripped_here;
};
ML__POOL(static, root_pool, (sizeof(struct root) + 63) & ~(size_t)63)

/* The whole process's held account: every root task charges it, so that
 * a block freed by another thread than its allocator's leaves it too.
 * Never runs; only its account is used. */
static struct ml_task process;
static bool held_tracked; /* run mode keeps held memory (run_start) */
#define HELD_BATCH_MAX (4u << 20)

static uint64_t run_held_now(void)
{
	return held_tracked ? ml__held_bytes(&process) : ML_NO_LIMIT;
}

static struct root *root_of(const struct ml__thread *t)
{
	return t->hook_local[ML__RUN_ROOT];
}

static void thread_start(struct ml__thread *t)
{
	if (ml__run.stats)
		ml__force_slow(t); /* every allocation is counted */
	if (!ml__run.profiling || root_of(t))
		return;
	struct root *root = ml__pool_get(&root_pool);
	if (!root) {
		ml__diag("no memory for a thread's root task: this thread "
		         "runs without limits");
		return;
	}
	memset(root, 0, sizeof *root);
	root->task.magic = ML__TASK_FRAME;
	root->task.internal = true; /* not the program's: ml_task_current */
	root->task.k = UINT64_MAX;  /* the process-wide count decides */
	root->task.held_limit = ML_NO_LIMIT;
	root->task.interval = atomic_load(&ml__interval);
	root->task.delivery = ML_DELIVER_FAIL;
	atomic_init(&root->task.status, ML_OK);
	atomic_init(&root->task.refs, 1);
	root->slice.task = &root->task;
	root->slice.seen = ML_OK;
	if (held_tracked && !ml__held_share(&root->task, &process))
		ml__diag("no memory for the held account: this thread's "
		         "blocks are not counted as held");
	/* At the bottom of the stack: below any task already running. */
	ml__tasks_push_bottom(t, &root->slice);
	t->hook_local[ML__RUN_ROOT] = root;
	ml__counts_start(&root->counts);
}

static void thread_exit(struct ml__thread *t)
{
	struct root *root = root_of(t);
	if (root) {
		/* The core has emptied the task stack already. */
		t->hook_local[ML__RUN_ROOT] = NULL;
		ml__counts_end(&root->counts);
		ml__held_task_end(&root->task);
		ml__pool_put(&root_pool, root);
	}
	if (t->hook_local[ML__RUN_STATS])
		ml__stats_thread_exit(t);
}

/* fire()'s name for the tree heap limit: ML_GLOBAL_LIMIT, with
 * ml__run.tree_fired. */
#define ML__TREE_LIMIT (-1)

/* True for the first limit reached in the process. */
static bool fire(int why_or_tree, uint64_t n, uint64_t s, uint64_t total)
{
	bool tree = why_or_tree == ML__TREE_LIMIT;
	ml_status why = tree ? ML_GLOBAL_LIMIT : (ml_status)why_or_tree;
	int expect = ML_OK;
	bool first =
	    atomic_compare_exchange_strong(&ml__run.fired, &expect, why);
	if (first) {
		/* The report's first part now: a process that aborts at its
		 * refusal (Rust, V8), _exits (the JVM) or is killed leaves no
		 * report at exit (issue 41).  Claimed before anything else,
		 * so that the refusals of other threads wait for it. */
		bool part = ml__report_claim();
		if (tree)
			atomic_store(&ml__run.tree_fired, true);
		ml__diag_keep(); /* the report on stderr is due */
		ml__profile_trip(why, n, s, total);
		if (part)
			ml__report_at_limit();
	} else {
		ml__report_wait();
	}
	if (ml__run.timeline_path)
		ml__timeline_event(why);
	if (ml__run.on_limit == ML__ON_LIMIT_ABORT) {
		if (ml__run.timeline_path)
			ml__timeline_exit();
		ml__report_write();
		if (ml__run.stats)
			ml__stats_write();
		_exit(3);
	}
	return first;
}

/* A block refused for the heap, tree or held limit: from now on every
 * allocation that would grow the heap is checked (on_recheck), not only
 * those that carry a sample, until the heap is back under the limits.  A
 * program that retries a refused malloc (Lua after its emergency
 * collection, Ruby after a GC) got its retry, which carries no sample
 * with probability e^(-n/S), and went on growing: 164 MiB under
 * --heap-limit 100MiB, where prlimit --data held it at 75. */
static unsigned refuse_block(void)
{
	if (!atomic_load_explicit(&ml__refusing, memory_order_relaxed))
		atomic_store(&ml__refusing, true);
	return ML__HOOK_REFUSE;
}

/* Is n more bytes (a mapping: map) over the heap limit?  Counted bytes
 * are committed bytes: a runtime that commits ahead of use (the JVM's
 * heap expansions, hundreds of MiB of which it never touches) looks over
 * the limit long before it is, and one whose allocator keeps freed
 * memory (glibc's arenas: git's threads) or that holds memory no count
 * sees (V8's) is over before it looks it.  So within L/4 of the limit by
 * the count, what the process really holds decides: its blocks as
 * counted (a block is used once asked for, as RLIMIT_DATA and the heap
 * limit have always taken it) or, if more, its resident private memory
 * (anonymous pages, as a memory cgroup sees them: mappings as touched).
 * A block is refused if that plus its size is over L; a mapping if that
 * is over L less the headroom (it is not resident until touched), or if
 * it alone is larger than L.  What a granted mapping then touches is
 * read again at the next allocation near the limit.  /proc/self/statm
 * (raw system calls, util/memtotal.c) is read only there; where it
 * cannot be read the count decides.  api/mmap.c's floor asks the same
 * (held_really). */
static bool heap_over(const struct ml__thread *t, uint64_t n, bool map)
{
	uint64_t l = ml__run.heap_limit, room = map ? ml__run.heap_room : 0;
	if (!ml__over_global(n + room + l / 4))
		return false; /* far from it: no read */
	/* A realloc's old block goes when the new one comes (as the
	 * count's check: tasks/global.c), resident or not. */
	uint64_t r = ml__held_really(map ? 0 : t->resize_old);
	if (r == UINT64_MAX)
		return ml__over_global(n + room);
	if (map)
		return n > l || r > l - room;
	return r > l || n > l - r;
}

static unsigned on_sample(struct ml__thread *t, uint64_t s, uint64_t n)
{
	struct root *root = root_of(t);
	if (!root)
		return 0;
	root->tripped_here = false;
	/* Still counted after the trip, as the profile counts it: the
	 * report's totals agree. */
	uint64_t total = ml__counts_sample(
	    &root->counts, t->stack, s * (uint64_t)t->sampler.interval, s);
	/* With a profile: what is held at the peak (report.c's rule). */
	if (held_tracked && ml__run.profile_path)
		ml__profile_peak(ml__held_bytes(&process));
	if (atomic_load(&root->task.status) != ML_OK)
		return 0;
	if (ml__run.alloc_limit != ML_NO_LIMIT && total >= ml__run.k) {
		root->tripped_here = fire(ML_ALLOC_LIMIT, n, s, total);
		/* Sticky: the budget is spent. */
		atomic_store(&root->task.status, ML_ALLOC_LIMIT);
		return ML__HOOK_TRIPPED;
	}
	/* A mapping is refused a headroom (L/6, at most 64 MiB: settings.c)
	 * before the limit, a block at it: the runtimes that map their heaps
	 * (V8, the JVM, CPython, cc1, Ruby) see their mapping fail first and
	 * end their own way, with room left for the mallocs of their
	 * bookkeeping, which some never check (V8's collector: a segfault).
	 * docs/mapped.md. */
	bool map = t->mapping;
	if (ml__run.heap_limit != ML_NO_LIMIT && !ml__run.heap_blind &&
	    heap_over(t, n, map)) {
		/* From now on every mapping past the same point is refused,
		 * sampled or not (api/mmap.c): a retry after a garbage
		 * collection must not get through by missing a sample. */
		if (map)
			atomic_store(&ml__map_floor,
			             ml__run.heap_limit - ml__run.heap_room);
		fire(ML_GLOBAL_LIMIT, n, s, 0);
		return map ? ML__HOOK_REFUSE : refuse_block();
	}
	/* --tree-heap-limit: the one shared budget that refuses (its
	 * processes have no tasks to stop): the allocation that would take
	 * the members' total over.  Atomics only (shared/shared.c). */
	if (ml__run.tree &&
	    ml__shared_overshoot(n + (map ? ml__run.tree_room : 0))) {
		fire(ML__TREE_LIMIT, n, s, 0);
		return map ? ML__HOOK_REFUSE : refuse_block();
	}
	/* As the core checks a task's held limit (tasks/credit.c), but not
	 * sticky: the program may free and go on. */
	if (ml__run.held_limit != ML_NO_LIMIT &&
	    ml__held_after(t, &process, s * (uint64_t)t->sampler.interval) >=
	        ml__run.held_limit) {
		fire(ML_HELD_LIMIT, n, s, 0);
		return map ? ML__HOOK_REFUSE : refuse_block();
	}
	return 0;
}

static uint64_t plus(uint64_t a, uint64_t b)
{
	return a + b < a ? UINT64_MAX : a + b;
}

/* How far under a limit of `limit` bytes the heap must be for the checks
 * of every allocation to end: 32 intervals (at most limit/8), so that the
 * heap then grows past the limit again only through 32 intervals of
 * allocations with no sample (probability e^-32) before a sample refuses
 * one and the checks start again.  A heap that hovers within it of the
 * limit has every allocation checked. */
static uint64_t margin(uint64_t limit)
{
	uint64_t m =
	    32 * atomic_load_explicit(&ml__interval, memory_order_relaxed);
	m = m < limit / 8 ? m : limit / 8;
	return m ? m : 1;
}

/* While refusing (refuse_block): an allocation of n bytes, sampled or not,
 * that the sample's checks let through.  The same checks as on_sample's
 * for a block, without a sample: refused while it would take the heap
 * (the tree's total, the held bytes) over the limit, as RLIMIT_DATA
 * refuses; the checks end once the heap is a margin under every limit.
 * Mappings are not checked here: they have their headroom and, once one
 * was refused, their own floor (api/mmap.c, ml__map_floor).  A realloc
 * that does not grow its block grows nothing (as a free, never refused). */
static unsigned on_recheck(struct ml__thread *t, uint64_t n)
{
	if (t->mapping ||
	    (t->replacing && n <= ml__usable_size((void *)t->replacing)))
		return 0;
	bool under = true;
	if (ml__run.heap_limit != ML_NO_LIMIT && !ml__run.heap_blind) {
		if (ml__over_global(n)) {
			fire(ML_GLOBAL_LIMIT, n, 0, 0);
			return ML__HOOK_REFUSE;
		}
		under = !ml__over_global(plus(n, margin(ml__run.heap_limit)));
	}
	if (ml__run.tree) {
		/* One check of n with the margin (it publishes this
		 * process's heap with them ahead, until its next check, and
		 * reads every member's slot).  Where another thread holds
		 * the slots the answer is unknown: let it through, still
		 * refusing (an overshoot of m, not more). */
		uint64_t m = margin(ml__shared_limit());
		uint64_t o = ml__shared_overshoot_or(plus(n, m), m);
		if (o > m) {
			fire(ML__TREE_LIMIT, n, 0, 0);
			return ML__HOOK_REFUSE;
		}
		under = under && o == 0;
	}
	if (ml__run.held_limit != ML_NO_LIMIT) {
		/* The held estimate moves only at samples: an allocation
		 * with none adds nothing to it, and one refused at the
		 * estimate h plus its samples' weight left h under the
		 * limit.  Refused while a sample of it would reach the limit
		 * (h + max(n, S)), so that unsampled growth stops where the
		 * estimate stands, as the heap limit's does. */
		uint64_t h = ml__held_after(t, &process, 0);
		uint64_t w = (uint64_t)t->sampler.interval;
		if (plus(h, n > w ? n : w) >= ml__run.held_limit) {
			fire(ML_HELD_LIMIT, n, 0, 0);
			return ML__HOOK_REFUSE;
		}
		under = under && plus(h, margin(ml__run.held_limit)) <
		                     ml__run.held_limit;
	}
	if (under)
		atomic_store(&ml__refusing, false);
	return 0;
}

/* The timeline's rows come after a sampled allocation is made, not at
 * its sample: the meter counts it only then, and one large block with
 * no sample after it (sort's buffer) would otherwise never show. */
static void on_granted(struct ml__thread *t)
{
	(void)t;
	ml__timeline_sample();
}

/* A refused or failed allocation allocated nothing. */
static void on_unsample(struct ml__thread *t, uint64_t s)
{
	struct root *root = root_of(t);
	if (!root)
		return;
	ml__counts_unsample(&root->counts, t->stack,
	                    s * (uint64_t)t->sampler.interval, s);
	/* The allocation limit's refusals leave the count: the report says
	 * how many, so that a count below the limit does not read as the
	 * limit not reached.  A rare path: shared counters are fine. */
	if (atomic_load(&root->task.status) == ML_ALLOC_LIMIT) {
		atomic_fetch_add(&ml__run.refused_samples, s);
		atomic_fetch_add(&ml__run.refused_allocs, 1);
	}
	if (root->tripped_here) {
		root->tripped_here = false;
		ml__profile_trip_refused();
	}
}

/* A process is one budget; a forked child starts its own (as an exec'd
 * one does), with its thread's root task fresh, and its own report,
 * profile, statistics and timeline. */
static void fork_child(struct ml__thread *t)
{
	struct root *root = root_of(t);
	atomic_store(&ml__run.fired, ML_OK);
	atomic_store(&ml__run.tree_fired, false);
	atomic_store(&ml__map_floor, ML_NO_LIMIT); /* its own budget */
	atomic_store(&ml__refusing, false);
	atomic_store(&ml__run.refused_samples, 0);
	atomic_store(&ml__run.refused_allocs, 0);
	ml__counts_fork_child(root ? &root->counts : NULL);
	if (root) {
		atomic_store(&root->task.status, ML_OK);
		atomic_store(&root->task.samples, 0);
		root->tripped_here = false;
		root->slice.seen = ML_OK;
		ml__tasks_recheck(t);
	}
	/* Here and not in handlers of their own registered by report.c's
	 * and stats.c's constructors: those ran before the settings were
	 * read (run_start, below), saw none, and registered nothing, so a
	 * child inherited a peak snapshot another thread of its parent was
	 * taking (its report at exit waited for it for ever: test-fork) and
	 * its parent's statistics. */
	if (ml__run.profiling)
		ml__profile_fork_child();
	if (ml__run.stats)
		ml__stats_fork_child();
	if (ml__run.timeline_path)
		ml__timeline_fork_child();
}

static struct ml__hooks hooks = {
    .sample = on_sample,
    .unsample = on_unsample,
    .recheck = on_recheck,
    .thread_start = thread_start,
    .thread_exit = thread_exit,
    .fork_child = fork_child,
};

/* After the core's constructor (api/init.c, priority 101): the core has
 * read its own settings. */
__attribute__((constructor(110))) static void run_start(void)
{
	ml__run_configure();
	if (!ml__run.active && !ml__run.profiling && !ml__run.stats)
		return;
	if (ml__run.stats) {
		hooks.alloc = ml__stats_alloc;
		hooks.failed = ml__stats_failed;
		hooks.every_alloc = true;
	}
	if (ml__run.profiling) {
		/* Which objects made the counted mappings (issue 34): a
		 * lookup per counted mapping, for the report. */
		atomic_store(&ml__mapped_attribute, true);
		/* Stacks at every sample only where they are written: a
		 * report file or a profile (a limit alone gets, on stderr,
		 * the stack that reached it, captured then). */
		if (ml__run.report_path || ml__run.profile_path)
			atomic_fetch_or(&ml__stacks_wanted, ML__STACKS_RUN);
	}
	/* Held memory only where it is used: the held limit, the held
	 * sections of a report file, and a profile's held pictures
	 * (FILE.peak, FILE.stop).  A record at every sample and a lookup at
	 * its free are a third of a sample's cost (issue 17); a profile
	 * pays a stack walk at every sample already. */
	if (ml__run.held_limit != ML_NO_LIMIT || ml__run.report_path ||
	    ml__run.profile_path) {
		process.magic = ML__TASK_FRAME;
		process.internal = true;
		ml__held_need(); /* for the process's life */
		held_tracked = true;
		/* Every thread charges the process account: batched, the
		 * held limit then reached late or early by at most
		 * held_limit/1024 (4 MiB at most) per other thread
		 * (docs/statistics.md, "Run mode"). */
		uint64_t b = ml__run.held_limit / 1024;
		if (b > HELD_BATCH_MAX)
			b = HELD_BATCH_MAX;
		if (!ml__held_batch(&process, b ? b : 1))
			ml__diag("no memory for the held account: no thread's "
			         "blocks are counted as held");
	}
	if (ml__run.timeline_path)
		hooks.granted = on_granted;
	ml__hooks_install(&hooks);
	struct ml__thread *t = &ml__self;
	if (t->state == ML__T_LIVE)
		thread_start(t);
	if (ml__run.timeline_path)
		ml__timeline_start(run_held_now);
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
	if (ml__run.timeline_path)
		ml__timeline_exit();
	t->busy = 0;
	ml__unforce(t);
}
