/* The malloc family.  Nothing else in the library knows it exists.
 *
 * Every allocating entry point runs the same fast path: subtract the size
 * from the thread's countdown and branch on the borrow.  Everything else —
 * sampling, tasks, pending interruptions, re-entrancy — lives behind that
 * branch (ml__alloc_slow), and the global meter behind one flag that is
 * only set while a global limit is.  The real allocator is glibc's, called
 * through its exported __libc_* entry points. */
#include "internal.h"
#include "sampler.h"

#include <errno.h>
#include <gnu/libc-version.h>
#include <malloc.h>
#include <stdlib.h>
#include <unistd.h>

#define ML__API __attribute__((visibility("default")))

/* The countdown subtraction.  True when it borrowed (n > countdown): an
 * unsigned borrow is taken whatever n is, so even malloc(SIZE_MAX) cannot
 * wrap the countdown into a huge value.  On x86-64 one memory-operand
 * subtraction and one branch; gcc would load, subtract and store. */
static inline __attribute__((always_inline)) bool borrow(uint64_t n)
{
#if defined(__x86_64__) && defined(HAVE_ASM_GOTO) && !defined(ML_NO_ASM) && \
    defined(__PIC__)
	_Static_assert(offsetof(struct ml__thread, countdown) == 0,
	               "the asm below subtracts at offset 0");
	__asm__ goto("movq ml__self@gottpoff(%%rip), %%rax\n\t"
	             "subq %0, %%fs:(%%rax)\n\t"
	             "jb %l[slow]"
	             :
	             : "r"(n)
	             : "rax", "cc", "memory"
	             : slow);
	return false;
slow:
	return true;
#else
	struct ml__thread *t = &ml__self;
	return __builtin_sub_overflow(t->countdown, n, &t->countdown);
#endif
}

/* ---- Requests the allocator refuses anyway ----------------------------
 *
 * Programs ask for impossible sizes on purpose (malloc(SIZE_MAX / 2) in
 * CPython's tests).  glibc refuses them; charged, one such request would
 * carry 2^63 / S samples and trip every limit.  A failed allocation
 * allocated nothing, so it is charged to nothing, and a request glibc
 * refuses fails exactly as it does without us (its errno).  Only a large
 * request can be refused for its size, so only those are tried on glibc
 * first: at least glibc's largest mmap threshold, glibc serves them with
 * one mmap and gives them back with one munmap (no arena is touched, the
 * dynamic threshold does not move), a cost next to the page faults of
 * using that much memory.  Only the slow path asks: a request that does
 * not borrow carries no sample, so there is nothing to charge. */
#define PROBE_MIN ((size_t)4 * 1024 * 1024 * sizeof(long))

static ML__COLD bool refused_anyway(size_t n)
{
	int e = errno;
	void *p = __libc_malloc(n);
	if (p)
		__libc_free(p);
	errno = e;
	return p == NULL;
}

/* Returns true when the allocation must fail. */
static ML__COLD bool sample_slow(size_t n)
{
	if (n >= PROBE_MIN && refused_anyway(n)) {
		/* Not sampled: give the countdown back what the fast path
		 * took (modulo 2^64, like the subtraction). */
		ml__self.countdown += n;
		ml__self.charged = 0;
		return false;
	}
	return ml__alloc_slow(n) != 0;
}

/* After the real allocator, on the slow path: an allocation that failed
 * anyway (out of memory for glibc) is charged to nothing. */
static inline void *settled(void *p, size_t n)
{
	if (ml__unlikely(p == NULL))
		ml__alloc_failed(n);
	return p;
}

static void *enomem(void)
{
	errno = ENOMEM;
	return NULL;
}

/* ---- The real allocator, and fault injection for the tests ------------
 *
 * Every call into glibc goes through this table.  In a build configured
 * with --enable-fault-injection, MEMLIMITS_FAULT=libc:N (tests only) swaps
 * in wrappers that make each call fail with probability 1/N, as glibc does
 * when it is out of memory, so the tests can check that such a failure
 * passes through untouched and is never taken for an interruption. */
