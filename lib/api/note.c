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

/* A noted allocation of bytes: the countdown, a sampled one decided by
 * the slow path; the meter; then, when sampled, the granted hook (no
 * block: ml_note_alloc) or the held record keyed by p (ml__alloc_end,
 * which calls the hook too), both after the meter, which they read.
 * Any size above INT64_MAX borrows (a countdown is at most a sample gap,
 * which sampler.c caps at 2^62), so that check costs the fast path
 * nothing. */
static inline bool note_alloc(void *p, size_t bytes)
{
	bool sampled = ml__countdown_take(bytes);
	if (ml__unlikely(sampled)) {
		if (ml__unlikely(bytes > (size_t)INT64_MAX))
			return note_impossible(bytes);
		if (ml__alloc_begin(bytes, NULL))
			return false;
	}
	if (ml__unlikely(ML__METER_ON))
		ml__meter_add((int64_t)bytes);
	if (ml__unlikely(sampled)) {
		if (p)
			ml__alloc_end(p, bytes);
		else
			ml__alloc_granted();
	}
	return true;
}

ML__API bool ml_note_alloc(size_t bytes)
{
	/* Not glibc's memory: nothing to try on glibc. */
	return note_alloc(NULL, bytes);
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
	return p && note_alloc(p, bytes);
}

ML__API void ml_note_free_block(void *p, size_t bytes)
{
	/* The sampled-block filter: five instructions unless p's bucket
	 * holds a sampled block. */
	if (p)
		ml__sampled_lose(p);
	note_free(bytes);
}
