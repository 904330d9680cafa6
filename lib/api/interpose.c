/* The malloc family.  Nothing else in the library knows it exists, and it
 * knows of the layers below only this:
 *  - the sampler's countdown (ml__countdown_take, sampler.h): the fast
 *    path, one subtraction and one branch;
 *  - when that sends an allocation to the slow path, the tasks layer's
 *    one pair around the real allocation: ml__alloc_begin(n, old) decides,
 *    ml__alloc_end(p, n) settles (tasks/slow.c);
 *  - the allocator underneath through alloc/alloc.h: ml__real, the
 *    meter's tails and hooks, ml__sampled_lose for realloc's old block.
 * ml_note_alloc and ml_note_free are in note.c. */
#include "api/api.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

/* The slow path's first step, for a request the fast path sent there:
 * true when it must fail.  A request of at least ML__PROBE_MIN that the
 * allocator refuses anyway (underlying.c) carries no sample: the
 * countdown gets its n back (modulo 2^64, like the subtraction) and the
 * request goes on unseen, settled by nobody (*unseen).  Everything else is
 * the tasks layer's to decide. */
static inline bool begin(size_t n, const void *replacing, bool *unseen)
{
	if (n >= ML__PROBE_MIN && ml__refused_anyway(n)) {
		ml__countdown += n;
		*unseen = true;
		return false;
	}
	*unseen = false;
	return ml__alloc_begin(n, replacing) != 0;
}

/* After the real allocator, on the slow path. */
static inline void *end(void *p, size_t n, bool unseen)
{
	return unseen ? p : ml__alloc_end(p, n);
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
	bool unseen;
	if (begin(n, NULL, &unseen))
		return enomem();
	return end(malloc_tail_call(n), n, unseen);
}

ML__API void *malloc(size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
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
	bool unseen;
	if (begin(n, NULL, &unseen))
		return enomem();
	return end(calloc_real(a, b), n, unseen);
}

ML__API void *calloc(size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n))
		return enomem(); /* as glibc: ENOMEM, nothing sampled */
	if (ml__unlikely(ml__countdown_take(n)))
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
		ml__sampled_lose(p);
	if (!(watch & ML__WATCH_METER))
		return resize_call(p, a, b);
	int64_t old = ml__meter_resize_old(p);
	void *q = resize_call(p, a, b);
	ml__meter_resized(q, old, p && n == 0);
	return q;
}

static ML__COLD void *resize_slow(void *p, size_t n, size_t a, size_t b)
{
	/* realloc(p, 0) frees p: it is never refused (a refusal returns
	 * NULL, which the caller takes for "freed"). */
	bool unseen = true;
	if (n) {
		/* The heap after this realloc holds n bytes, not the old
		 * block's plus n: the heap limit checks that (git's buffer
		 * grown by half at 1.5 x its peak was refused for old + new,
		 * which the meter never counts).  The held limits likewise
		 * see what realloc changes: the new block comes as the old
		 * one goes (tasks/held.c, ml__held_after). */
		if (p && ML__METER_ON)
			ml__meter_self.resizing = ml__chunk_bytes(p);
		bool no = begin(n, p, &unseen);
		ml__meter_self.resizing = 0;
		if (no)
			return enomem(); /* the old block stays valid */
	}
	return end(resize_real(p, n, a, b), n, unseen);
}

ML__API void *realloc(void *p, size_t n)
{
	/* realloc(p, 0) frees p (glibc's REALLOC_ZERO_BYTES_FREES) and
	 * allocates nothing: it carries no sample and is never refused
	 * (resize_slow). */
	if (ml__unlikely(ml__countdown_take(n)))
		return resize_slow(p, n, 0, n);
	return resize_real(p, n, 0, n);
}

ML__API void *reallocarray(void *p, size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n))
		return ml__real.reallocarray(p, a, b); /* its own error */
	if (ml__unlikely(ml__countdown_take(n)))
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
	bool unseen;
	if (begin(n, NULL, &unseen))
		return enomem();
	return end(aligned_real(align, n), n, unseen);
}

static void *aligned(size_t align, size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
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
	bool unseen;
	if (begin(n, NULL, &unseen))
		return enomem();
	return end(aligned_alloc_real(align, n), n, unseen);
}

ML__API void *aligned_alloc(size_t align, size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
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
	bool unseen;
	if (begin(n, NULL, &unseen))
		return ENOMEM; /* errno left alone, as the allocators' own */
	int rc = posix_memalign_real(out, align, n);
	end(rc == 0 ? *out : NULL, n, unseen);
	return rc;
}

ML__API int posix_memalign(void **out, size_t align, size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
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
	bool unseen;
	if (begin(n, NULL, &unseen))
		return enomem();
	return end(valloc_real(n), n, unseen);
}

ML__API void *valloc(size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
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
	bool unseen;
	if (begin(rounded, NULL, &unseen))
		return enomem();
	return end(pvalloc_real(n), rounded, unseen);
}

ML__API void *pvalloc(size_t n)
{
	/* pvalloc rounds the size up to whole pages: sample what it takes. */
	size_t page = (size_t)getpagesize(), rounded = n;
	if (n <= SIZE_MAX - page)
		rounded = (n + page - 1) & ~(page - 1);
	if (ml__unlikely(ml__countdown_take(rounded)))
		return pvalloc_slow(n, rounded);
	return pvalloc_real(n);
}

/* glibc has no __libc_ entry point for it: read its header (or ask the
 * allocator underneath). */
ML__API size_t malloc_usable_size(void *p)
{
	return ml__usable_size(p);
}

/* glibc's public __libc_* entry points are its allocator's own names: a
 * program, a runtime or a wrapper that calls them directly would bypass
 * the family above (1.5 GiB resident under a 256 MiB heap limit, issue
 * 41).  They are the same functions here, exported unversioned like the
 * family (lib/memlimits.map says why: a reference to
 * __libc_malloc@GLIBC_2.2.5 binds only to an unversioned definition or
 * one of that version).  Aliases, not calls: a malloc defined in front of
 * ours that forwards to __libc_malloc (tests/api/malloc-front.c) reaches
 * this body, never its own malloc again.  glibc's own entry points, which
 * the library forwards to, are read from libc's symbol table
 * (alloc/underlying.c).  __libc_reallocarray is GLIBC_PRIVATE, but
 * exported: it is reallocarray. */
#if defined(__clang__)
#define ML__LIBC_ALIAS(name, of) \
	ML__API __typeof__(of) name __attribute__((alias(#of)))
#else /* gcc wants the target's attributes (nothrow, malloc) said too */
#define ML__LIBC_ALIAS(name, of) \
	ML__API __typeof__(of) name __attribute__((alias(#of), copy(of)))
#endif
ML__LIBC_ALIAS(__libc_malloc, malloc);
ML__LIBC_ALIAS(__libc_free, free);
ML__LIBC_ALIAS(__libc_calloc, calloc);
ML__LIBC_ALIAS(__libc_realloc, realloc);
ML__LIBC_ALIAS(__libc_reallocarray, reallocarray);
ML__LIBC_ALIAS(__libc_memalign, memalign);
ML__LIBC_ALIAS(__libc_valloc, valloc);
ML__LIBC_ALIAS(__libc_pvalloc, pvalloc);
