/* The choice of a shared budget (docs/internals.md, "Shared budgets"):
 * what this process publishes, summing the table, the deadline, choosing
 * the largest holder and posting its stop request, and obeying one. */
#define _GNU_SOURCE
#include "shared/shared.h"

#include <string.h>

#define DEADLINE_NS ((uint64_t)ML_SHARED_DEADLINE_MS * 1000000)

/* The held estimates' net movement since we last published
 * (on_held_moved): blocks recorded less blocks freed, sampled weights. */
_Atomic int64_t ml__shared_held_moved;
/* Sums done: every ML__SHARED_FULL_EVERY-th is full. */
uint32_t ml__shared_sums_done;
/* Pressure with the shared limit (ml_set_pressure_callback). */
_Atomic bool ml__shared_pressure_above, ml__shared_pressure_due;
_Atomic uint64_t ml__shared_pressure_total;

/* ---- What this process publishes --------------------------------------- */

struct largest {
	struct ml_task *best;
	uint64_t held, stopping;
};

static void find_largest(struct ml_task *task, void *arg)
{
	struct largest *top = arg;
	int st = atomic_load_explicit(&task->status, memory_order_relaxed);
	uint64_t h = ml__held_bytes(task);
	if (st == ML_GLOBAL_LIMIT)
		top->stopping += h;
	else if (st == ML_OK && (!top->best || h > top->held)) {
		top->best = task;
		top->held = h;
	}
}

uint64_t ml__shared_heap_now(void)
{
	uint64_t u = ml__meter_usage();
	return u > ml__shared_inherited ? u - ml__shared_inherited : 0;
}

void ml__shared_publish(struct ml__shared_table *t)
{
	ml__shared_publish_ahead(t, 0);
}

void ml__shared_publish_ahead(struct ml__shared_table *t, uint64_t ahead)
{
	struct ml__shared_slot *s = &t->slot[ml__shared_my_slot];
	struct largest top = {0};
	ml__global_visit(find_largest, &top);
	/* The deadline of memory on its way back runs from the last
	 * publication at which it had not grown: a member publishes at its
	 * folds and safe points, so one that runs is working its way back
	 * (a PostgreSQL backend writing its out-of-memory report and
	 * aborting, which frees nothing for over a second under load, was
	 * passed over by its own sum and a waiting bystander stopped); one
	 * that is blocked, or whose stopped tasks keep growing, counts as
	 * memory again after the deadline. */
	if (!top.stopping)
		ml__shared_stopping_since = 0;
	else if (!ml__shared_last_stopping || !ml__shared_stopping_since ||
	         top.stopping <= ml__shared_last_stopping)
		ml__shared_stopping_since = ml__shared_now_ns();
	struct ml__shared_figures v = {
	    ml__shared_add_sat(ml__shared_heap_now(), ahead),
	    top.best ? top.held : 0, ml__shared_task_id(top.best), top.stopping,
	    ml__shared_stopping_since};
	ml__shared_copy_write(s, &v);
	atomic_store_explicit(&ml__shared_held_moved, 0, memory_order_relaxed);
	ml__shared_last_stopping = top.stopping;
	if (ml__shared_slots_used(t) <= (uint32_t)ml__shared_my_slot)
		ml__shared_raise_high_water(t,
		                            (uint32_t)ml__shared_my_slot + 1);
}

/* The members' totals, the dead swept; `skip`: a slot whose pending
 * request is not counted as stopping (the target's own view). */

/* A fresh moment (within the deadline of `now`)?  0 is none. */
static bool within_deadline(uint64_t since, uint64_t now)
{
	return since && now - since < DEADLINE_NS;
}

/* `readonly`: ml_shared_usage's scan, which frees nothing and leaves the
 * fold's reference alone; the dead are skipped all the same. */
void ml__shared_sum_table(struct ml__shared_table *t, bool full, int skip,
                          bool readonly, struct ml__shared_totals *v)
{
	memset(v, 0, sizeof *v);
	v->best = -1;
	v->limit = atomic_load_explicit(&t->head.limit, memory_order_relaxed);
	uint64_t now = ml__shared_now_ns();
	uint32_t n = ml__shared_slots_used(t);
	for (uint32_t i = 0; i < n; i++) {
		struct ml__shared_slot *s = &t->slot[i];
		uint64_t tag =
		    atomic_load_explicit(&s->tag, memory_order_acquire);
		unsigned st = ml__shared_tag_state(tag);
		if (st == ML__SHARED_FREE)
			continue;
		if (st != ML__SHARED_LIVE && st != ML__SHARED_CLAIMING) {
			if (!readonly)
				ml__shared_slot_free(t, (int)i,
				                     tag); /* garbage */
			continue;
		}
		if ((int)i != ml__shared_my_slot &&
		    !ml__shared_member_alive(t, (int)i, tag, full)) {
			if (!readonly)
				ml__shared_slot_free(t, (int)i, tag);
			continue;
		}
		struct ml__shared_figures p;
		if (st != ML__SHARED_LIVE || !ml__shared_copy_read(s, &p))
			continue;
		uint64_t held = ml__shared_clamp(p.top_held);
		uint64_t req =
		    atomic_load_explicit(&s->request, memory_order_relaxed);
		uint64_t heap = ml__shared_clamp(p.heap);
		if ((int)i == ml__shared_my_slot && !readonly)
			ml__shared_summed_heap =
			    heap; /* the fold's reference (on_fold) */
		v->total = ml__shared_add_sat(v->total, heap);
		/* Memory on its way back counts as such for the deadline
		 * from its member's last progress only (ml__shared_publish):
		 * then it is memory like any other, and the next largest
		 * holder is chosen. */
		if (within_deadline(p.stop_since, now))
			v->stopping = ml__shared_add_sat(
			    v->stopping, ml__shared_clamp(p.stopping));
		if (req) {
			v->requests = true;
			uint64_t rt = atomic_load_explicit(
			    &s->req_time, memory_order_relaxed);
			if ((int)i != skip && (!rt || within_deadline(rt, now)))
				v->stopping =
				    ml__shared_add_sat(v->stopping, held);
		} else if (p.top_id && (v->best < 0 || held > v->best_held)) {
			v->best = (int)i;
			v->best_held = held;
			v->best_id = p.top_id;
		}
	}
	if (!readonly)
		ml__shared_sums_done++;
}

