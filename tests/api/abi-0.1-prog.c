/* A program written and built against the 0.1 header (tests/data/
 * memlimits-0.1.h), linked against the 0.1 names (abi-0.1-stub.c), run
 * against this library (tests/api/test-abi-0.1.sh): 0.1 binaries keep
 * working.  Its ml_outcome is the 0.1 one, 24 bytes: a canary right after
 * it must survive every call. */
#include "memlimits-0.1.h"

#include <stdlib.h>
#include <string.h>

#include "../tap/tap.h"

#define CANARY 0x5a5a5a5a5a5a5a5aull

struct guarded {
	ml_outcome out;
	uint64_t canary[4];
};

static void *hog(void *arg)
{
	(void)arg;
	for (int i = 0; i < 100000; i++) {
		/* Written through a volatile pointer: the pair must not be
		 * optimised away. */
		char *volatile p = malloc(1000);
		if (!p)
			return NULL;
		p[0] = 1;
		free(p);
	}
	return (void *)1;
}

static bool intact(const struct guarded *g)
{
	for (int i = 0; i < 4; i++)
		if (g->canary[i] != CANARY)
			return false;
	return true;
}

static void guard(struct guarded *g)
{
	memset(&g->out, 0xee, sizeof g->out);
	for (int i = 0; i < 4; i++)
		g->canary[i] = CANARY;
}

int main(void)
{
	struct guarded g;
	tap_ok(sizeof(ml_outcome) == 24 && sizeof(ml_limits) == 32,
	       "built with the 0.1 layouts (outcome %zu, limits %zu bytes)",
	       sizeof(ml_outcome), sizeof(ml_limits));

	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	guard(&g);
	ml_status st = ml_run(&l, hog, NULL, &g.out);
	tap_is(st, ML_ALLOC_LIMIT,
	       "ml_run: a JUMP task is stopped at its limit");
	tap_ok(g.out.status == st && g.out.ret == NULL &&
	           g.out.allocated >= (1 << 20) && g.out.allocated < (2 << 20),
	       "ml_run: the 0.1 outcome is filled in (allocated %llu)",
	       (unsigned long long)g.out.allocated);
	tap_ok(intact(&g), "ml_run: nothing written past the 0.1 outcome");

	guard(&g);
	st = ml_limit_allocations(1 << 20, hog, NULL, &g.out);
	tap_ok(st == ML_ALLOC_LIMIT && g.out.status == st && intact(&g),
	       "ml_limit_allocations: stopped, outcome filled, canary intact");

	ml_token *tok = ml_token_new();
	ml_token_set(tok);
	guard(&g);
	st = ml_limit_with_token(tok, hog, NULL, &g.out);
	tap_ok(st == ML_CANCELLED && g.out.status == st && intact(&g),
	       "ml_limit_with_token: cancelled, canary intact");
	ml_token_free(tok);

	tap_is(
	    ml_set_global_memory_limit(ml_global_memory_usage() + (64 << 20)),
	    0, "the 0.1 name of the global limit setter");
	guard(&g);
	st = ml_limit_global_memory(hog, NULL, &g.out);
	tap_ok(st == ML_OK && g.out.ret == (void *)1 && intact(&g),
	       "ml_limit_global_memory: a task under the limit runs to its "
	       "end, canary intact");
	ml_set_global_memory_limit(ML_NO_LIMIT);

	l = (ml_limits)ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	l.delivery = ML_DELIVER_FAIL;
	st = ml_run(&l, hog, NULL, NULL);
	tap_is(st, ML_ALLOC_LIMIT, "ml_run, FAIL delivery, no outcome");
	tap_ok(strcmp(ml_status_str(ML_GLOBAL_LIMIT), "global memory limit "
	                                              "exceeded") == 0,
	       "ml_status_str");
	return tap_done();
}
