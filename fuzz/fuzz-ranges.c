/* libFuzzer target: the structure of mapped ranges (lib/alloc/ranges.c),
 * driven by a sequence of operations read from the input and checked
 * after each against a map of 64 pages: the records stay sorted and
 * disjoint, the counted bytes are exactly the model's, no sample is made
 * or lost (the records' samples plus those given back are those put in),
 * and a full array (a capacity of 1 to 16, from the input) only ever
 * counts less than the model, never more.  The records start at a slot
 * of the array that the input picks too (free slots before and after
 * them: alloc.h), and never leave the array.
 *
 * Each operation is 4 bytes: kind, first page, pages, and a byte that is
 * the state or the destination page and the samples (kind 1: mprotect to
 * the state, 1 not writable, 2 writable; state 0 is madvise's
 * MADV_DONTNEED, which gives back counted pages made not writable).  Bit 2 of
 * the kind byte sends a put through the inline helpers of the mmap family's
 * fast path first (ml__ranges_add, ml__ranges_remove). */
#include "alloc/alloc.h"

#include <stdlib.h>
#include <string.h>

#define PAGES 64
#define PAGE 4096
#define BASE ((uintptr_t)1 << 30)
#define CHECK(c)                 \
	do {                     \
		if (!(c))        \
			abort(); \
	} while (0)

static uint64_t dropped; /* samples given back through the callback */
static void drop(void *ctx, uintptr_t key, uint64_t weight)
{
	(void)ctx;
	CHECK(key != 0);
	dropped += weight / 7; /* unit 7 below */
}

static uintptr_t at(unsigned page)
{
	return BASE + (uintptr_t)page * PAGE;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ml__range store[16];
	uint8_t model[PAGES] = {0};
	/* Counted pages made not writable since (issue 41: they stay
	 * counted until given back). */
	bool ro[PAGES] = {0};
	if (size < 1)
		return 0;
	size_t cap = 1 + data[0] % 16, front = data[0] / 16 % (cap + 1);
	struct ml__ranges R = {.r = store + front,
	                       .cap = cap - front,
	                       .front = front,
	                       .drop = drop};
	uint64_t put_in = 0;
	dropped = 0;
	bool exact = true; /* no piece lost to a full array yet */
	uintptr_t key = 1;
	for (size_t i = 1; i + 4 <= size; i += 4) {
		unsigned kind = data[i] % 4, a = data[i + 1] % PAGES;
		unsigned n = 1 + data[i + 2] % (PAGES - a), arg = data[i + 3];
		unsigned state = arg % 3, s = arg / 3 % 8;
		key += 2;
		uint64_t lost = R.lost;
		switch (kind) {
		case 0: { /* mmap, MAP_FIXED, munmap (state 0) */
			/* Bit 2 of the kind: the mmap family's inline
			 * helpers first (a counted mapping into a gap, an
			 * unmap of one whole record), ml__ranges_put where
			 * they decline (having changed nothing). */
			bool fast = data[i] & 4, done = false, got = false;
			if (fast && state == ML__RANGE_COUNTED) {
				uint64_t was = R.counted;
				size_t nn = R.n;
				done = got = ml__ranges_add(
				    &R, at(a), at(a + n), key, s, 7);
				CHECK(done ? R.n == nn + 1 &&
				                 R.counted == was + n * PAGE
				           : R.n == nn && R.counted == was);
			} else if (fast && !state) {
				uint64_t rel = R.released;
				done = ml__ranges_remove(&R, at(a), at(a + n));
				CHECK(R.released == rel); /* no samples there */
			}
			if (!done)
				got = ml__ranges_put(&R, at(a), at(a + n),
				                     state, key, s, 7);
			if (got) {
				if (state == ML__RANGE_COUNTED)
					put_in += s;
			} else if (state) {
				CHECK(R.lost > lost);
			}
			memset(model + a, (int)state, n);
			memset(ro + a, 0, n);
			break;
		}
		case 1: { /* mprotect (state 1, 2), madvise (state 0) */
			if (!state) {
				ml__ranges_advise(&R, at(a), at(a + n));
				for (unsigned p = a; p < a + n; p++)
					if (model[p] == ML__RANGE_COUNTED &&
					    ro[p]) {
						model[p] = ML__RANGE_RESERVED;
						ro[p] = false;
					}
				break;
			}
			uint64_t left = ml__ranges_protect(&R, at(a), at(a + n),
			                                   state, key, s, 7);
			CHECK(left <= s);
			if (state == ML__RANGE_COUNTED)
				put_in += s - left;
			else
				CHECK(left == s);
			for (unsigned p = a; p < a + n; p++) {
				if (model[p] == ML__RANGE_COUNTED)
					ro[p] = state != ML__RANGE_COUNTED;
				else if (model[p] && state == ML__RANGE_COUNTED)
					model[p] = ML__RANGE_COUNTED;
			}
			break;
		}
		case 2: { /* mremap's move, to pages clear of the source */
			unsigned to = arg % PAGES;
			if (to + n > PAGES || (to < a + n && a < to + n))
				break;
			ml__ranges_move(&R, at(a), (uintptr_t)n * PAGE, at(to));
			uint8_t tmp[PAGES];
			bool tro[PAGES];
			memcpy(tmp, model + a, n);
			memcpy(tro, ro + a, n);
			memset(model + a, 0, n);
			memset(ro + a, 0, n);
			memcpy(model + to, tmp, n);
			memcpy(ro + to, tro, n);
			break;
		}
		default: { /* the queries */
			uint64_t c = 0;
			for (unsigned p = a; p < a + n; p++)
				c += model[p] == ML__RANGE_COUNTED;
			uint64_t got = ml__ranges_bytes(&R, at(a), at(a + n),
			                                ML__RANGE_COUNTED);
			CHECK(exact ? got == c * PAGE : got <= c * PAGE);
			unsigned st = ml__ranges_state_at(&R, at(a));
			CHECK(exact ? st == model[a] : !st || st == model[a]);
			break;
		}
		}
		exact &= R.lost == lost;
		CHECK(ml__ranges_check(&R));
		CHECK(R.r - R.front == store && R.front + R.cap == cap);
		uint64_t counted = 0, held = 0;
		for (unsigned p = 0; p < PAGES; p++)
			counted += model[p] == ML__RANGE_COUNTED;
		CHECK(exact ? R.counted == counted * PAGE
		            : R.counted <= counted * PAGE);
		for (size_t k = 0; k < R.n; k++) {
			held += R.r[k].samples;
			/* Every record agrees with the model where it lies. */
			for (uintptr_t x = R.r[k].start; x < R.r[k].end;
			     x += PAGE)
				CHECK(model[(x - BASE) / PAGE] ==
				          R.r[k].state &&
				      ro[(x - BASE) / PAGE] == R.r[k].ro);
		}
		CHECK(held + R.released == put_in);
		CHECK(R.released == dropped);
	}
	return 0;
}
