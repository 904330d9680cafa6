/* The one place that identifies the allocators: the one underneath, that
 * comes after the library in the lookup order (glibc's, or jemalloc,
 * tcmalloc, mimalloc, or another that exports the family; valgrind's
 * replacement of glibc's), its object and loaded span, the members it
 * lacks, how its block sizes are read, and the requests it refuses; and
 * a malloc in front of ours, which no allocation passes.  All found in one
 * walk over the loaded objects at the first call into it.  The malloc
 * family above (api/interpose.c) calls it through ml__real; the meter
 * reads its block sizes. */
#define _GNU_SOURCE
#include "alloc/alloc.h"
#include "sampler/sampler.h"
#include "util/elf.h"

#include <errno.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
 * using that much memory.  Only the slow path asks (for requests of at
 * least ML__PROBE_MIN): a request that does not borrow carries no sample,
 * so there is nothing to charge. */
bool ml__refused_anyway(size_t n)
{
	int e = errno;
	void *p = ml__real.malloc(n);
	if (p)
		ml__real.free(p);
	errno = e;
	return p == NULL;
}

/* The allocator found: ml__real may wrap it (fault injection), and what
 * is made of its members calls them directly, so that one call faults
 * once. */
static struct ml__real under;

/* ---- glibc's members ---------------------------------------------------
 *
 * glibc's allocator is called through its __libc_* entry points, read
 * from libc's own symbol table (find_glibc; the library finds glibc next
 * only when no
 * object between it and libc defines malloc, tcmalloc's and mimalloc's
 * __libc_* aliases included).  aligned_alloc and posix_memalign have no
 * such entry point: they are made from __libc_memalign with glibc's own
 * checks. */

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

static void *glibc_aligned_alloc(size_t align, size_t n)
{
	if ((align == 0 || (align & (align - 1)) != 0) &&
	    strict_aligned_alloc()) {
		errno = EINVAL;
		return NULL;
	}
	return under.memalign(align, n);
}

/* The alignment must be a power-of-two multiple of sizeof(void *); the
 * error is returned, errno is left alone (as glibc). */
static int memalign_posix(void **out, size_t align, size_t n)
{
	if (align % sizeof(void *) != 0 || align == 0 ||
	    ((align / sizeof(void *)) & (align / sizeof(void *) - 1)) != 0)
		return EINVAL;
	int e = errno;
	void *p = under.memalign(align, n);
	if (!p)
		return ENOMEM;
	errno = e;
	*out = p;
	return 0;
}

/* Members an allocator lacks, made from its aligned allocation (jemalloc
 * has no pvalloc). */
static void *page_valloc(size_t n)
{
	return under.memalign((size_t)getpagesize(), n);
}

static void *page_pvalloc(size_t n)
{
	size_t page = (size_t)getpagesize();
	if (n > SIZE_MAX - page) {
		errno = ENOMEM;
		return NULL;
	}
	return under.memalign(page, n ? (n + page - 1) & ~(page - 1) : page);
}

/* reallocarray: glibc's checks the product, then is realloc. */
static void *mul_reallocarray(void *p, size_t a, size_t b)
{
	size_t n;
	if (__builtin_mul_overflow(a, b, &n)) {
		errno = ENOMEM;
		return NULL;
	}
	return under.realloc(p, n);
}

static void *memalign_aligned_alloc(size_t align, size_t n)
{
	return under.memalign(align, n);
}

/* ---- Which allocator: found at the first call -------------------------
 *
 * The loader binds a program's malloc to the first definition in the
 * global scope; ours comes first, and the allocator we forward to is the
 * next definition after ours in that order (dl_iterate_phdr's, the order
 * of the link maps), as dlsym(RTLD_NEXT) would find it.  dlsym may
 * allocate (its error state), and nothing may be forwarded before the
 * allocator is known: a block from one allocator must never reach another
 * one's free.  So every entry point of ml__real starts as a stub that
 * finds it first, reading the objects' own symbol tables
 * (util/elf.c, ml__elf_symbol), which allocates nothing. */

struct ml__real ml__real;
static _Atomic int resolved; /* 0 no, 1 finding, 2 done */
/* Added to ml__real.usable's answer: one header word under valgrind (see
 * "Block sizes"), 0 for another allocator. */
