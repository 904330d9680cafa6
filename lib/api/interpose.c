/* The malloc family.  Nothing else in the library knows it exists, and it
 * knows of the layers below only this:
 *  - the sampler's countdown (ml__countdown_take, sampler.h): the fast
 *    path, one subtraction and one branch;
 *  - when that sends an allocation to the slow path, the tasks layer's
 *    one entry, ml__alloc_slow (tasks/slow.c), which decides, makes the
 *    allocator's call and settles;
 *  - the allocator's calls themselves (alloc/family.h: ml__real, the
 *    meter's tails, ml__sampled_lose for realloc's old block), which the
 *    fast path makes inline.
 * ml_note_alloc and ml_note_free are in note.c. */
#include "api/api.h"

#include "alloc/family.h"

#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

static void *enomem(void)
{
	errno = ENOMEM;
	return NULL;
}

/* Each function below: the fast path makes the allocator's call
 * (alloc/family.h); when the countdown sends a request to the slow path,
 * the function hands it to the tasks layer's ml__alloc_slow, out of line
 * (ML__COLD), so that the fast path saves no register for it, and in a
 * tail call, so that the entry file is not returned to. */
static ML__COLD void *malloc_slow(size_t n)
{
	return ml__alloc_slow(ML__CALL_MALLOC, n, 0, n, NULL);
}

ML__API void *malloc(size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
		return malloc_slow(n);
	return ml__malloc_call(n);
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

static ML__COLD void *calloc_slow(size_t a, size_t b, size_t n)
{
	return ml__alloc_slow(ML__CALL_CALLOC, n, a, b, NULL);
}

ML__API void *calloc(size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n))
		return enomem(); /* as glibc: ENOMEM, nothing sampled */
	if (ml__unlikely(ml__countdown_take(n)))
		return calloc_slow(a, b, n);
	return ml__calloc_call(a, b);
}

/* realloc(p, b) is resize(p, n = b, a = 0, b); reallocarray(p, a, b) is
 * resize(p, a * b, a or 1, b or 0) (ml__resize_plain, family.h). */
static ML__COLD void *resize_slow(void *p, size_t n, size_t a, size_t b)
{
	return ml__alloc_slow(ML__CALL_RESIZE, n, a, b, p);
}

ML__API void *realloc(void *p, size_t n)
{
	/* realloc(p, 0) frees p (glibc's REALLOC_ZERO_BYTES_FREES) and
	 * allocates nothing: it carries no sample and is never refused
	 * (ml__alloc_slow). */
	if (ml__unlikely(ml__countdown_take(n)))
		return resize_slow(p, n, 0, n);
	return ml__resize_call(p, n, 0, n);
}

ML__API void *reallocarray(void *p, size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n))
		return ml__real.reallocarray(p, a, b); /* its own error */
	if (ml__unlikely(ml__countdown_take(n)))
		return resize_slow(p, n, a ? a : 1, a ? b : 0);
	return ml__resize_call(p, n, a ? a : 1, a ? b : 0);
}

static ML__COLD void *memalign_slow(size_t align, size_t n)
{
	return ml__alloc_slow(ML__CALL_MEMALIGN, n, align, n, NULL);
}

ML__API void *memalign(size_t align, size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
		return memalign_slow(align, n);
	return ml__memalign_call(align, n);
}

/* aligned_alloc and posix_memalign check their arguments as the allocator
 * underneath does (underlying.c), after sampling: a request they refuse
 * is then settled as a failure, charged to nothing. */
static ML__COLD void *aligned_alloc_slow(size_t align, size_t n)
{
	return ml__alloc_slow(ML__CALL_ALIGNED_ALLOC, n, align, n, NULL);
}

ML__API void *aligned_alloc(size_t align, size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
		return aligned_alloc_slow(align, n);
	return ml__aligned_alloc_call(align, n);
}

static ML__COLD int posix_memalign_slow(void **out, size_t align, size_t n)
{
	/* errno left alone, as the allocators' own */
	return ml__alloc_slow_posix(out, align, n);
}

ML__API int posix_memalign(void **out, size_t align, size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
		return posix_memalign_slow(out, align, n);
	return ml__posix_memalign_call(out, align, n);
}

static ML__COLD void *valloc_slow(size_t n)
{
	return ml__alloc_slow(ML__CALL_VALLOC, n, 0, n, NULL);
}

ML__API void *valloc(size_t n)
{
	if (ml__unlikely(ml__countdown_take(n)))
		return valloc_slow(n);
	return ml__valloc_call(n);
}

static ML__COLD void *pvalloc_slow(size_t n, size_t rounded)
{
	return ml__alloc_slow(ML__CALL_PVALLOC, rounded, 0, n, NULL);
}

ML__API void *pvalloc(size_t n)
{
	/* pvalloc rounds the size up to whole pages: sample what it takes. */
	size_t page = (size_t)getpagesize(), rounded = n;
	if (n <= SIZE_MAX - page)
		rounded = (n + page - 1) & ~(page - 1);
	if (ml__unlikely(ml__countdown_take(rounded)))
		return pvalloc_slow(n, rounded);
	return ml__pvalloc_call(n);
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