bool ml__shared_over_limit(const struct ml__shared_totals *v)
{
	return v->total > ml__shared_add_sat(v->limit, v->stopping);
}

/* Pressure with the shared limit: once per upward crossing of the
 * fraction, heard at the next safe point (damped as the meter's). */
void ml__shared_pressure_note(const struct ml__shared_totals *v)
{
	uint64_t ppm;
	void *arg;
	if (!ml__pressure_get(&ppm, &arg) || !ppm)
		return;
	uint64_t th = (uint64_t)((unsigned __int128)v->limit * ppm / 1000000);
	th = th ? th : 1;
	if (v->total >= th) {
		if (!atomic_exchange(&ml__shared_pressure_above, true)) {
			atomic_store(&ml__shared_pressure_total, v->total);
			atomic_store(&ml__shared_pressure_due, true);
		}
	} else if (v->total < th - th / 32) {
		atomic_store(&ml__shared_pressure_above, false);
	}
}

/* Clear a request `req` and then its time (unless a new request stamped
 * it meanwhile): a request whose time reads 0 was just posted. */
static void request_clear(struct ml__shared_slot *s, uint64_t req)
{
	uint64_t rt = atomic_load(&s->req_time);
	if (atomic_compare_exchange_strong(&s->request, &req, 0))
		atomic_compare_exchange_strong(&s->req_time, &rt, 0);
}

/* A stop request in our slot: interrupt the task it names if it still
 * runs and the total is still over, publish (what it holds now counts as
 * stopping) and clear the request.  `wake`: the request is another
 * member's, and the program's wake callback is told of the stop (a
 * server that blocks next without allocating must still end it). */
void ml__shared_obey_request(struct ml__shared_table *t, bool wake)
{
	struct ml__shared_slot *s = &t->slot[ml__shared_my_slot];
	uint64_t req = atomic_load_explicit(&s->request, memory_order_acquire);
	if (!req)
		return;
	struct ml__shared_totals v;
	ml__shared_publish(t);
	ml__shared_sum_table(t, true, ml__shared_my_slot, false, &v);
	if (ml__shared_over_limit(&v)) {
		struct ml__shared_trip_arg a = {req, false, false};
		ml__global_visit(ml__shared_trip_named, &a);
		if (a.tripped)
			ml__shared_publish(
			    t); /* its estimate now counts as stopping */
		if (a.tripped && wake)
			ml__shared_wake_callback();
	}
	request_clear(s, req);
}

/* ---- Choosing ------------------------------------------------------------ */

/* The total is back under the limit: the requests still pending are
 * dropped (their targets need not stop any more). */
void ml__shared_drop_requests(struct ml__shared_table *t,
                              const struct ml__shared_totals *v)
{
	if (!v->requests || v->total > v->limit)
		return;
	uint32_t n = ml__shared_slots_used(t);
	for (uint32_t i = 0; i < n; i++) {
		uint64_t r = atomic_load_explicit(&t->slot[i].request,
		                                  memory_order_relaxed);
		if (r)
			request_clear(&t->slot[i], r);
	}
}

/* Sum, and when over, ask the largest holder (after a full sweep); when
 * back under, drop the requests still pending. */
void ml__shared_choose(struct ml__shared_table *t, bool full)
{
	struct ml__shared_totals v;
	ml__shared_sum_table(
	    t, full || ml__shared_sums_done % ML__SHARED_FULL_EVERY == 0, -1,
	    false, &v);
	if (ml__shared_over_limit(&v) && !full)
		ml__shared_sum_table(t, true, -1, false, &v);
	ml__shared_pressure_note(&v);
	ml__shared_drop_requests(t, &v);
	if (!ml__shared_over_limit(&v) || v.best < 0)
		return;
	uint64_t none = 0;
	struct ml__shared_slot *s = &t->slot[v.best];
	if (!atomic_compare_exchange_strong(&s->request, &none, v.best_id))
		return;
	atomic_store(&s->req_time, ml__shared_now_ns());
	if (v.best == ml__shared_my_slot)
		ml__shared_obey_request(t, false);
	else
		ml__shared_wake_target(t, v.best, v.best_id);
}