static size_t usable_pad;
/* The object whose malloc the program calls when it is not ours. */
static const char *in_front;
static const char *kind_name = "glibc", *object_name = "libc.so.6";
static uintptr_t object_start, object_end;
static int (*je_mallctl)(const char *, void *, size_t *, void *, size_t);
static int (*tc_property)(const char *, size_t *);
static size_t (*je_sallocx)(const void *, int);

static size_t jemalloc_size(void *p)
{
	return je_sallocx(p, 0);
}

/* tcmalloc's size query without its wrappers: tc_malloc_size calls
 * MallocExtension::instance() through the PLT, then GetAllocatedSize
 * through the vtable (10 instructions before the 16 of the lookup).  The
 * member is exported; called directly with the instance as `this` (the
 * Itanium ABI: this, then p), once the instance's vtable is known to be
 * TCMallocImplementation's (set in ml__allocator_sizer, off the fast
 * path). */
static size_t (*tc_size_member)(void *self, const void *p);
static void *(*tc_instance)(void);
static const void *tc_vtable;

struct search {
	uintptr_t self;
	bool past_self;
	bool found;
	bool valgrind;
	struct ml__real r;
	const char *kind;
	const char *front;
	size_t (*glibc_usable)(void *);
};

/* valgrind's heap tools (memcheck, helgrind, drd, massif, dhat) preload
 * vgpreload_<tool>-*.so and replace glibc's allocator below us (with
 * --soname-synonyms=somalloc=nouserintercepts ours stays on top); callgrind
 * and cachegrind preload only vgpreload_core and keep glibc's. */
static bool valgrind_heap_tool(const char *name)
{
	const char *p = strstr(name, "/vgpreload_");
	return p && strncmp(p, "/vgpreload_core", 15) != 0;
}

#define SYM(info, name) ml__elf_symbol((info), (name))

/* The loader binds a call to malloc to the first definition in link-map
 * order (the global scope): one before ours is the malloc in front; the
 * first after ours is the allocator underneath. */
static int visit(struct dl_phdr_info *info, size_t size, void *data)
{
	struct search *s = data;
	uintptr_t lo, hi;
	const char *name = info->dlpi_name ? info->dlpi_name : "";
	(void)size;
	s->valgrind |= valgrind_heap_tool(name);
	if (ml__elf_span(info, s->self, &lo, &hi)) {
		s->past_self = true;
		return 0;
	}
	void *m = SYM(info, "malloc");
	if (!m)
		return 0;
	if (!s->past_self) {
		/* A program built without PIE that takes malloc's address
		 * holds an undefined symbol with an address (a canonical
		 * PLT entry): ml__elf_symbol defines no such malloc. */
		if (!s->front)
			s->front = name[0] ? name : "the program";
		return 0;
	}
	s->found = true;
	object_start = lo;
	object_end = hi;
	object_name = name[0] ? name : "the program";
	if (SYM(info, "gnu_get_libc_version")) {
		s->kind = "glibc";
		*(void **)&s->glibc_usable = SYM(info, "malloc_usable_size");
		return 1;
	}
	struct ml__real *r = &s->r;
	*(void **)&r->malloc = m;
	*(void **)&r->calloc = SYM(info, "calloc");
	*(void **)&r->realloc = SYM(info, "realloc");
	*(void **)&r->reallocarray = SYM(info, "reallocarray");
	*(void **)&r->free = SYM(info, "free");
	*(void **)&r->memalign = SYM(info, "memalign");
	*(void **)&r->valloc = SYM(info, "valloc");
	*(void **)&r->pvalloc = SYM(info, "pvalloc");
	*(void **)&r->aligned_alloc = SYM(info, "aligned_alloc");
	*(void **)&r->posix_memalign = SYM(info, "posix_memalign");
	*(void **)&r->usable = SYM(info, "malloc_usable_size");
	if ((*(void **)&je_sallocx = SYM(info, "sallocx")) &&
	    (*(void **)&je_mallctl = SYM(info, "mallctl"))) {
		s->kind = "jemalloc";
		r->usable = jemalloc_size;
	} else if (SYM(info, "tc_malloc")) {
		s->kind = "tcmalloc";
		*(void **)&tc_property =
		    SYM(info, "MallocExtension_GetNumericProperty");
		*(void **)&tc_size_member = SYM(
		    info, "_ZN22TCMallocImplementation16GetAllocatedSizeEPKv");
		*(void **)&tc_instance =
		    SYM(info, "_ZN15MallocExtension8instanceEv");
		tc_vtable = SYM(info, "_ZTV22TCMallocImplementation");
		void *q = SYM(info, "tc_malloc_size");
		if (q)
			*(void **)&r->usable = q;
	} else if (SYM(info, "mi_malloc")) {
		s->kind = "mimalloc";
		void *q = SYM(info, "mi_usable_size");
		if (q)
			*(void **)&r->usable = q;
	} else {
		s->kind = "other";
	}
	return 1;
}

