/* memlimits — memory limits for tasks inside a process.
 *
 * Allocations are sampled as a Poisson process over allocated bytes (mean
 * gap S bytes, the sample interval).  Each sample is credited to every task
 * running on the allocating thread; a task whose allocation limit, the global
 * memory limit or its cancellation token is reached is interrupted.  See
 * memlimits(3) and docs/statistics.md for the guarantees. */
#ifndef MEMLIMITS_H
#define MEMLIMITS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(MEMLIMITS_BUILDING) && defined(__GNUC__)
#define ML_EXPORT __attribute__((visibility("default")))
#else
#define ML_EXPORT
#endif

#define ML_VERSION_MAJOR 0
#define ML_VERSION_MINOR 1
#define ML_VERSION_PATCH 0
#define ML_VERSION_STRING "0.1.0"

typedef enum ml_status {
	ML_OK = 0, /* the task ran to its end, no limit reached        */
	ML_ALLOC_LIMIT = 1, /* interrupted: its allocation limit was reached */
	ML_GLOBAL_LIMIT =
	    2, /* interrupted: the global memory limit was exceeded */
	ML_CANCELLED = 3, /* interrupted: its token was set */
	ML_EINVAL = -1, /* bad argument: nothing ran                         */
	ML_ENOMEM = -2, /* the library could not get memory it needed        */
} ml_status;

typedef enum ml_delivery {
	ML_DELIVER_JUMP = 0, /* longjmp back to ml_run (default) */
	ML_DELIVER_FAIL =
	    1, /* the task's further allocations fail: NULL/ENOMEM  */
	ML_DELIVER_FLAG =
	    2, /* only the flag: the task polls ml_is_interrupted() */
} ml_delivery;

typedef struct ml_token ml_token; /* opaque */

typedef struct ml_limits {
	uint64_t alloc_bytes; /* allocation limit; ML_NO_LIMIT = none */
	bool global;          /* subject to the global memory limit   */
	ml_token *token;      /* interrupt when set; NULL = none      */
	ml_delivery delivery;
} ml_limits;

#define ML_NO_LIMIT UINT64_MAX
/* No limits, not global, no token, jump delivery. */
#define ML_LIMITS_INIT                                    \
	{                                                 \
		ML_NO_LIMIT, false, NULL, ML_DELIVER_JUMP \
	}

typedef struct ml_outcome {
	ml_status status;   /* same value ml_run returns                 */
	void *ret;          /* fn's return value; NULL unless fn returned */
	uint64_t allocated; /* estimated bytes allocated by the task      */
} ml_outcome;

/* ---- Running tasks ---------------------------------------------------- */

ML_EXPORT ml_status ml_run(const ml_limits *limits, void *(*fn)(void *),
                           void *arg, ml_outcome *out);

/* memprof-limits shorthands; delivery is the process default. */
ML_EXPORT ml_status ml_limit_allocations(uint64_t bytes, void *(*fn)(void *),
                                         void *arg, ml_outcome *out);
ML_EXPORT ml_status ml_limit_global_memory(void *(*fn)(void *), void *arg,
                                           ml_outcome *out);
ML_EXPORT ml_status ml_limit_with_token(ml_token *t, void *(*fn)(void *),
                                        void *arg, ml_outcome *out);

/* The delivery the shorthands use (ML_DELIVER_JUMP unless changed here or by
 * MEMLIMITS_DELIVERY=jump|fail|flag). */
ML_EXPORT int ml_set_default_delivery(ml_delivery d);
ML_EXPORT ml_delivery ml_default_delivery(void);

/* ---- Global memory ---------------------------------------------------- */

/* ML_NO_LIMIT = none (default); 0 = always exceeded. */
ML_EXPORT int ml_set_global_memory_limit(uint64_t bytes);
ML_EXPORT uint64_t ml_global_memory_limit(void);
/* Live heap bytes as the library measures them (see memlimits(3)). */
ML_EXPORT uint64_t ml_global_memory_usage(void);

/* ---- Inside a task ---------------------------------------------------- */

ML_EXPORT bool ml_is_interrupted(void);
ML_EXPORT void ml_check(void);
ML_EXPORT void ml_mask(void);
ML_EXPORT void ml_unmask(void);
ML_EXPORT bool ml_is_masked(void);
ML_EXPORT void ml_cleanup_push(void (*fn)(void *), void *arg);
ML_EXPORT void ml_cleanup_pop(bool execute);

/* ---- Tokens ----------------------------------------------------------- */

ML_EXPORT ml_token *ml_token_new(void);
ML_EXPORT void ml_token_set(ml_token *t); /* any thread; async-signal-safe */
ML_EXPORT bool ml_token_is_set(const ml_token *t);
ML_EXPORT void ml_token_free(ml_token *t);

/* ---- Sampling --------------------------------------------------------- */

ML_EXPORT int ml_set_sample_interval(uint64_t bytes); /* >= 1 */
ML_EXPORT uint64_t ml_sample_interval(void);
ML_EXPORT void ml_set_seed(uint64_t seed);

/* ---- Custom allocators ------------------------------------------------ */

/* Feed the sampler and the meter with an allocation of `bytes` made by a
 * custom allocator.  false: this allocation should fail (FAIL delivery). */
ML_EXPORT bool ml_note_alloc(size_t bytes);
ML_EXPORT void ml_note_free(size_t bytes);

/* ---- Documented bounds (pure functions) ------------------------------- */

ML_EXPORT double ml_bound_global(uint64_t n, uint64_t interval);
ML_EXPORT double ml_bound_alloc(uint64_t n, uint64_t limit, uint64_t interval);
ML_EXPORT uint64_t ml_bound_safe_bytes(uint64_t limit, double t,
                                       uint64_t interval);
ML_EXPORT uint64_t ml_bound_limit_for(uint64_t safe, double t,
                                      uint64_t interval);

/* ---- Version ---------------------------------------------------------- */

ML_EXPORT const char *ml_version(void);
ML_EXPORT const char *ml_status_str(ml_status s);

#ifdef __cplusplus
}
#endif
#endif /* MEMLIMITS_H */