static struct real {
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
} real = {__libc_malloc,   __libc_calloc, __libc_realloc,
          __libc_memalign, __libc_valloc, __libc_pvalloc};

#ifdef ML_FAULT_INJECTION
static uint64_t fault_every;
static _Atomic uint64_t fault_calls;

/* The k-th call fails when the k-th output of splitmix64 (seed 0) is a
 * multiple of N: independent of which function calls and of the pattern
 * of calls (with "every Nth call", a loop of malloc then realloc and an
 * even N fails only the reallocs), and the same faults on every run of a
 * deterministic program. */
static bool fault_now(void)
{
	uint64_t x =
	    atomic_fetch_add_explicit(&fault_calls, 1, memory_order_relaxed) *
	    0x9e3779b97f4a7c15u;
	return ml__splitmix64(&x) % fault_every == 0;
}

/* Each wrapper calls glibc itself: the table points at the wrappers. */
static void *fault_malloc(size_t n)
{
	return fault_now() ? enomem() : __libc_malloc(n);
}
static void *fault_calloc(size_t a, size_t b)
{
	return fault_now() ? enomem() : __libc_calloc(a, b);
}
static void *fault_realloc(void *p, size_t n)
{
	/* realloc(p, 0) frees p and needs no memory: it never fails. */
	return n && fault_now() ? enomem() : __libc_realloc(p, n);
}
static void *fault_memalign(size_t a, size_t n)
{
	return fault_now() ? enomem() : __libc_memalign(a, n);
}
static void *fault_valloc(size_t n)
{
	return fault_now() ? enomem() : __libc_valloc(n);
}
static void *fault_pvalloc(size_t n)
{
	return fault_now() ? enomem() : __libc_pvalloc(n);
}
#endif

static void *malloc_plain(size_t n)
{
	return real.malloc(n);
}

static void *(*malloc_tail)(size_t);

#ifdef ML_FAULT_INJECTION
void ml__fault_libc(uint64_t every)
{
	fault_every = every;
	real = (struct real){fault_malloc,   fault_calloc, fault_realloc,
	                     fault_memalign, fault_valloc, fault_pvalloc};
	if (malloc_tail == __libc_malloc)
		malloc_tail = malloc_plain;
}
#endif

/* glibc's chunk header: the size word sits just before the block, its low
 * three bits are flags (bit 1: the chunk was mmapped). */
static inline size_t chunk_word(const void *p)
{
	return ((const size_t *)p)[-1];
}

/* Under valgrind (memcheck replaces glibc's allocator below us, see
 * docs/reliability.md) there is no glibc header to read: block sizes come
 * from the replacement's malloc_usable_size, plus one header word, so the
 * meter keeps its unit. */
static size_t (*foreign_usable)(void *);

size_t ml__chunk_bytes(const void *p)
{
	if (ml__unlikely(foreign_usable != NULL))
		return foreign_usable((void *)p) + sizeof(size_t);
	return chunk_word(p) & ~(size_t)7;
}

static inline void meter(const void *p, int sign)
{
	if (p)
		ml__meter_add(sign * (int64_t)ml__chunk_bytes(p));
}

/* ---- malloc and free: the hottest pair ---------------------------------
 *
 * Their last step goes through a pointer: glibc's own function while no
 * global limit is set, a metered one while it is.  An indirect jump costs
 * what the jump through the GOT to glibc would, so the meter costs nothing
 * until it is switched on (ml__meter_switch). */

/* Subtract v from one of the thread's meter countdowns; true on borrow.
 * Inline asm for the same reason as borrow(): one memory-operand
 * subtraction and a branch.  volatile: gcc may drop an asm goto with an
 * output otherwise.  Outputs in asm goto need GCC 11 or clang (configure
 * checks). */