/* glibc's own entry points.  The library exports the __libc_* names too
 * (api/interpose.c: a program or runtime that calls them directly must
 * not bypass the count), so a reference to them here would bind to ours
 * and recurse: they are read from libc's own symbol table instead, with
 * the allocator (find), allocating nothing. */
static struct ml__real glibc = {
    .reallocarray = mul_reallocarray,
    .aligned_alloc = glibc_aligned_alloc,
    .posix_memalign = memalign_posix,
    .usable = NULL, /* its chunk headers */
};

static void find_glibc(void)
{
	struct ml__real *g = &glibc;
	*(void **)&g->malloc = ml__elf_libc_symbol("__libc_malloc");
	*(void **)&g->calloc = ml__elf_libc_symbol("__libc_calloc");
	*(void **)&g->realloc = ml__elf_libc_symbol("__libc_realloc");
	*(void **)&g->memalign = ml__elf_libc_symbol("__libc_memalign");
	*(void **)&g->valloc = ml__elf_libc_symbol("__libc_valloc");
	*(void **)&g->pvalloc = ml__elf_libc_symbol("__libc_pvalloc");
	*(void **)&g->free = ml__elf_libc_symbol("__libc_free");
	if (!g->malloc || !g->calloc || !g->realloc || !g->memalign ||
	    !g->valloc || !g->pvalloc || !g->free) {
		/* No libc with its allocator loaded: nothing can be
		 * forwarded to, and nothing can go on. */
		static const char m[] = "memlimits: glibc's allocator "
		                        "(__libc_malloc) not found\n";
		ssize_t w = write(2, m, sizeof m - 1);
		(void)w;
		abort();
	}
}

/* ---- Another allocator's own mappings ---------------------------------
 *
 * jemalloc, tcmalloc and mimalloc call the exported mmap (ours,
 * api/mmap.c) to make room for blocks that the meter counts as blocks.
 * Those calls are told by their return address, which lies in the
 * allocator's object (ml__allocator_span, set here when it is found):
 * mmap and mremap leave such a mapping uncounted, and the allocator's
 * munmap, mprotect and purges then find nothing of its own recorded.  The
 * same test covers the calls made inside one of our calls, from its
 * background threads and from its constructor, so its members are called
 * directly: a guard around each (a thread-local depth) cost 14
 * instructions a malloc/free pair for nothing the span does not do
 * (issue 41).  glibc's allocator maps through its internal __mmap and
 * never reaches ours: its span is empty. */
static bool other; /* the allocator underneath is not glibc's */

struct ml__allocator_span ml__allocator_span;

bool ml__allocator_holds_slow(uintptr_t pc)
{
	ml__allocator_resolve();
	return ml__allocator_holds(pc);
}

static bool unusable; /* the allocator found lacks a member we need */

static void find(void)
{
	struct search s = {.self = (uintptr_t)&find};
	find_glibc();
	dl_iterate_phdr(visit, &s);
	in_front = s.front;
	if (!s.found || !strcmp(s.kind, "glibc")) {
		under = glibc;
		/* valgrind: its replacement answers glibc's
		 * malloc_usable_size (a redirection of libc's own). */
		if (s.valgrind && s.glibc_usable) {
			under.usable = s.glibc_usable;
			usable_pad = sizeof(size_t);
		}
		return;
	}
	struct ml__real *r = &s.r;
	/* Without these there is nothing to forward to: glibc's instead,
	 * said at start (ml__allocator_unusable, api/init.c). */
	if (!r->calloc || !r->realloc || !r->free || !r->usable ||
	    (!r->memalign && !r->aligned_alloc)) {
		unusable = true;
		under = glibc;
		return;
	}
	kind_name = s.kind;
	other = true;
	if (!r->memalign)
		r->memalign = r->aligned_alloc;
	if (!r->aligned_alloc)
		r->aligned_alloc = memalign_aligned_alloc;
	if (!r->posix_memalign)
		r->posix_memalign = memalign_posix;
	if (!r->reallocarray)
		r->reallocarray = mul_reallocarray;
	if (!r->valloc)
		r->valloc = page_valloc;
	if (!r->pvalloc)
		r->pvalloc = page_pvalloc;
	under = *r;
}

