/* Bad input to every public function: a table of calls with every invalid
 * argument each can take.  Each row checks the documented answer (ML_EINVAL,
 * NaN, 0 or a harmless no-op) and that nothing changed: the process-wide
 * settings, this thread's task state (masked, interrupted), the outcome
 * record (left untouched) and the task function (never called). */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <limits.h>
#include <math.h>
#include <memlimits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile int called;

static void *task_fn(void *arg)
{
	called++;
	return arg;
}

static void cleanup_fn(void *arg)
{
	called++;
	(void)arg;
}

struct state {
	uint64_t interval, global_limit;
	ml_delivery delivery;
	bool masked, interrupted;
};

static struct state snapshot(void)
{
	return (struct state){ml_sample_interval(), ml_global_memory_limit(),
	                      ml_default_delivery(), ml_is_masked(),
	                      ml_is_interrupted()};
}

static bool same(const struct state *a, const struct state *b)
{
	return a->interval == b->interval &&
	       a->global_limit == b->global_limit &&
	       a->delivery == b->delivery && a->masked == b->masked &&
	       a->interrupted == b->interrupted;
}

/* The outcome record every call gets; its bytes must survive. */
static ml_outcome out;
static const unsigned char POISON = 0xa5;

/* Results are compared as int64 (statuses, sizes) or as doubles (NaN). */
enum kind { STATUS, NAN_RESULT, U64, NOOP };

struct row {
	const char *name;
	enum kind kind;
	int64_t want; /* STATUS: the status; U64: the value */
	int64_t (*call)(void);
	double (*fcall)(void);
};

static ml_limits lim(uint64_t bytes, int delivery)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = bytes;
	l.delivery = (ml_delivery)delivery;
	return l;
}

/* ---- ml_run and the shorthands ---------------------------------------- */

static int64_t run_null_limits(void)
{
	return ml_run(NULL, task_fn, NULL, &out);
}
static int64_t run_null_fn(void)
{
	ml_limits l = lim(1000, ML_DELIVER_JUMP);
	return ml_run(&l, NULL, NULL, &out);
}
static int64_t run_null_both(void)
{
	return ml_run(NULL, NULL, NULL, &out);
}
static int64_t run_delivery_3(void)
{
	ml_limits l = lim(1000, 3);
	return ml_run(&l, task_fn, NULL, &out);
}
static int64_t run_delivery_neg(void)
{
	ml_limits l = lim(1000, -1);
	return ml_run(&l, task_fn, NULL, &out);
}
static int64_t run_delivery_max(void)
{
	ml_limits l = lim(1000, INT_MAX);
	return ml_run(&l, task_fn, NULL, &out);
}
static int64_t run_delivery_min(void)
{
	ml_limits l = lim(1000, INT_MIN);
	return ml_run(&l, task_fn, NULL, &out);
}
static int64_t run_null_fn_null_out(void)
{
	ml_limits l = lim(1000, ML_DELIVER_FAIL);
	return ml_run(&l, NULL, NULL, NULL);
}
static int64_t alloc_null_fn(void)
{
	return ml_limit_allocations(1000, NULL, NULL, &out);
}
static int64_t alloc_null_fn_nolimit(void)
{
	return ml_limit_allocations(ML_NO_LIMIT, NULL, NULL, &out);
}
static int64_t global_null_fn(void)
{
	return ml_limit_global_memory(NULL, NULL, &out);
}
static int64_t token_null_token(void)
{
	return ml_limit_with_token(NULL, task_fn, NULL, &out);
}
static int64_t token_null_fn(void)
{
	ml_token *t = ml_token_new();
	int64_t r = ml_limit_with_token(t, NULL, NULL, &out);
	ml_token_free(t);
	return r;
}
static int64_t token_null_both(void)
{
	return ml_limit_with_token(NULL, NULL, NULL, &out);
}

/* ---- Settings --------------------------------------------------------- */

static int64_t interval_zero(void)
{
	return ml_set_sample_interval(0);
}
static int64_t delivery_3(void)
{
	return ml_set_default_delivery((ml_delivery)3);
}
static int64_t delivery_neg(void)
{
	return ml_set_default_delivery((ml_delivery)-1);
}
static int64_t delivery_max(void)
{
	return ml_set_default_delivery((ml_delivery)INT_MAX);
}
static int64_t delivery_min(void)
{
	return ml_set_default_delivery((ml_delivery)INT_MIN);
}