#if defined(__x86_64__) && defined(HAVE_ASM_GOTO_OUTPUT) && \
    !defined(ML_NO_ASM) && defined(__PIC__)
#define METER_SUB(field, v)                                                    \
	({                                                                     \
		bool borrowed_ = false;                                        \
		uint64_t tls_;                                                 \
		__asm__ volatile goto(                                         \
		    "movq ml__self@gottpoff(%%rip), %[t]\n\t"                  \
		    "subq %[val], %%fs:%c[off](%[t])\n\t"                      \
		    "jb %l[borrow]"                                            \
		    : [t] "=&r"(tls_)                                          \
		    : [val] "r"((uint64_t)(v)), [off] "i"(offsetof(            \
		                                    struct ml__thread, field)) \
		    : "cc", "memory"                                           \
		    : borrow);                                                 \
		(void)tls_;                                                    \
		if (0) {                                                       \
		borrow:                                                        \
			borrowed_ = true;                                      \
		}                                                              \
		borrowed_;                                                     \
	})
#else
#define METER_SUB(field, v) \
	__builtin_sub_overflow(ml__self.field, (uint64_t)(v), &ml__self.field)
#endif

static ML__COLD void meter_fold(void)
{
	ml__meter_flush(&ml__self);
}

static void *malloc_metered(size_t n)
{
	void *p = real.malloc(n);
	if (ml__likely(p != NULL) &&
	    ml__unlikely(METER_SUB(meter_up, chunk_word(p) & ~(size_t)7)))
		meter_fold();
	return p;
}

static void free_metered(void *p)
{
	if (ml__likely(p != NULL) &&
	    ml__unlikely(METER_SUB(meter_down, chunk_word(p) & ~(size_t)7)))
		meter_fold();
	__libc_free(p);
}

static void *(*malloc_tail)(size_t) = __libc_malloc;
static void (*free_tail)(void *) = __libc_free;

static void *malloc_metered_foreign(size_t n)
{
	void *p = real.malloc(n);
	meter(p, 1);
	return p;
}

static void free_metered_foreign(void *p)
{
	meter(p, -1);
	__libc_free(p);
}

void ml__foreign_allocator(size_t (*usable)(void *))
{
	foreign_usable = usable;
}

void ml__meter_switch(bool on)
{
	void *(*plain)(size_t) =
	    real.malloc == __libc_malloc ? __libc_malloc : malloc_plain;
	void *(*m)(size_t) =
	    foreign_usable ? malloc_metered_foreign : malloc_metered;
	void (*f)(void *) =
	    foreign_usable ? free_metered_foreign : free_metered;
	__atomic_store_n(&malloc_tail, on ? m : plain, __ATOMIC_RELEASE);
	__atomic_store_n(&free_tail, on ? f : __libc_free, __ATOMIC_RELEASE);
}

static inline void *malloc_tail_call(size_t n)
{
	return __atomic_load_n(&malloc_tail, __ATOMIC_RELAXED)(n);
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
	__atomic_load_n(&free_tail, __ATOMIC_RELAXED)(p);
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
	void *p = real.calloc(a, b);
	if (ml__unlikely(ML__METER_ON))
		meter(p, 1);
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

static inline void *realloc_real(void *p, size_t n)
{
	if (ml__likely(!ML__METER_ON))
		return real.realloc(p, n);
	int64_t old = p ? (int64_t)ml__chunk_bytes(p) : 0;
	void *q = real.realloc(p, n);
	if (q)
		ml__meter_add((int64_t)ml__chunk_bytes(q) - old);
	else if (p && n == 0)
		ml__meter_add(-old);
	return q;
}

static ML__COLD void *realloc_slow(void *p, size_t n)
{
	if (sample_slow(n))
		return enomem(); /* the old block stays valid */
	return settled(realloc_real(p, n), n);
}

ML__API void *realloc(void *p, size_t n)
{
	/* realloc(p, 0) frees p (glibc's REALLOC_ZERO_BYTES_FREES) and
	 * allocates nothing, so it carries no sample (0 never borrows). */
	if (ml__unlikely(borrow(n)))
		return realloc_slow(p, n);
	return realloc_real(p, n);
}

ML__API void *reallocarray(void *p, size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n))
		return enomem();
	return realloc(p, n);
}

