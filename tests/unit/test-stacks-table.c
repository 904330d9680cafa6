/* The table of interned stacks (lib/core/stacks.c): ids are given in the
 * order stacks arrive, 1..16384 (core.h's ML__NSTACKS), each stack keeps
 * its id for good, and only a stack past the last id gets 0 ("[unknown]").
 * Before 0.5 an id was a slot of a linearly probed table of 4096, and a
 * run of taken slots longer than its 64 probes turned stacks away at about
 * 3100: a Python test suite with stack capture on printed [unknown] where
 * its own runaway should have been.  Two threads first intern the same
 * stacks at once: each stack gets one id, whoever claims it.  Linked with
 * the core's convenience library, for the hidden functions. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "../tap/tap.h"

/* The library's own (hidden, but linked into this program). */
uint32_t ml__stack_intern(const uintptr_t *ip, uint32_t depth);
struct stack {
	_Atomic uint32_t ready;
	uint32_t depth;
	uintptr_t ip[64];
};
const struct stack *ml__stack_get(uint32_t id);

#define NSTACKS 16384 /* core.h's ML__NSTACKS */
#define RACED 4000    /* stacks both threads intern at once */
#define DEPTH 3

static uint32_t ids[2][RACED];

/* Stack i: three frames, the first one i's own (an even number, so that
 * no frame has the top bit of a named frame). */
static void frames_of(uint32_t i, uintptr_t *ip)
{
	ip[0] = 0x400000u + 16u * (uintptr_t)i;
	ip[1] = 0x7f0000001000u;
	ip[2] = 0x7f0000002000u;
}

static void *racer(void *arg)
{
	uint32_t *out = arg;
	uintptr_t ip[DEPTH];
	for (uint32_t i = 0; i < RACED; i++) {
		frames_of(i, ip);
		out[i] = ml__stack_intern(ip, DEPTH);
	}
	return NULL;
}

static bool same_frames(uint32_t id, uint32_t i)
{
	uintptr_t ip[DEPTH];
	frames_of(i, ip);
	const struct stack *s = ml__stack_get(id);
	return s && s->depth == DEPTH && memcmp(s->ip, ip, sizeof ip) == 0;
}

int main(void)
{
	pthread_t t[2];
	for (int k = 0; k < 2; k++)
		pthread_create(&t[k], NULL, racer, ids[k]);
	for (int k = 0; k < 2; k++)
		pthread_join(t[k], NULL);
	/* A thread that finds a stack claimed but its id not yet given
	 * gets 0 for that one sample: allowed, and then the other thread's
	 * id is the stack's. */
	uint32_t agree = 0, zero = 0, bad = 0;
	static bool seen[NSTACKS + 1];
	for (uint32_t i = 0; i < RACED; i++) {
		uint32_t a = ids[0][i], b = ids[1][i];
		uint32_t id = a ? a : b;
		if (a && b && a != b)
			bad++;
		else if (!id || seen[id] || id > RACED || !same_frames(id, i))
			bad++;
		else
			seen[id] = true, agree++;
		zero += !a + !b;
	}
	tap_ok(bad == 0 && agree == RACED,
	       "two threads at once: %u stacks, one id each in 1..%u, %u "
	       "answers of 0 while the other was giving it",
	       agree, RACED, zero);
	uintptr_t ip[DEPTH];
	uint32_t fresh = 0, dense = 1;
	for (uint32_t i = RACED; i < NSTACKS; i++) {
		frames_of(i, ip);
		uint32_t id = ml__stack_intern(ip, DEPTH);
		fresh +=
		    id != 0 && id <= NSTACKS && !seen[id] && same_frames(id, i);
		dense &= id == i + 1;
		if (id && id <= NSTACKS)
			seen[id] = true;
	}
	tap_ok(fresh == NSTACKS - RACED && dense,
	       "the next %u stacks get the next ids, up to %u (%u did)",
	       NSTACKS - RACED, NSTACKS, fresh);
	uint32_t again = 0;
	for (uint32_t i = RACED; i < NSTACKS; i++) {
		frames_of(i, ip);
		again += ml__stack_intern(ip, DEPTH) == i + 1;
	}
	tap_is(again, NSTACKS - RACED, "each stack keeps its id");
	frames_of(NSTACKS, ip);
	uint32_t over = ml__stack_intern(ip, DEPTH);
	uint32_t over2 = ml__stack_intern(ip, DEPTH);
	frames_of(NSTACKS + 1, ip);
	uint32_t over3 = ml__stack_intern(ip, DEPTH);
	tap_ok(over == 0 && over2 == 0 && over3 == 0,
	       "a table full: the stacks past it get 0 (%u, %u, %u)", over,
	       over2, over3);
	frames_of(7, ip);
	tap_ok(ml__stack_intern(ip, DEPTH) != 0,
	       "a stack seen before the table filled keeps its id");
	tap_ok(ml__stack_get(0) == NULL && ml__stack_get(NSTACKS + 1) == NULL,
	       "ids 0 and past the table name no stack");
	return tap_done();
}