/* ---- Harmless no-ops -------------------------------------------------- */

static int64_t unmask_unmasked(void)
{
	if (ml_is_masked())
		return 0; /* meaningful only unmasked (the other runs) */
	ml_unmask();
	ml_unmask();
	return 0;
}
static int64_t pop_without_push(void)
{
	ml_cleanup_pop(true);
	ml_cleanup_pop(false);
	return 0;
}
static int64_t push_null_pop(void)
{
	/* A NULL handler is a hole: its pop is paired and runs nothing, the
	 * handler under it stays. */
	ml_cleanup_push(cleanup_fn, NULL);
	ml_cleanup_push(NULL, NULL);
	ml_cleanup_pop(true); /* the hole */
	if (called)
		return -1;
	ml_cleanup_pop(false); /* cleanup_fn, not run */
	return 0;
}
static int64_t token_free_null(void)
{
	ml_token_free(NULL);
	return 0;
}
static int64_t token_set_null(void)
{
	ml_token_set(NULL);
	return 0;
}
static int64_t token_is_set_null(void)
{
	return ml_token_is_set(NULL);
}
static int64_t check_outside(void)
{
	ml_check();
	return ml_is_interrupted();
}
static int64_t note_free_unknown(void)
{
	/* Frees never noted as allocations: the meter clamps at 0. */
	ml_note_free(0);
	ml_note_free(SIZE_MAX / 2);
	return ml_global_memory_usage() <= SIZE_MAX ? 0 : -1;
}
static int64_t note_alloc_zero(void)
{
	return ml_note_alloc(0) ? 0 : -1;
}
static void *note_huge_fn(void *arg)
{
	(void)arg;
	return ml_note_alloc(SIZE_MAX) ? arg : NULL;
}
/* ---- ml_note_alloc / ml_note_free above INT64_MAX (issue 24) ----------
 *
 * The meter counts in int64_t: 0.2 cast the size, so a note of 2^63 bytes
 * or more lowered the usage (4832 -> 0 with a global limit).  Such a note
 * is refused (false, nothing counted), a free that size is ignored, and
 * sums that no longer fit saturate.  In a child: it leaves the meter
 * saturated. */
static void note_huge_child(void *arg)
{
	(void)arg;
	int bad = 0;
	/* A fresh meter: the table freed INT64_MAX bytes never noted. */
	if (ml_set_global_memory_limit(ML_NO_LIMIT) != 0 ||
	    ml_set_global_memory_limit((uint64_t)1 << 40) != 0)
		_exit(64);
	const uint64_t u0 = ml_global_memory_usage();
	const size_t huge[] = {SIZE_MAX, (size_t)INT64_MAX + 1,
	                       SIZE_MAX / 2 + 4832};
	for (int i = 0; i < 3; i++) {
		if (ml_note_alloc(huge[i]) || ml_global_memory_usage() != u0)
			bad |= 1; /* refused, nothing counted */
		ml_note_free(huge[i]);
		if (ml_global_memory_usage() != u0)
			bad |= 2; /* ignored */
	}
	/* The same refusal inside a task: no sample charged to it. */
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	l.exact_alloc = true;
	l.delivery = ML_DELIVER_FAIL;
	ml_task *t = ml_task_new(&l);
	if (!t)
		_exit(64);
	ml_task_run(t, note_huge_fn, NULL, NULL);
	if (ml_task_status(t) != ML_OK || ml_task_allocated(t) != 0)
		bad |= 4;
	ml_task_free(t);
	/* The largest note that is taken, twice: the sum saturates. */
	if (!ml_note_alloc((size_t)INT64_MAX) ||
	    ml_global_memory_usage() != (uint64_t)INT64_MAX)
		bad |= 8;
	fprintf(stderr, "DBG %d %llu\n", (int)ml_note_alloc((size_t)INT64_MAX),
	        (unsigned long long)ml_global_memory_usage());
	if (!ml_note_alloc((size_t)INT64_MAX) ||
	    ml_global_memory_usage() != (uint64_t)INT64_MAX)
		bad |= 16;
	_exit(bad);
}