static inline void *aligned_real(size_t align, size_t n)
{
	void *p = real.memalign(align, n);
	if (ml__unlikely(ML__METER_ON))
		meter(p, 1);
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

/* Does the glibc we forward to reject, in aligned_alloc, an alignment
 * that is not a power of two?  Before 2.38 aligned_alloc is an alias of
 * memalign (any alignment, rounded up; any size); from 2.38 on (ISO C17)
 * such an alignment fails with EINVAL.  Read once from the glibc really
 * loaded (gnu_get_libc_version allocates nothing), not the one built
 * against. */
static bool strict_aligned_alloc(void)
{
	static _Atomic int strict = -1;
	int s = atomic_load_explicit(&strict, memory_order_relaxed);
	if (ml__unlikely(s < 0)) {
		const char *v = gnu_get_libc_version();
		unsigned major = 0, minor = 0;
		for (; *v >= '0' && *v <= '9'; v++)
			major = major * 10 + (unsigned)(*v - '0');
		if (*v == '.')
			for (v++; *v >= '0' && *v <= '9'; v++)
				minor = minor * 10 + (unsigned)(*v - '0');
		s = major > 2 || (major == 2 && minor >= 38);
		atomic_store_explicit(&strict, s, memory_order_relaxed);
	}
	return s;
}

ML__API void *aligned_alloc(size_t align, size_t n)
{
	if (ml__unlikely(align == 0 || (align & (align - 1)) != 0) &&
	    strict_aligned_alloc()) {
		errno = EINVAL; /* as glibc >= 2.38: nothing sampled */
		return NULL;
	}
	return aligned(align, n);
}

ML__API int posix_memalign(void **out, size_t align, size_t n)
{
	/* The alignment must be a power-of-two multiple of sizeof(void *);
	 * the error is returned, errno is left alone (as glibc). */
	if (align % sizeof(void *) != 0 || align == 0 ||
	    ((align / sizeof(void *)) & (align / sizeof(void *) - 1)) != 0)
		return EINVAL;
	void *p = aligned(align, n);
	if (!p)
		return ENOMEM;
	*out = p;
	return 0;
}

static inline void *valloc_real(size_t n)
{
	void *p = real.valloc(n);
	if (ml__unlikely(ML__METER_ON))
		meter(p, 1);
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
	void *p = real.pvalloc(n);
	if (ml__unlikely(ML__METER_ON))
		meter(p, 1);
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

/* Mirrors glibc's musable(): no __libc_ entry point exists for it. */
ML__API size_t malloc_usable_size(void *p)
{
	if (!p)
		return 0;
	if (ml__unlikely(foreign_usable != NULL))
		return foreign_usable(p);
	size_t w = chunk_word(p), size = w & ~(size_t)7;
	if (w & 2) /* mmapped: two header words */
		return size - 2 * sizeof(size_t);
	/* In use iff the next chunk's PREV_INUSE bit is set. */
	const size_t *next =
	    (const size_t *)(const void *)((const char *)p -
	                                   2 * sizeof(size_t) + size);
	return (next[1] & 1) ? size - sizeof(size_t) : 0;
}

/* ---- Custom allocators ------------------------------------------------ */

ML__API bool ml_note_alloc(size_t bytes)
{
	/* Not glibc's memory: nothing to try on glibc. */
	if (ml__unlikely(borrow(bytes)) && ml__alloc_slow(bytes))
		return false;
	if (ml__unlikely(ML__METER_ON))
		ml__meter_add((int64_t)bytes);
	return true;
}

ML__API void ml_note_free(size_t bytes)
{
	if (ml__unlikely(ML__METER_ON))
		ml__meter_add(-(int64_t)bytes);
}