void ml__allocator_resolve(void)
{
	if (ml__likely(atomic_load_explicit(&resolved, memory_order_acquire) ==
	               2))
		return;
	int expect = 0;
	if (!atomic_compare_exchange_strong(&resolved, &expect, 1)) {
		/* Another thread is finding it (nothing it does allocates). */
		while (atomic_load_explicit(&resolved, memory_order_acquire) !=
		       2)
			;
		return;
	}
	find();
	ml__real = under;
	if (other) {
		/* glibc's mappings never reach us (its span holds libc
		 * itself): only another allocator's. */
		ml__allocator_span.start = object_start;
		ml__allocator_span.end = object_end;
	}
	atomic_store_explicit(&ml__allocator_span.known, true,
	                      memory_order_release);
	atomic_store_explicit(&resolved, 2, memory_order_release);
}

/* The stubs ml__real starts with: each finds the allocator, then calls
 * the member found. */
static void *boot_malloc(size_t n)
{
	ml__allocator_resolve();
	return ml__real.malloc(n);
}
static void *boot_calloc(size_t a, size_t b)
{
	ml__allocator_resolve();
	return ml__real.calloc(a, b);
}
static void *boot_realloc(void *p, size_t n)
{
	ml__allocator_resolve();
	return ml__real.realloc(p, n);
}
static void *boot_reallocarray(void *p, size_t a, size_t b)
{
	ml__allocator_resolve();
	return ml__real.reallocarray(p, a, b);
}
static void *boot_memalign(size_t a, size_t n)
{
	ml__allocator_resolve();
	return ml__real.memalign(a, n);
}
static void *boot_valloc(size_t n)
{
	ml__allocator_resolve();
	return ml__real.valloc(n);
}
static void *boot_pvalloc(size_t n)
{
	ml__allocator_resolve();
	return ml__real.pvalloc(n);
}
static void *boot_aligned_alloc(size_t a, size_t n)
{
	ml__allocator_resolve();
	return ml__real.aligned_alloc(a, n);
}
static int boot_posix_memalign(void **out, size_t a, size_t n)
{
	ml__allocator_resolve();
	return ml__real.posix_memalign(out, a, n);
}
static void boot_free(void *p)
{
	ml__allocator_resolve();
	ml__real.free(p);
}

struct ml__real ml__real = {
    .malloc = boot_malloc,
    .calloc = boot_calloc,
    .realloc = boot_realloc,
    .reallocarray = boot_reallocarray,
    .memalign = boot_memalign,
    .valloc = boot_valloc,
    .pvalloc = boot_pvalloc,
    .aligned_alloc = boot_aligned_alloc,
    .posix_memalign = boot_posix_memalign,
    .free = boot_free,
    .usable = NULL,
};

const char *ml__allocator_kind(void)
{
	ml__allocator_resolve();
	return kind_name;
}

const char *ml__allocator_object(uintptr_t *start, uintptr_t *end)
{
	ml__allocator_resolve();
	if (start)
		*start = object_start;
	if (end)
		*end = object_end;
	return object_name;
}

bool ml__allocator_unusable(void)
{
	ml__allocator_resolve();
	return unusable;
}

/* What the allocator says it has handed out and not taken back, where it
 * says: the meter's starting point.  mimalloc (whose statistics Debian
 * builds without) and another allocator say nothing: the process's
 * resident size then, more than their blocks by the code, stacks and the
 * allocator's own free pages (the safe side for a limit). */
