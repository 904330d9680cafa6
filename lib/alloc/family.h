/* The calls of the malloc family into the allocator underneath, with the
 * meter's share of each (alloc.h: ml__real, the tails, ML__WATCH).  Inline,
 * because two callers make them: the fast path (api/interpose.c), where an
 * out-of-line call would cost every allocation, and the slow path
 * (tasks/slow.c, ml__alloc_slow), which makes the call between its decision
 * and its settlement so that a sampled allocation never returns to the
 * entry file in between. */
#ifndef ML_ALLOC_FAMILY_H
#define ML_ALLOC_FAMILY_H

#include "alloc/alloc.h"

#include <errno.h>

#pragma GCC visibility push(hidden)

/* One request of the family, as the slow path carries it.  `n` is the
 * bytes sampled and decided on (pvalloc's rounded up to pages), `a` and
 * `b` the arguments the allocator gets. */
enum ml__call_kind {
	ML__CALL_MALLOC,         /* malloc(b) */
	ML__CALL_CALLOC,         /* calloc(a, b) */
	ML__CALL_RESIZE,         /* realloc(old, b) (a = 0), reallocarray */
	ML__CALL_MEMALIGN,       /* memalign(a, b) */
	ML__CALL_ALIGNED_ALLOC,  /* aligned_alloc(a, b) */
	ML__CALL_POSIX_MEMALIGN, /* posix_memalign(out, a, b) */
	ML__CALL_VALLOC,         /* valloc(b) */
	ML__CALL_PVALLOC,        /* pvalloc(b) */
};
struct ml__call {
	enum ml__call_kind kind;
	size_t n, a, b;
	void *old;  /* ML__CALL_RESIZE: the block resized */
	void **out; /* ML__CALL_POSIX_MEMALIGN: where the block goes */
	int rc;     /* ML__CALL_POSIX_MEMALIGN: its answer */
};

static inline void *ml__malloc_call(size_t n)
{
	return __atomic_load_n(&ml__malloc_tail, __ATOMIC_RELAXED)(n);
}

/* A block the allocator made without the tails: the meter counts it. */
static inline void *ml__metered(void *p)
{
	if (ml__unlikely(ML__METER_ON))
		ml__meter_block(p, 1);
	return p;
}

static inline void *ml__calloc_call(size_t a, size_t b)
{
	return ml__metered(ml__real.calloc(a, b));
}

/* realloc(p, b) (a = 0) or reallocarray(p, a, b): the allocator's own,
 * which says what b = 0 means.  n = the bytes asked for. */
static inline void *ml__resize_plain(void *p, size_t a, size_t b)
{
	return a ? ml__real.reallocarray(p, a, b) : ml__real.realloc(p, b);
}

static inline void *ml__resize_call(void *p, size_t n, size_t a, size_t b)
{
	uint8_t watch = ML__WATCH;
	if (ml__likely(!watch))
		return ml__resize_plain(p, a, b);
	/* The old block's record goes (a new one is made if the new block
	 * carries samples); if realloc fails, the old block stays untracked. */
	if ((watch & ML__WATCH_SAMPLED) && p)
		ml__sampled_lose(p);
	if (!(watch & ML__WATCH_METER))
		return ml__resize_plain(p, a, b);
	int64_t old = ml__meter_resize_old(p);
	void *q = ml__resize_plain(p, a, b);
	ml__meter_resized(q, old, p && n == 0);
	return q;
}

static inline void *ml__memalign_call(size_t align, size_t n)
{
	return ml__metered(ml__real.memalign(align, n));
}

static inline void *ml__aligned_alloc_call(size_t align, size_t n)
{
	return ml__metered(ml__real.aligned_alloc(align, n));
}

static inline int ml__posix_memalign_call(void **out, size_t align, size_t n)
{
	int rc = ml__real.posix_memalign(out, align, n);
	if (ml__unlikely(ML__METER_ON) && rc == 0)
		ml__meter_block(*out, 1);
	return rc;
}

static inline void *ml__valloc_call(size_t n)
{
	return ml__metered(ml__real.valloc(n));
}

static inline void *ml__pvalloc_call(size_t n)
{
	return ml__metered(ml__real.pvalloc(n));
}

/* Make the call c describes: the block, or NULL (posix_memalign: its
 * answer in c->rc, and NULL unless it is 0). */
static inline void *ml__family_call(struct ml__call *c)
{
	switch (c->kind) {
	case ML__CALL_MALLOC:
		return ml__malloc_call(c->b);
	case ML__CALL_CALLOC:
		return ml__calloc_call(c->a, c->b);
	case ML__CALL_RESIZE:
		return ml__resize_call(c->old, c->n, c->a, c->b);
	case ML__CALL_MEMALIGN:
		return ml__memalign_call(c->a, c->b);
	case ML__CALL_ALIGNED_ALLOC:
		return ml__aligned_alloc_call(c->a, c->b);
	case ML__CALL_POSIX_MEMALIGN:
		c->rc = ml__posix_memalign_call(c->out, c->a, c->b);
		return c->rc == 0 ? *c->out : NULL;
	case ML__CALL_VALLOC:
		return ml__valloc_call(c->b);
	case ML__CALL_PVALLOC:
		return ml__pvalloc_call(c->b);
	}
	return NULL;
}

#pragma GCC visibility pop

#endif
