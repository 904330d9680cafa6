/* ml_note_alloc and ml_note_free: memory a program's own allocator hands
 * out, counted as the malloc family counts its own (the same countdown,
 * the same slow path; no block, so nothing to settle or record). */
#include "api/api.h"

/* More than INT64_MAX bytes: no address space holds them, and the meter
 * counts in int64_t (the cast made such a note lower the usage). */
static ML__COLD bool note_impossible(size_t bytes)
{
	/* Refused, as malloc refuses an impossible size: no sample, nothing
	 * counted; the countdown gets back what the fast path took. */
	ml__countdown += bytes;
	return false;
}

ML__API bool ml_note_alloc(size_t bytes)
{
	/* Not glibc's memory: nothing to try on glibc.  Any size above
	 * INT64_MAX borrows (a countdown is at most a sample gap, which
	 * sampler.c caps at 2^62), so
	 * the check costs the fast path nothing. */
	if (ml__unlikely(ml__countdown_take(bytes))) {
		if (ml__unlikely(bytes > (size_t)INT64_MAX))
			return note_impossible(bytes);
		if (ml__alloc_begin(bytes, NULL))
			return false;
		if (ml__unlikely(ML__METER_ON))
			ml__meter_add((int64_t)bytes);
		ml__alloc_granted(); /* after the meter: a timeline row */
		return true;
	}
	if (ml__unlikely(ML__METER_ON))
		ml__meter_add((int64_t)bytes);
	return true;
}

/* Above INT64_MAX it matches no noted allocation (those are refused):
 * ignored.  Inline: ml_note_free_block runs it on every free of a
 * Python object (a call through the PLT to ml_note_free cost 5
 * instructions there). */
static inline void note_free(size_t bytes)
{
	if (ml__unlikely(ML__METER_ON) && bytes <= (size_t)INT64_MAX)
		ml__meter_add(-(int64_t)bytes);
}

ML__API void ml_note_free(size_t bytes)
{
	note_free(bytes);
}

/* Issue 37: a custom allocator's blocks counted as the malloc family's
 * are, held memory included: the block exists already (its address is
 * the held record's key), so a refusal is the caller's to undo. */
ML__API bool ml_note_alloc_block(void *p, size_t bytes)
{
	if (!p)
		return false;
	if (ml__unlikely(ml__countdown_take(bytes))) {
		if (ml__unlikely(bytes > (size_t)INT64_MAX))
			return note_impossible(bytes);
		if (ml__alloc_begin(bytes, NULL))
			return false;
		/* A sample: p is held by the tasks it was charged to (after
		 * the meter, which the granted hook reads). */
		if (ml__unlikely(ML__METER_ON))
			ml__meter_add((int64_t)bytes);
		ml__alloc_end(p, bytes);
		return true;
	}
	if (ml__unlikely(ML__METER_ON))
		ml__meter_add((int64_t)bytes);
	return true;
}

ML__API void ml_note_free_block(void *p, size_t bytes)
{
	/* The sampled-block filter: five instructions unless p's bucket
	 * holds a sampled block. */
	if (p)
		ml__sampled_lose(p);
	note_free(bytes);
}