uint64_t ml__allocator_in_use(void)
{
	ml__allocator_resolve();
	if (!strcmp(kind_name, "glibc")) {
		if (usable_pad)
			return 0; /* valgrind: no arena to ask */
#ifdef HAVE_MALLINFO2
		struct mallinfo2 mi = mallinfo2();
		return (uint64_t)mi.uordblks + (uint64_t)mi.hblkhd;
#else
		/* glibc before 2.33: int fields, which wrap past 2 GiB. */
		struct mallinfo mi = mallinfo();
		return (uint64_t)(unsigned)mi.uordblks +
		       (uint64_t)(unsigned)mi.hblkhd;
#endif
	}
	size_t v = 0, len = sizeof v;
	uint64_t epoch = 1;
	if (je_mallctl &&
	    je_mallctl("epoch", NULL, NULL, &epoch, sizeof epoch) == 0 &&
	    je_mallctl("stats.allocated", &v, &len, NULL, 0) == 0)
		return v;
	if (tc_property && tc_property("generic.current_allocated_bytes", &v))
		return v;
	return ml__resident_bytes();
}

/* ---- Fault injection for the tests -------------------------------------
 *
 * In a build configured with --enable-fault-injection, MEMLIMITS_FAULT=libc:N
 * (tests only) swaps in wrappers that make each call fail with probability
 * 1/N, as the allocator does when it is out of memory, so the tests can
 * check that such a failure passes through untouched and is never taken
 * for an interruption. */
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

static void *fail(void)
{
	errno = ENOMEM;
	return NULL;
}

/* Each wrapper calls the allocator found: ml__real points at them. */
static void *fault_malloc(size_t n)
{
	return fault_now() ? fail() : under.malloc(n);
}
static void *fault_calloc(size_t a, size_t b)
{
	return fault_now() ? fail() : under.calloc(a, b);
}
static void *fault_realloc(void *p, size_t n)
{
	/* realloc(p, 0) frees p and needs no memory: it never fails. */
	return n && fault_now() ? fail() : under.realloc(p, n);
}
static void *fault_reallocarray(void *p, size_t a, size_t b)
{
	return a && b && fault_now() ? fail() : under.reallocarray(p, a, b);
}
static void *fault_memalign(size_t a, size_t n)
{
	return fault_now() ? fail() : under.memalign(a, n);
}
static void *fault_valloc(size_t n)
{
	return fault_now() ? fail() : under.valloc(n);
}
static void *fault_pvalloc(size_t n)
{
	return fault_now() ? fail() : under.pvalloc(n);
}
static void *fault_aligned_alloc(size_t a, size_t n)
{
	return fault_now() ? fail() : under.aligned_alloc(a, n);
}
static int fault_posix_memalign(void **out, size_t a, size_t n)
{
	return fault_now() ? ENOMEM : under.posix_memalign(out, a, n);
}

void ml__fault_libc(uint64_t every)
{
	ml__allocator_resolve();
	fault_every = every;
	ml__real.malloc = fault_malloc;
	ml__real.calloc = fault_calloc;
	ml__real.realloc = fault_realloc;
	ml__real.reallocarray = fault_reallocarray;
	ml__real.memalign = fault_memalign;
	ml__real.valloc = fault_valloc;
	ml__real.pvalloc = fault_pvalloc;
	ml__real.aligned_alloc = fault_aligned_alloc;
	ml__real.posix_memalign = fault_posix_memalign;
}
#endif

void *ml__malloc_plain(size_t n)
{
	return ml__real.malloc(n);
}

/* ---- Block sizes ------------------------------------------------------
 *
 * glibc's: its chunk header, read in place.  Another allocator's: its own
 * size query (malloc_usable_size, or a faster one where it exports it).
 * Under valgrind (memcheck replaces glibc's allocator below us, see
 * docs/reliability.md) there is no glibc header to read: block sizes come
 * from the replacement's malloc_usable_size, plus one header word, so the
 * meter keeps its unit.  One mechanism: ml__real.usable, set in find(). */

size_t ml__chunk_bytes(const void *p)
{
	if (ml__unlikely(ml__real.usable != NULL))
		return ml__real.usable((void *)p) + usable_pad;
	return ml__chunk_word(p) & ~(size_t)7;
}

bool ml__allocator_foreign(void)
{
	return ml__real.usable != NULL;
}

