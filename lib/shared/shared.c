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
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int ml__shared_join(const char *name, uint64_t limit)
{
	if (!ml__shared_name_ok(name))
		return ML_EINVAL;
	int rc;
	ml__spin_lock(&ml__shared_join_lock);
	struct ml__shared_table *t = atomic_load(&ml__shared_tab);
	if (t) {
		if (strcmp(name, ml__shared_my_name))
			rc = ML_EINVAL;
		else {
			if (limit)
				atomic_store(&t->head.limit, limit);
			rc = ML_OK;
		}
		ml__spin_unlock(&ml__shared_join_lock);
		return rc;
	}
	uint32_t n = 0;
	rc = ml__shared_open_table(name, limit, &t, &n);
	if (rc == ML_OK)
		rc = ml__shared_join_table(t, n, name, true);
	ml__spin_unlock(&ml__shared_join_lock);
	return rc;
}

int ml__shared_create(uint64_t limit, uint32_t slots)
{
	if (!limit || (slots && !ml__shared_slots_ok(slots)))
		return ML_EINVAL;
	uint32_t n = slots ? slots : ML__SHARED_SLOTS;
	ml__spin_lock(&ml__shared_join_lock);
	if (atomic_load(&ml__shared_tab)) {
		ml__spin_unlock(&ml__shared_join_lock);
		return ML_EINVAL;
	}
	/* Shared with the children forked from now on, and with nobody
	 * else: no name, no file to truncate. */
	void *p = mmap(NULL, ml__shared_table_bytes(n), PROT_READ | PROT_WRITE,
	               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	int rc = ML_ENOMEM;
	if (p != MAP_FAILED) {
		ml__shared_table_init(p, n, limit);
		rc = ml__shared_join_table(p, n, "", false);
	}
	ml__spin_unlock(&ml__shared_join_lock);
	return rc;
}

int ml__shared_leave(void)
{
	ml__spin_lock(&ml__shared_join_lock);
	struct ml__shared_table *t = atomic_exchange(&ml__shared_tab, NULL);
	if (!t) {
		ml__spin_unlock(&ml__shared_join_lock);
		return ML_EINVAL;
	}
	ml__shared_pub_lock(); /* nobody is in a hook with the table now */
	ml__shared_leave_table(t);
	ml__shared_pub_unlock();
	ml__meter_keep(false);
	ml__spin_unlock(&ml__shared_join_lock);
	return ML_OK;
}

uint64_t ml__shared_usage(void)
{
	uint64_t total = 0;
	ml__shared_pub_lock();
	struct ml__shared_table *t = ml__shared_table_ok();
	if (t) {
		struct ml__shared_view v;
		ml__shared_sum(t, true, -1, true, &v);
		total = v.total;
		/* Our own heap as of now (a read, not a publication). */
		if (ml__shared_slot_ours(t) &&
		    ml__shared_my_lineage == ml__lineage) {
			struct ml__shared_pubv p;
			if (ml__shared_pub_read(&t->slot[ml__shared_my_slot],
			                        &p) &&
			    total >= ml__shared_clamp(p.heap))
				total = ml__shared_add_sat(
				    total - ml__shared_clamp(p.heap),
				    ml__shared_heap_now());
		}
	}
	ml__shared_pub_unlock();
	return total;
}

size_t ml__shared_members(ml_shared_member *out, size_t n)
{
	size_t k = 0;
	ml__shared_pub_lock();
	struct ml__shared_table *t = ml__shared_table_ok();
	uint32_t used = t ? ml__shared_slots_used(t) : 0;
	for (uint32_t i = 0; i < used; i++) {
		struct ml__shared_slot *s = &t->slot[i];
		uint64_t tag = atomic_load(&s->tag);
		struct ml__shared_pubv p;
		if (ml__shared_tag_state(tag) != ML__SHARED_LIVE ||
		    !ml__shared_pub_read(s, &p))
			continue;
		bool self = (int)i == ml__shared_my_slot &&
		            ml__shared_slot_ours(t) &&
		            ml__shared_my_lineage == ml__lineage;
		if (!self && kill(ml__shared_tag_pid(tag), 0) != 0 &&
		    errno == ESRCH)
			continue;
		if (k < n && out) {
			ml_shared_member *m = &out[k];
			memset(m, 0, sizeof *m);
			m->pid = (int32_t)ml__shared_tag_pid(tag);
			m->heap = self ? ml__shared_heap_now()
			               : ml__shared_clamp(p.heap);
			m->held = ml__shared_clamp(p.top_held);
			m->stopping = ml__shared_clamp(p.stopping);
			m->flags =
			    (self ? ML_SHARED_SELF : 0) |
			    (atomic_load(&s->request) ? ML_SHARED_ASKED : 0) |
			    (atomic_load(&s->wake) ? ML_SHARED_WAKEABLE : 0);
		}
		k++;
	}
	ml__shared_pub_unlock();
	return k;
}

uint64_t ml__shared_overshoot(uint64_t n)
{
	if (!atomic_load_explicit(&ml__shared_tab, memory_order_relaxed) ||
	    !ml__spin_trylock(&ml__shared_pub))
		return 0; /* busy: another thread is publishing */
	struct ml__shared_table *t = ml__shared_table_ok();
	if (!t) {
		ml__spin_unlock(&ml__shared_pub);
		return 0;
	}
	/* Not counted (a fork child that found no free slot): what it
	 * would add cannot be seen by the others, so it is refused
	 * (--tree-heap-limit fails closed). */
	if (ml__shared_my_lineage == ml__lineage && !ml__shared_slot_ours(t) &&
	    ml__shared_claim_failed) {
		ml__spin_unlock(&ml__shared_pub);
		return n ? n : 1;
	}
	uint64_t total = 0, limit = atomic_load(&t->head.limit);
	uint32_t k = ml__shared_slots_used(t);
	for (uint32_t i = 0; i < k; i++) {
		uint64_t tag = atomic_load(&t->slot[i].tag);
		struct ml__shared_pubv p;
		if (ml__shared_tag_state(tag) == ML__SHARED_LIVE &&
		    (int)i != ml__shared_my_slot &&
		    ml__shared_pub_read(&t->slot[i], &p))
			total =
			    ml__shared_add_sat(total, ml__shared_clamp(p.heap));
	}
	ml__spin_unlock(&ml__shared_pub);
	total = ml__shared_add_sat(
	    ml__shared_add_sat(total, ml__shared_heap_now()), n);
	return total > limit ? total - limit : 0;
}

void ml__shared_from_env(void)
{
	uint64_t slots;
	const char *sl = ml__getenv("MEMLIMITS_SHARED_SLOTS");
	if (sl && *sl) {
		if (ml__parse_u64(sl, &slots) == 0 &&
		    ml__shared_slots_ok(slots))
			ml__shared_env_slots = (uint32_t)slots;
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