static int64_t status_str_unknown(void)
{
	const char *a = ml_status_str((ml_status)42);
	const char *b = ml_status_str((ml_status)-99);
	const char *c = ml_status_str((ml_status)INT_MIN);
	return a && b && c && *a && *b && *c ? 0 : -1;
}

/* ---- Bounds: interval 0 and probabilities out of (0, 1) --------------- */

static double bg_interval0(void)
{
	return ml_bound_global(1000, 0);
}
static double ba_interval0(void)
{
	return ml_bound_alloc(1000, 80000, 0);
}
static double ba_interval0_nolimit(void)
{
	return ml_bound_alloc(1000, ML_NO_LIMIT, 0);
}
static int64_t bs_interval0(void)
{
	return (int64_t)ml_bound_safe_bytes(80000, 1e-9, 0);
}
static int64_t bl_interval0(void)
{
	return (int64_t)ml_bound_limit_for(80000, 1e-9, 0);
}
static int64_t bs_nan(void)
{
	return (int64_t)ml_bound_safe_bytes(80000, NAN, 80000);
}
static int64_t bs_zero(void)
{
	return (int64_t)ml_bound_safe_bytes(80000, 0, 80000);
}
static int64_t bs_negative(void)
{
	return (int64_t)ml_bound_safe_bytes(80000, -0.5, 80000);
}
static int64_t bs_minus_inf(void)
{
	return (int64_t)ml_bound_safe_bytes(80000, -INFINITY, 80000);
}
static int64_t bl_nan(void)
{
	return (int64_t)ml_bound_limit_for(80000, NAN, 80000);
}
static int64_t bl_nan_interval0(void)
{
	return (int64_t)ml_bound_limit_for(0, NAN, 0);
}

#define R_STATUS(f, w)                   \
	{                                \
#f, STATUS, (w), f, NULL \
	}
#define R_U64(f, w)                            \
	{                                      \
#f, U64, (int64_t)(w), f, NULL \
	}
#define R_NAN(f)                           \
	{                                  \
#f, NAN_RESULT, 0, NULL, f \
	}
#define R_NOOP(f)                    \
	{                            \
#f, NOOP, 0, f, NULL \
	}

static const struct row rows[] = {
    R_STATUS(run_null_limits, ML_EINVAL),
    R_STATUS(run_null_fn, ML_EINVAL),
    R_STATUS(run_null_both, ML_EINVAL),
    R_STATUS(run_delivery_3, ML_EINVAL),
    R_STATUS(run_delivery_neg, ML_EINVAL),
    R_STATUS(run_delivery_max, ML_EINVAL),
    R_STATUS(run_delivery_min, ML_EINVAL),
    R_STATUS(run_null_fn_null_out, ML_EINVAL),
    R_STATUS(alloc_null_fn, ML_EINVAL),
    R_STATUS(alloc_null_fn_nolimit, ML_EINVAL),
    R_STATUS(global_null_fn, ML_EINVAL),
    R_STATUS(token_null_token, ML_EINVAL),
    R_STATUS(token_null_fn, ML_EINVAL),
    R_STATUS(token_null_both, ML_EINVAL),
    R_STATUS(interval_zero, ML_EINVAL),
    R_STATUS(delivery_3, ML_EINVAL),
    R_STATUS(delivery_neg, ML_EINVAL),
    R_STATUS(delivery_max, ML_EINVAL),
    R_STATUS(delivery_min, ML_EINVAL),
    R_NOOP(unmask_unmasked),
    R_NOOP(pop_without_push),
    R_NOOP(push_null_pop),
    R_NOOP(token_free_null),
    R_NOOP(token_set_null),
    R_NOOP(token_is_set_null),
    R_NOOP(check_outside),
    R_NOOP(note_free_unknown),
    R_NOOP(note_alloc_zero),
    R_NOOP(status_str_unknown),
    R_NAN(bg_interval0),
    R_NAN(ba_interval0),
    R_NAN(ba_interval0_nolimit),
    R_U64(bs_interval0, 0),
    R_U64(bl_interval0, 0),
    R_U64(bs_nan, 0),
    R_U64(bs_zero, 0),
    R_U64(bs_negative, 0),
    R_U64(bs_minus_inf, 0),
    R_U64(bl_nan, 0),
    R_U64(bl_nan_interval0, 0),
};
#define NROWS (sizeof rows / sizeof rows[0])