/* The cheapest exact size query for the metered tails (meter.c): what
 * ml__chunk_bytes answers, without its tests and its call.  Where a
 * block's bytes need more than one call into the allocator (valgrind's
 * pad), or none (glibc's header), the tails use ml__chunk_bytes. */
void ml__allocator_sizer(struct ml__sizer *s)
{
	ml__allocator_resolve();
	s->query = NULL;
	s->member = NULL;
	s->self = NULL;
	if (ml__real.usable == NULL || usable_pad != 0)
		return;
	if (!strcmp(kind_name, "tcmalloc") && tc_size_member && tc_instance &&
	    tc_vtable) {
		/* Only if the instance is TCMallocImplementation itself (not
		 * a MallocExtension registered by the program): its vtable
		 * pointer points two words into the vtable object (the
		 * offset-to-top and the typeinfo come first). */
		void *self = tc_instance();
		if (self && *(const void *const *)self ==
		                (const void *)((const char *)tc_vtable +
		                               2 * sizeof(void *))) {
			s->member = tc_size_member;
			s->self = self;
			return;
		}
	}
	s->query = ml__real.usable;
}

/* jemalloc keeps, per thread, the bytes it has handed out and taken back
 * since the thread began (thread.allocatedp / thread.deallocatedp: the
 * addresses of the two counters in the thread's own data, updated on its
 * fast paths).  mallctl may initialise jemalloc's control tree and must
 * not run inside the allocator; at a thread's end, after jemalloc's own
 * thread data is torn down, it crashes.  So it is asked once, by the
 * thread that starts the meter, and the answer is kept as two offsets
 * from the thread pointer: jemalloc's thread data is a thread-local of an
 * object loaded at start (preloaded or linked: it is the process's
 * malloc), so it lies in the static TLS block, at the same offset from
 * every thread's pointer (x86-64: just below it).  Where that does not
 * hold, the meter queries each block's size instead. */
bool ml__allocator_thread_counters(intptr_t *allocated, intptr_t *deallocated)
{
#if defined(__x86_64__)
	ml__allocator_resolve();
	if (!je_mallctl || strcmp(kind_name, "jemalloc") != 0)
		return false;
	uint64_t *a = NULL, *d = NULL;
	size_t len = sizeof a;
	if (je_mallctl("thread.allocatedp", &a, &len, NULL, 0) != 0 || !a)
		return false;
	len = sizeof d;
	if (je_mallctl("thread.deallocatedp", &d, &len, NULL, 0) != 0 || !d)
		return false;
	uintptr_t tp;
	__asm__("movq %%fs:0, %0" : "=r"(tp));
	const uintptr_t span = (uintptr_t)1 << 20; /* static TLS, generously */
	if ((uintptr_t)a >= tp || tp - (uintptr_t)a > span ||
	    (uintptr_t)d >= tp || tp - (uintptr_t)d > span)
		return false;
	*allocated = (intptr_t)((uintptr_t)a - tp);
	*deallocated = (intptr_t)((uintptr_t)d - tp);
	return true;
#else
	(void)allocated;
	(void)deallocated;
	return false;
#endif
}

/* Mirrors glibc's musable(): no __libc_ entry point exists for it. */
size_t ml__usable_size(void *p)
{
	if (!p)
		return 0;
	if (ml__unlikely(ml__real.usable != NULL))
		return ml__real.usable(p);
	size_t w = ml__chunk_word(p), size = w & ~(size_t)7;
	if (w & 2) /* mmapped: two header words */
		return size - 2 * sizeof(size_t);
	/* In use iff the next chunk's PREV_INUSE bit is set. */
	const size_t *next =
	    (const size_t *)(const void *)((const char *)p -
	                                   2 * sizeof(size_t) + size);
	return (next[1] & 1) ? size - sizeof(size_t) : 0;
}

/* ---- A malloc in front of ours ----------------------------------------
 *
 * The meter counts the blocks that pass through the library, whichever
 * allocator is under it.  A malloc defined in front of ours (preloaded
 * earlier, or in the program) never reaches us: nothing is seen.  Found
 * in the same walk as the allocator underneath (visit). */
const char *ml__malloc_in_front(void)
{
	ml__allocator_resolve();
	return in_front;
}
