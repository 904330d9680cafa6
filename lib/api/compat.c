/* The 0.1 entry points, kept with the 0.1 layouts of ml_limits and
 * ml_outcome (include/memlimits.h, "How ml_limits and ml_outcome grow";
 * lib/memlimits.map).  A 0.1 binary's unversioned references bind to
 * these, the oldest versions.  Each copies the old struct into the new one
 * with every newer field at "none", calls the current function, and copies
 * the old part of the outcome back: the caller's smaller ml_outcome is
 * never written past its end. */
#include "api/api.h"

struct limits_0_1 {
	uint64_t alloc_bytes;
	bool global;
	ml_token *token;
	ml_delivery delivery;
};

struct outcome_0_1 {
	ml_status status;
	void *ret;
	uint64_t allocated;
};

/* Exported only under their versioned names (below): the plain names are
 * local to the library (lib/memlimits.map, "local: *"). */
#define ML__COMPAT ML__VERSIONED
#define ML__SYMVER(impl, name) ML__SYMVER_OLD(impl, name, "MEMLIMITS_0.1")

static void outcome_back(const ml_outcome *o, struct outcome_0_1 *out)
{
	if (out) {
		out->status = o->status;
		out->ret = o->ret;
		out->allocated = o->allocated;
	}
}

ML__COMPAT ml_status ml__run_0_1(const struct limits_0_1 *old,
                                 void *(*fn)(void *), void *arg,
                                 struct outcome_0_1 *out);
ML__COMPAT ml_status ml__run_0_1(const struct limits_0_1 *old,
                                 void *(*fn)(void *), void *arg,
                                 struct outcome_0_1 *out)
{
	if (!old)
		return ml__run_0_2(NULL, fn, arg, NULL);
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = old->alloc_bytes;
	l.global = old->global;
	l.token = old->token;
	l.delivery = old->delivery;
	ml_outcome o;
	ml_status st = ml__run_0_2(&l, fn, arg, out ? &o : NULL);
	if (out)
		outcome_back(&o, out);
	return st;
}
ML__SYMVER(ml__run_0_1, ml_run);

/* The shorthands of 0.1 took the 0.1 outcome. */
#define SHORTHAND_0_1(name, impl, params, args)       \
	ML__COMPAT ml_status impl params;             \
	ML__COMPAT ml_status impl params              \
	{                                             \
		ml_outcome o;                         \
		ml_status st = ml__##name##_0_2 args; \
		if (out)                              \
			outcome_back(&o, out);        \
		return st;                            \
	}                                             \
	ML__SYMVER(impl, ml_##name);

SHORTHAND_0_1(limit_allocations, ml__limit_allocations_0_1,
              (uint64_t bytes, void *(*fn)(void *), void *arg,
               struct outcome_0_1 *out),
              (bytes, fn, arg, out ? &o : NULL))
SHORTHAND_0_1(limit_global_memory, ml__limit_global_memory_0_1,
              (void *(*fn)(void *), void *arg, struct outcome_0_1 *out),
              (fn, arg, out ? &o : NULL))
SHORTHAND_0_1(limit_with_token, ml__limit_with_token_0_1,
              (ml_token * tok, void *(*fn)(void *), void *arg,
               struct outcome_0_1 *out),
              (tok, fn, arg, out ? &o : NULL))
