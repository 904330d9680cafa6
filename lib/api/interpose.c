/* The malloc family.  Nothing else in the library knows it exists.
 *
 * Every allocating entry point runs the same fast path: subtract the size
 * from the thread's countdown and branch on the borrow.  Everything else —
 * sampling, tasks, pending interruptions, re-entrancy — lives behind that
 * branch (ml__alloc_slow), and the global meter behind one flag that is
 * only set while a global limit is.  The allocator underneath is reached
 * through alloc/alloc.h (ml__real and the meter's tails). */
#include "api/api.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

/* The countdown subtraction.  True when n >= countdown (it borrowed, or
 * reached 0): the countdown is one more than the bytes that may still be
 * allocated without a sample (tasks.h), so that a countdown of 0 sends
 * even malloc(0) to the slow path (an exact budget of 0 must see it).  An
 * unsigned borrow is taken whatever n is, so even malloc(SIZE_MAX) cannot
 * wrap the countdown into a huge value.  On x86-64 one memory-operand
 * subtraction and one branch (jbe: borrow or zero); gcc would load,
 * subtract and store. */
static inline __attribute__((always_inline)) bool borrow(uint64_t n)
{
#if defined(__x86_64__) && defined(HAVE_ASM_GOTO) && !defined(ML_NO_ASM) && \
    defined(__PIC__)
	_Static_assert(offsetof(struct ml__thread, countdown) == 0,
	               "the asm below subtracts at offset 0");
	__asm__ goto("movq ml__self@gottpoff(%%rip), %%rax\n\t"
	             "subq %0, %%fs:(%%rax)\n\t"
	             "jbe %l[slow]"
	             :
	             : "r"(n)
	             : "rax", "cc", "memory"
	             : slow);
	return false;
slow:
	return true;
#else
	struct ml__thread *t = &ml__self;
	uint64_t c = t->countdown;
	t->countdown = c - n;
	return n >= c;
#endif
}

/* Returns true when the allocation must fail. */
static ML__COLD bool sample_slow(size_t n)
{
	if (n >= ML__PROBE_MIN && ml__refused_anyway(n)) {
		/* Not sampled: give the countdown back what the fast path
		 * took (modulo 2^64, like the subtraction). */
		ml__self.countdown += n;
		ml__self.charged = 0;
		return false;
	}
	return ml__alloc_slow(n) != 0;
}

/* After the real allocator, on the slow path: an allocation that failed
 * anyway (out of memory for glibc) is charged to nothing; one that
 * carried samples is held by the thread's tasks (tasks/held.c). */
static inline void *settled(void *p, size_t n)
{
	if (ml__unlikely(p == NULL))
		ml__alloc_failed(n);
	else if (ml__self.charged && ml__self.charged_samples && ML__HELD_ON)
		ml__held_note(&ml__self, p, ml__self.charged_samples);
	return p;
}

static void *enomem(void)
{
	errno = ENOMEM;
	return NULL;
}

static inline void *malloc_tail_call(size_t n)
{
	return __atomic_load_n(&ml__malloc_tail, __ATOMIC_RELAXED)(n);
}

/* Out of line, so that the fast path saves no register for it. */
static ML__COLD void *malloc_slow(size_t n)
{
	if (sample_slow(n))
		return enomem();
	return settled(malloc_tail_call(n), n);
}

ML__API void *malloc(size_t n)
{
	if (ml__unlikely(borrow(n)))
		return malloc_slow(n);
	return malloc_tail_call(n);
}

ML__API void free(void *p)
{
	__atomic_load_n(&ml__free_tail, __ATOMIC_RELAXED)(p);
}

ML__API void cfree(void *p);
ML__API void cfree(void *p)
{
	free(p);
}

/* Each function below: the fast path calls *_real, the slow path (out of
 * line, so that the fast path saves no register for it) samples, calls
 * *_real and settles a failure. */
