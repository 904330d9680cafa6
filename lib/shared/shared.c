/* Shared budgets' entry points (issues 27 and 35; docs/shared.md for
 * users, docs/internals.md, "Shared budgets", for the table, the choice
 * and the wake): joining by name, making an unnamed table, leaving, the
 * readers, joining at start from MEMLIMITS_SHARED, and the exported
 * ml_shared_* functions.  Nothing read from a table is trusted. */
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
	struct ml__shared_table *t = atomic_load(&ml__shared_joined);
	if (t) {
		if (strcmp(name, ml__shared_name))
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
	if (!limit || (slots && !ml__shared_slot_count_ok(slots)))
		return ML_EINVAL;
	uint32_t n = slots ? slots : ML__SHARED_SLOTS;
	ml__spin_lock(&ml__shared_join_lock);
	if (atomic_load(&ml__shared_joined)) {
		ml__spin_unlock(&ml__shared_join_lock);
		return ML_EINVAL;
	}
	/* Shared with the children forked from now on, and with nobody
	 * else: no name, no file to truncate. */
	void *p = ml__sys_mmap(NULL, ml__shared_table_bytes(n),
	                       PROT_READ | PROT_WRITE,
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
	struct ml__shared_table *t = atomic_exchange(&ml__shared_joined, NULL);
	if (!t) {
		ml__spin_unlock(&ml__shared_join_lock);
		return ML_EINVAL;
	}
	ml__spin_lock(
	    &ml__shared_slot_lock); /* nobody is in a hook with the table now */
	ml__shared_leave_table(t);
	ml__spin_unlock(&ml__shared_slot_lock);
	ml__meter_keep(false);
	ml__spin_unlock(&ml__shared_join_lock);
	return ML_OK;
}

uint64_t ml__shared_usage(void)
{
	uint64_t total = 0;
	ml__spin_lock(&ml__shared_slot_lock);
	struct ml__shared_table *t = ml__shared_table_in_use();
	if (t) {
		struct ml__shared_totals v;
		ml__shared_sum_table(t, true, -1, true, &v);
		total = v.total;
		/* Our own heap as of now (a read, not a publication). */
		if (ml__shared_slot_ours(t) &&
		    ml__shared_my_lineage == ml__lineage) {
			struct ml__shared_figures p;
			if (ml__shared_copy_read(&t->slot[ml__shared_my_slot],
			                         &p) &&
			    total >= ml__shared_clamp(p.heap))
				total = ml__shared_add_sat(
				    total - ml__shared_clamp(p.heap),
				    ml__shared_heap_now());
		}
	}
	ml__spin_unlock(&ml__shared_slot_lock);
	return total;
}

size_t ml__shared_members(ml_shared_member *out, size_t n)
{
	size_t k = 0;
	ml__spin_lock(&ml__shared_slot_lock);
	struct ml__shared_table *t = ml__shared_table_in_use();
	uint32_t used = t ? ml__shared_slots_used(t) : 0;
	for (uint32_t i = 0; i < used; i++) {
		struct ml__shared_slot *s = &t->slot[i];
		uint64_t tag = atomic_load(&s->tag);
		struct ml__shared_figures p;
		if (ml__shared_tag_state(tag) != ML__SHARED_LIVE ||
		    !ml__shared_copy_read(s, &p))
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
	ml__spin_unlock(&ml__shared_slot_lock);
	return k;
}

uint64_t ml__shared_overshoot_or(uint64_t n, uint64_t busy)
{
	if (!atomic_load_explicit(&ml__shared_joined, memory_order_relaxed))
		return 0;
	if (!ml__spin_trylock(&ml__shared_slot_lock))
		return busy; /* another thread is publishing */
	struct ml__shared_table *t = ml__shared_table_in_use();
	if (!t) {
		ml__spin_unlock(&ml__shared_slot_lock);
		return 0;
	}
	/* Not counted (a fork child that finds no free slot): what it
	 * would add cannot be seen by the others, so it is refused
	 * (--tree-heap-limit fails closed).  Its slot is claimed here, before
	 * the allocation, when it has none yet: claimed at the fold after
	 * it, a first block was let through uncounted (issue 35,
	 * tests/shared/test-tree-many.sh). */
	if (ml__shared_my_lineage == ml__lineage &&
	    !ml__shared_ensure_slot(t)) {
		ml__spin_unlock(&ml__shared_slot_lock);
		return n ? n : 1;
	}
	/* Our own heap published at each check, the allocation checked
	 * included, not only once it has moved by a batch: every member's
	 * share is then late by what it took since its last sampled
	 * allocation (an interval on average), not by up to a batch (1 MiB
	 * at least), which let 1030 processes holding 900 KiB each take
	 * 905 MiB under --tree-heap-limit 512MiB unrefused, none of them seen
	 * (issue 35).  Published before the others are read, with a full
	 * fence between: of two members checking at once, one at least sees
	 * the other's allocation.  Refused, it is published again without. */
	bool mine = ml__shared_my_lineage == ml__lineage;
	if (mine) {
		ml__shared_publish_ahead(t, n);
		atomic_thread_fence(memory_order_seq_cst);
	}
	uint64_t total = 0, limit = atomic_load(&t->head.limit);
	uint32_t k = ml__shared_slots_used(t);
	for (uint32_t i = 0; i < k; i++) {
		uint64_t tag = atomic_load(&t->slot[i].tag);
		struct ml__shared_figures p;
		if (ml__shared_tag_state(tag) == ML__SHARED_LIVE &&
		    (int)i != ml__shared_my_slot &&
		    ml__shared_copy_read(&t->slot[i], &p))
			total =
			    ml__shared_add_sat(total, ml__shared_clamp(p.heap));
	}
	total = ml__shared_add_sat(
	    ml__shared_add_sat(total, ml__shared_heap_now()), n);
	if (total > limit && mine && n)
		ml__shared_publish(t);
	ml__spin_unlock(&ml__shared_slot_lock);
	return total > limit ? total - limit : 0;
}

void ml__shared_from_env(void)
{
	uint64_t slots;
	const char *sl = ml__getenv("MEMLIMITS_SHARED_SLOTS");
	if (sl && *sl) {
		if (ml__parse_u64(sl, &slots) == 0 &&
		    ml__shared_slot_count_ok(slots))
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
