/* Run mode's per-thread counts: the samples of the process-wide
 * allocation limit and the profile by call stack, each thread counting in
 * its own record so that a sample writes no cache line that another
 * thread writes (issue 17).  The samples reach the shared total in
 * batches (ml__run.batch); the profile is summed only when something is
 * written.  Threads that exit fold theirs into one record.  runmode.c
 * counts, report.c reads; this file calls neither. */
#define _GNU_SOURCE
#include "run/run.h"

#include <string.h>

/* The live list and the exited threads' profile: taken at thread start
 * and exit and by the report, never at a sample. */
ML__LOCK(static, lock, ML__RANK_STATS)
static struct ml__run_counts *live;
static struct ml__prof exited;

static void bump(struct ml__prof_count *c, uint64_t bytes, uint64_t s)
{
	ML__RBUMP(c->bytes, bytes);
	ML__RBUMP(c->samples, s);
}

/* The record's count for a stack id.  Its table is made at the first
 * stack (pages touched only as stacks arrive); without memory for it,
 * the stack's samples count as [unknown]. */
static struct ml__prof_count *count_of(struct ml__prof *p, uint32_t id)
{
	if (ml__likely(id == 0 && !p->by_id))
		return &p->nostack;
	if (ml__unlikely(!p->by_id)) {
		struct ml__prof_count *tab =
		    ml__raw_alloc(ML__NIDS * sizeof *tab);
		if (!tab)
			return &p->nostack;
		/* What counted as [unknown] so far is stack 0's. */
		tab[0] = p->nostack;
		__atomic_store_n(&p->by_id, tab, __ATOMIC_RELEASE);
	}
	return &p->by_id[id];
}

/* Add `from` into `into` and free from's table (under the lock). */
static void fold(struct ml__prof *into, struct ml__prof *from)
{
	bump(&into->all, from->all.bytes, from->all.samples);
	struct ml__prof_count *tab = from->by_id;
	if (!tab) {
		bump(count_of(into, 0), from->nostack.bytes,
		     from->nostack.samples);
		return;
	}
	for (uint32_t id = 0; id < ML__NIDS; id++)
		if (tab[id].samples || tab[id].bytes)
			bump(count_of(into, id), tab[id].bytes,
			     tab[id].samples);
	from->by_id = NULL;
	ml__raw_free(tab, ML__NIDS * sizeof *tab);
}

void ml__counts_start(struct ml__run_counts *c)
{
	ml__spin_lock(&lock);
	c->next = live;
	live = c;
	ml__spin_unlock(&lock);
}

void ml__counts_end(struct ml__run_counts *c)
{
	ml__spin_lock(&lock);
	for (struct ml__run_counts **p = &live; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	atomic_fetch_add(&ml__run.samples, c->unfolded);
	fold(&exited, &c->prof);
	ml__spin_unlock(&lock);
}

uint64_t ml__counts_sample(struct ml__run_counts *c, uint32_t stack,
                           uint64_t bytes, uint64_t s)
{
	bump(&c->prof.all, bytes, s);
	bump(count_of(&c->prof, stack), bytes, s);
	/* The process-wide count as this thread sees it: the folded total
	 * plus its own unfolded samples; it folds once it has a batch. */
	uint64_t mine = c->unfolded + s;
	if (mine >= ml__run.batch) {
		ML__RSTORE(c->unfolded, 0);
		return atomic_fetch_add_explicit(&ml__run.samples, mine,
		                                 memory_order_relaxed) +
		       mine;
	}
	ML__RSTORE(c->unfolded, mine);
	return atomic_load_explicit(&ml__run.samples, memory_order_relaxed) +
	       mine;
}

void ml__counts_unsample(struct ml__run_counts *c, uint32_t stack,
                         uint64_t bytes, uint64_t s)
{
	/* The sample just taken, on the same stack: its bytes go back,
	 * modulo 2^64; out of the unfolded part if it is there, else out of
	 * the total (it may have gone with its batch). */
	bump(&c->prof.all, -bytes, -s);
	bump(count_of(&c->prof, stack), -bytes, -s);
	if (c->unfolded >= s)
		ML__RSTORE(c->unfolded, c->unfolded - s);
	else
		atomic_fetch_sub(&ml__run.samples, s);
}

void ml__counts_fork_child(struct ml__run_counts *mine)
{
	/* The lock was held across the fork (forklock.c): the list is
	 * whole.  The other threads' records are not theirs any more:
	 * leaked, as their slots may be anywhere in their pool's state. */
	atomic_store(&ml__run.samples, 0);
	memset(&exited, 0, sizeof exited);
	live = mine;
	if (!mine)
		return;
	mine->next = NULL;
	mine->unfolded = 0;
	struct ml__prof_count *tab = mine->prof.by_id;
	memset(&mine->prof, 0, sizeof mine->prof);
	if (tab) {
		memset(tab, 0, ML__NIDS * sizeof *tab);
		mine->prof.by_id = tab;
	}
}

uint64_t ml__counts_samples(void)
{
	ml__spin_lock(&lock);
	uint64_t n = atomic_load(&ml__run.samples);
	for (const struct ml__run_counts *c = live; c; c = c->next)
		n += ML__RLOAD(c->unfolded);
	ml__spin_unlock(&lock);
	return n;
}

/* p's count for stack id `id`. */
static struct ml__prof_count count_at(const struct ml__prof *p, uint32_t id)
{
	const struct ml__prof_count *tab =
	    __atomic_load_n(&p->by_id, __ATOMIC_ACQUIRE);
	const struct ml__prof_count *c = tab       ? &tab[id]
	                                 : id == 0 ? &p->nostack
	                                           : NULL;
	struct ml__prof_count r = {0, 0};
	if (c) {
		r.bytes = ML__RLOAD(c->bytes);
		r.samples = ML__RLOAD(c->samples);
	}
	return r;
}

static void add_prof(struct ml__prof_count *all, uint64_t *bytes,
                     uint64_t *samples, const struct ml__prof *p)
{
	all->bytes += ML__RLOAD(p->all.bytes);
	all->samples += ML__RLOAD(p->all.samples);
	for (uint32_t id = 0; bytes && id < ML__NIDS; id++) {
		struct ml__prof_count c = count_at(p, id);
		bytes[id] += c.bytes;
		if (samples)
			samples[id] += c.samples;
	}
}

struct ml__prof_count ml__counts_profile(uint64_t *bytes, uint64_t *samples)
{
	struct ml__prof_count all = {0, 0};
	if (bytes)
		memset(bytes, 0, ML__NIDS * sizeof *bytes);
	if (samples)
		memset(samples, 0, ML__NIDS * sizeof *samples);
	ml__spin_lock(&lock);
	add_prof(&all, bytes, samples, &exited);
	for (const struct ml__run_counts *c = live; c; c = c->next)
		add_prof(&all, bytes, samples, &c->prof);
	ml__spin_unlock(&lock);
	return all;
}