static void run_table(const char *when)
{
	for (size_t i = 0; i < NROWS; i++) {
		const struct row *r = &rows[i];
		struct state before = snapshot(), after;
		unsigned char want_out[sizeof out];
		memset(&out, POISON, sizeof out);
		memcpy(want_out, &out, sizeof out);
		called = 0;
		bool res;
		char got[64];
		if (r->kind == NAN_RESULT) {
			double d = r->fcall();
			res = isnan(d);
			snprintf(got, sizeof got, "%g", d);
		} else {
			int64_t v = r->call();
			res = r->kind == NOOP ? v == 0 : v == r->want;
			snprintf(got, sizeof got, "%lld", (long long)v);
		}
		after = snapshot();
		bool untouched = !memcmp(&out, want_out, sizeof out);
		tap_ok(res && same(&before, &after) && untouched && !called,
		       "%s %s: %s (got %s), settings unchanged%s, out "
		       "untouched%s, fn not called%s",
		       when, r->name,
		       r->kind == STATUS       ? "ML_EINVAL"
		       : r->kind == NAN_RESULT ? "NaN"
		       : r->kind == U64        ? "sentinel"
		                               : "no-op",
		       got, same(&before, &after) ? "" : " (NO)",
		       untouched ? "" : " (NO)", called ? " (NO)" : "");
	}
}

/* The same table from inside a running task (nothing may disturb it) and
 * with non-default settings (nothing may reset them). */
static void *inside(void *arg)
{
	run_table("in a task:");
	ml_mask();
	run_table("in a task, masked:");
	ml_unmask();
	return arg;
}

int main(void)
{
	run_table("idle:");

	tap_ok(ml_set_sample_interval(12345) == 0 &&
	           ml_set_default_delivery(ML_DELIVER_FLAG) == 0 &&
	           ml_set_global_memory_limit((uint64_t)1 << 40) == 0,
	       "non-default settings");
	run_table("changed settings:");
	tap_ok(ml_sample_interval() == 12345 &&
	           ml_default_delivery() == ML_DELIVER_FLAG &&
	           ml_global_memory_limit() == (uint64_t)1 << 40,
	       "the settings survived every bad call");

	int rc = tap_child(note_huge_child, NULL, 60);
	tap_ok(rc == 0,
	       "ml_note_alloc above INT64_MAX refused and counts nothing, "
	       "ml_note_free that size ignored, two notes of INT64_MAX "
	       "saturate the usage (child status %d: bits 1 2 4 8 16)",
	       rc);

	ml_limits l = lim(ML_NO_LIMIT, ML_DELIVER_FAIL);
	ml_outcome o;
	tap_is(ml_run(&l, inside, &l, &o), ML_OK,
	       "the task running the table ends ML_OK");
	tap_ok(o.ret == &l && !ml_is_masked() && !ml_is_interrupted(),
	       "after it: fn's value, unmasked, not interrupted");

	/* A valid call after all that: the library still works. */
	called = 0;
	l = lim(1000, ML_DELIVER_JUMP);
	tap_ok(ml_run(&l, task_fn, &l, &o) == ML_OK && called == 1 &&
	           o.ret == &l,
	       "a valid ml_run still runs fn once");
	tap_ok(ml_set_global_memory_limit(ML_NO_LIMIT) == 0 &&
	           ml_global_memory_limit() == ML_NO_LIMIT,
	       "global limit back to none");
	/* The new names and the 0.1 aliases are the same functions. */
	tap_ok(ml_set_global_limit(12345) == 0 &&
	           ml_global_memory_limit() == 12345 &&
	           ml_set_global_memory_limit(54321) == 0 &&
	           ml_global_limit() == 54321 &&
	           ml_set_global_limit(ML_NO_LIMIT) == 0 &&
	           ml_global_limit() == ML_NO_LIMIT,
	       "ml_set_global_limit/ml_global_limit and their 0.1 aliases");
	return tap_done();
}