static inline void *calloc_real(size_t a, size_t b)
{
	void *p = ml__real.calloc(a, b);
	if (ml__unlikely(ML__METER_ON))
		ml__meter_block(p, 1);
	return p;
}

static ML__COLD void *calloc_slow(size_t a, size_t b, size_t n)
{
	if (sample_slow(n))
		return enomem();
	return settled(calloc_real(a, b), n);
}

ML__API void *calloc(size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n))
		return enomem(); /* as glibc: ENOMEM, nothing sampled */
	if (ml__unlikely(borrow(n)))
		return calloc_slow(a, b, n);
	return calloc_real(a, b);
}

/* realloc(p, b) (a = 0) or reallocarray(p, a, b): the allocator's own,
 * which says what b = 0 means.  n = the bytes asked for. */
static inline void *resize_call(void *p, size_t a, size_t b)
{
	return a ? ml__real.reallocarray(p, a, b) : ml__real.realloc(p, b);
}

static inline void *resize_real(void *p, size_t n, size_t a, size_t b)
{
	uint8_t watch = ML__WATCH;
	if (ml__likely(!watch))
		return resize_call(p, a, b);
	/* The old block's record goes (a new one is made if the new block
	 * carries samples); if realloc fails, the old block stays untracked. */
	if ((watch & ML__WATCH_SAMPLED) && p)
		ml__held_forget(p);
	if (!(watch & ML__WATCH_METER))
		return resize_call(p, a, b);
	int64_t old = p ? (int64_t)ml__chunk_bytes(p) : 0;
	void *q = resize_call(p, a, b);
	if (q)
		ml__meter_add((int64_t)ml__chunk_bytes(q) - old);
	else if (p && n == 0)
		ml__meter_add(-old);
	return q;
}

static ML__COLD void *resize_slow(void *p, size_t n, size_t a, size_t b)
{
	/* realloc(p, 0) frees p: it is never refused (a refusal returns
	 * NULL, which the caller takes for "freed"). */
	if (n && sample_slow(n))
		return enomem(); /* the old block stays valid */
	return settled(resize_real(p, n, a, b), n);
}

ML__API void *realloc(void *p, size_t n)
{
	/* realloc(p, 0) frees p (glibc's REALLOC_ZERO_BYTES_FREES) and
	 * allocates nothing: it carries no sample and is never refused
	 * (resize_slow). */
	if (ml__unlikely(borrow(n)))
		return resize_slow(p, n, 0, n);
	return resize_real(p, n, 0, n);
}

ML__API void *reallocarray(void *p, size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n))
		return ml__real.reallocarray(p, a, b); /* its own error */
	if (ml__unlikely(borrow(n)))
		return resize_slow(p, n, a ? a : 1, a ? b : 0);
	return resize_real(p, n, a ? a : 1, a ? b : 0);
}

static inline void *aligned_real(size_t align, size_t n)
{
	void *p = ml__real.memalign(align, n);
	if (ml__unlikely(ML__METER_ON))
		ml__meter_block(p, 1);
	return p;
}

static ML__COLD void *aligned_slow(size_t align, size_t n)
{
	if (sample_slow(n))
		return enomem();
	return settled(aligned_real(align, n), n);
}

static void *aligned(size_t align, size_t n)
{
	if (ml__unlikely(borrow(n)))
		return aligned_slow(align, n);
	return aligned_real(align, n);
}

ML__API void *memalign(size_t align, size_t n)
{
	return aligned(align, n);
}

/* aligned_alloc and posix_memalign check their arguments as the allocator
 * underneath does (underlying.c), after sampling: a request they refuse
 * is then settled as a failure, charged to nothing. */
static inline void *aligned_alloc_real(size_t align, size_t n)
{
	void *p = ml__real.aligned_alloc(align, n);
	if (ml__unlikely(ML__METER_ON))
		ml__meter_block(p, 1);
	return p;
}

static ML__COLD void *aligned_alloc_slow(size_t align, size_t n)
{
	if (sample_slow(n))
		return enomem();
	return settled(aligned_alloc_real(align, n), n);
}

ML__API void *aligned_alloc(size_t align, size_t n)
{
	if (ml__unlikely(borrow(n)))
		return aligned_alloc_slow(align, n);
	return aligned_alloc_real(align, n);
}

static inline int posix_memalign_real(void **out, size_t align, size_t n)
{
	int rc = ml__real.posix_memalign(out, align, n);
	if (ml__unlikely(ML__METER_ON) && rc == 0)
		ml__meter_block(*out, 1);
	return rc;
}

static ML__COLD int posix_memalign_slow(void **out, size_t align, size_t n)
{
	if (sample_slow(n))
		return ENOMEM; /* errno left alone, as the allocators' own */
	int rc = posix_memalign_real(out, align, n);
	settled(rc == 0 ? *out : NULL, n);
	return rc;
}

ML__API int posix_memalign(void **out, size_t align, size_t n)
{
	if (ml__unlikely(borrow(n)))
		return posix_memalign_slow(out, align, n);
	return posix_memalign_real(out, align, n);
}

static inline void *valloc_real(size_t n)
{
	void *p = ml__real.valloc(n);
	if (ml__unlikely(ML__METER_ON))
		ml__meter_block(p, 1);
	return p;
}

static ML__COLD void *valloc_slow(size_t n)
{
	if (sample_slow(n))
		return enomem();
	return settled(valloc_real(n), n);
}

ML__API void *valloc(size_t n)
{
	if (ml__unlikely(borrow(n)))
		return valloc_slow(n);
	return valloc_real(n);
}

static inline void *pvalloc_real(size_t n)
{
	void *p = ml__real.pvalloc(n);
	if (ml__unlikely(ML__METER_ON))
		ml__meter_block(p, 1);
	return p;
}

static ML__COLD void *pvalloc_slow(size_t n, size_t rounded)
{
	if (sample_slow(rounded))
		return enomem();
	return settled(pvalloc_real(n), rounded);
}

ML__API void *pvalloc(size_t n)
{
	/* pvalloc rounds the size up to whole pages: sample what it takes. */
	size_t page = (size_t)getpagesize(), rounded = n;
	if (n <= SIZE_MAX - page)
		rounded = (n + page - 1) & ~(page - 1);
	if (ml__unlikely(borrow(rounded)))
		return pvalloc_slow(n, rounded);
	return pvalloc_real(n);
}

/* glibc has no __libc_ entry point for it: read its header (or ask the
 * allocator underneath). */
ML__API size_t malloc_usable_size(void *p)
{
	return ml__usable_size(p);
}

/* ---- Custom allocators ------------------------------------------------ */

/* More than INT64_MAX bytes: no address space holds them, and the meter
 * counts in int64_t (the cast made such a note lower the usage). */
static ML__COLD bool note_impossible(size_t bytes)
{
	/* Refused, as malloc refuses an impossible size: no sample, nothing
	 * counted; the countdown gets back what the fast path took. */
	ml__self.countdown += bytes;
	ml__self.charged = 0;
	return false;
}

ML__API bool ml_note_alloc(size_t bytes)
{
	/* Not glibc's memory: nothing to try on glibc.  Any size above
	 * INT64_MAX borrows (a countdown is at most a sample gap, which
	 * sampler.c caps at 2^62), so
	 * the check costs the fast path nothing. */
	if (ml__unlikely(borrow(bytes))) {
		if (ml__unlikely(bytes > (size_t)INT64_MAX))
			return note_impossible(bytes);
		if (ml__alloc_slow(bytes))
			return false;
	}
	if (ml__unlikely(ML__METER_ON))
		ml__meter_add((int64_t)bytes);
	return true;
}

ML__API void ml_note_free(size_t bytes)
{
	/* Above INT64_MAX it matches no noted allocation (those are
	 * refused): ignored. */
	if (ml__unlikely(ML__METER_ON) && bytes <= (size_t)INT64_MAX)
		ml__meter_add(-(int64_t)bytes);
}
