/* The mmap family (issue 34): memory a program maps itself counts as heap
 * and as allocations.  Private, anonymous, writable mappings count while
 * they exist and are writable; private anonymous ones that are not
 * writable (reservations) are tracked, and count once made writable.
 * The records are alloc/ranges.c's, under alloc/mapped.c's lock (held
 * for the update only, never across the system call: issue 41); the
 * bytes go to the meter (ml__meter_mapped), the samples through the
 * tasks layer's pair (ml__alloc_begin / ml__alloc_end) and are held
 * under a key of their own until the bytes go (ml__held_drop).
 *
 * Not counted: file-backed and shared mappings; mappings made by the
 * allocator underneath, told by the caller's pc in its object (inside our
 * calls of it, its threads, its constructor): their blocks are
 * counted as blocks; mappings made while the library itself is busy on
 * the thread; anything mapped without these functions (raw system calls:
 * Go, static binaries; glibc's own allocator and thread stacks, which
 * glibc maps through its internal __mmap, never through the exported
 * name we interpose).  docs/mapped.md says so for users.
 *
 * The system calls go through util's ml__sys_* (the instruction inline on
 * x86-64, syscall(2) elsewhere): never back into these functions.
 *
 * The common case, a whole mapping made and later unmapped whole, is a
 * fast path inline in mmap and munmap (map_counted, munmap): every other
 * case leaves them by a tail call, so that the common one keeps a small
 * frame (issue 34's cost; docs/internals.md, "The fast path"). */
#define _GNU_SOURCE
#include "api/api.h"

#include <errno.h>
#include <stdarg.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

static _Atomic uint64_t keys;

/* A key for a mapping's held record: odd, so never a block's address
 * (blocks are aligned), and spread over the filter's buckets (bits 6 and
 * up, alloc/alloc.h). */
static uintptr_t new_key(void)
{
	uint64_t k = atomic_fetch_add_explicit(&keys, 1, memory_order_relaxed);
	return (uintptr_t)((k + 1) << 6) | 1;
}

__attribute__((constructor(101))) static void mmap_init(void)
{
	atomic_store_explicit(&ml__upcalls.mapped_drop, ml__held_drop,
	                      memory_order_release);
}

_Atomic bool ml__mapped_attribute;
struct ml__mapped_by ml__mapped_by[ML__MAPPED_BY];
struct ml__mapped_refusal ml__mapped_refused;
_Atomic uint64_t ml__mapped_refusals;

/* n counted bytes mapped from pc: added to its object (api.h). */
static ML__COLD void attribute(uintptr_t pc, uint64_t n)
{
	struct ml__object o;
	if (ml__find_object(pc, &o) != 0)
		return;
	for (unsigned i = 0; i < ML__MAPPED_BY; i++) {
		struct ml__mapped_by *b =
		    &ml__mapped_by[(o.start / 4096 + i) % ML__MAPPED_BY];
		uintptr_t was =
		    atomic_load_explicit(&b->obj, memory_order_acquire);
		if (!was &&
		    atomic_compare_exchange_strong(&b->obj, &was, o.start)) {
			/* Ours: the name after (a reader skips a slot with
			 * none yet). */
			atomic_store_explicit(&b->name, o.name,
			                      memory_order_release);
			was = o.start;
		}
		if (was != o.start)
			continue;
		atomic_fetch_add_explicit(&b->bytes, n, memory_order_relaxed);
		atomic_fetch_add_explicit(&b->count, 1, memory_order_relaxed);
		uint64_t l =
		    atomic_load_explicit(&b->largest, memory_order_relaxed);
		while (n > l &&
		       !atomic_compare_exchange_weak(&b->largest, &l, n))
			;
		return;
	}
}

static inline void counted_from(uintptr_t pc, int64_t delta)
{
	if (ml__unlikely(delta > 0) &&
	    ml__unlikely(atomic_load_explicit(&ml__mapped_attribute,
	                                      memory_order_relaxed)))
		attribute(pc, (uint64_t)delta);
}

/* Does this call count?  Not while the library runs on the thread (its
 * own work).  Mappings made by the allocator underneath are told by the
 * caller's pc: only where something would be counted (mmap, mremap); the
 * allocator's munmap and mprotect find nothing of its own recorded. */
static inline bool counting(void)
{
	return ML__MAPPED_ON && !ml__self.busy;
}

static inline uintptr_t page_size(void)
{
#if defined(__x86_64__)
	return 4096; /* the only page size of x86-64 Linux */
#else
	static uintptr_t page;
	if (ml__unlikely(!page))
		page = (uintptr_t)getpagesize();
	return page;
#endif
}

static inline uintptr_t page_up(uintptr_t n)
{
	uintptr_t pg = page_size();
	return (n + pg - 1) & ~(pg - 1);
}

static inline bool misaligned(const void *p)
{
	return ((uintptr_t)p & (page_size() - 1)) != 0;
}

/* The sampling of n bytes about to count. */
struct decision {
	bool begun; /* the slow path ran: settle() must end it */
	uint64_t n, s, unit;
	uintptr_t key; /* of the held record, when s > 0 */
};

/* No task on a live thread and no consumer of every allocation: nothing
 * would read the samples, and skipping them keeps the pair at the system
 * calls and the record (the sampler is memoryless). */
static inline bool idle(const struct ml__thread *t)
{
	return t->state == ML__T_LIVE && !t->top && !ml__hooks_get()->alloc;
}

/* Run mode's floor (ml__map_floor, runmode.c): once a mapping was
 * refused for the heap limit, every mapping past the same point is. */
static inline bool floor_set(void)
{
	return atomic_load_explicit(&ml__map_floor, memory_order_relaxed) !=
	       ML_NO_LIMIT;
}

/* Does sampling n bytes take the slow path (a borrow of the countdown, or
 * the floor to test)?  Not on an idle thread, which skips the countdown. */
static inline bool sampled(uint64_t n)
{
	return n && (ml__unlikely(floor_set()) ||
	             (!idle(&ml__self) && ml__countdown_take(n)));
}

/* What the process really holds (api.h), less `old`: its blocks as
 * counted, or, if more, its resident private memory (mappings committed
 * ahead of use are not held until touched; memory no count sees is) and
 * the IPC_PRIVATE segments it attached (private.c: whole, touched or not;
 * statm counts their pages as shared).  UINT64_MAX where statm cannot be
 * read.  The floor below and run mode's heap_over ask it. */
_Atomic uint64_t ml__shm_private_bytes; /* private.c keeps it */

uint64_t ml__held_really(uint64_t old)
{
	uint64_t r = ml__resident_private();
	if (r == UINT64_MAX)
		return r;
	r += atomic_load_explicit(&ml__shm_private_bytes, memory_order_relaxed);
	uint64_t u = ml__meter_usage(), m = ml__meter_mapped_now();
	u = u > m ? u - m : 0;
	r = r > old ? r - old : 0;
	if (u > old && u - old > r)
		r = u - old; /* the blocks */
	return r;
}

/* The slow path for n bytes sampled() sent there: false when it is
 * refused (a limit, an exact budget, FAIL delivery); may jump (JUMP
 * delivery), before anything is mapped and with no lock held.  d starts
 * empty. */
static bool decide_slow(uint64_t n, struct decision *d)
{
	struct ml__thread *t = &ml__self;
	d->n = n;
	uint64_t floor =
	    atomic_load_explicit(&ml__map_floor, memory_order_relaxed);
	if (floor != ML_NO_LIMIT) {
		/* Past the floor: refused for certain, as RLIMIT_DATA
		 * refuses, not by the luck of a sample.  Else the countdown
		 * sampled() did not take. */
		uint64_t u = ml__meter_usage();
		uint64_t near = floor - floor / 8;
		if ((u > near || n > near - u) &&
		    (n > floor || ml__held_really(0) > floor))
			return false;
		if (idle(t) || !ml__countdown_take(n))
			return true;
	}
	t->mapping = 1;
	int v = ml__alloc_begin(n, NULL);
	t->mapping = 0;
	if (v != 0)
		return false;
	d->begun = true;
	d->s = t->charged ? t->charged_samples : 0;
	d->unit = (uint64_t)t->sampler.interval;
	if (d->s)
		d->key = new_key();
	return true;
}

/* Sample n bytes as an allocation (both of the above). */
static inline bool decide(uint64_t n, struct decision *d)
{
	d->n = n;
	return !sampled(n) || decide_slow(n, d);
}

/* After the system call and before the record (issue 41): a failure
 * takes the charges back; a success publishes the samples' held record
 * under d->key, so that a range's record carrying the key always finds
 * it: an unmap that races the record and removes it gives back what the
 * held record holds (before, the key went into the table first, and an
 * unmap in between dropped nothing from a record made after it, held for
 * good).  Leaves errno alone. */
static void settle_begun(struct decision *d, bool ok)
{
	if (!ok) {
		ml__alloc_end(NULL, d->n);
		return;
	}
	ml__alloc_end(d->key ? (void *)d->key : (void *)d, d->n);
}

static inline void settle(struct decision *d, bool ok)
{
	if (ml__unlikely(d->begun))
		settle_begun(d, ok);
}

/* After the record: the samples no record took (a full table; a commit
 * that changed nothing) stop being held. */
static inline void unheld(const struct decision *d, uint64_t left)
{
	if (ml__unlikely(d->key && left))
		ml__held_drop(d->key, left * d->unit);
}

/* The meter, after the lock; and, once, that the table filled up
 * (alloc/ranges.c: pieces then go uncounted, never counted twice). */
static ML__COLD void say_full(void)
{
	static _Atomic bool said;
	int e = errno;
	if (!atomic_exchange(&said, true))
		ml__diag("the table of mapped ranges is full (%zu ranges): "
		         "some memory the program maps itself is not counted",
		         (size_t)ML__MAPPED_CAP);
	errno = e;
}

static inline void meter(int64_t delta)
{
	if (delta)
		ml__meter_mapped(delta); /* errno kept */
	if (ml__unlikely(ml__mapped_full))
		say_full();
}

/* The library refused a mapping of n bytes (its first is kept for the
 * report): ENOMEM, as the kernel's own refusals. */
static ML__COLD void note_refused(const char *op, uint64_t n, uintptr_t pc)
{
	atomic_fetch_add_explicit(&ml__mapped_refusals, 1,
	                          memory_order_relaxed);
	static _Atomic bool taken;
	if (!atomic_exchange(&taken, true)) {
		ml__mapped_refused.op = op;
		ml__mapped_refused.bytes = n;
		ml__mapped_refused.pc = pc;
		atomic_store_explicit(&ml__mapped_refused.set, true,
		                      memory_order_release);
	}
	errno = ENOMEM;
}

static void *refused(const char *op, uint64_t n, uintptr_t pc)
{
	note_refused(op, n, pc);
	return MAP_FAILED;
}

/* prot and flags in one argument: the fast path's ways out then have six,
 * all in registers, and leave by tail calls. */
#define PF(prot, flags) ((long)(unsigned)(prot) | (long)(flags) << 32)
#define PF_PROT(pf) ((int)(pf))
#define PF_FLAGS(pf) ((int)((pf) >> 32))

/* A table update (alloc/mapped.c's op), made under the table or, on a
 * signal handler whose thread holds the table, queued for that thread
 * to make before it lets go (then taken as made: the queue gives back
 * the samples no record took; a full queue loses the update).  *delta:
 * the counted bytes it added, for the meter (0 when queued: the owner
 * meters those). */
static struct ml__mapped_done update(const struct ml__mapped_op *op,
                                     int64_t *delta)
{
	struct ml__mapped_done d = {.recorded = true, .left = 0};
	*delta = 0;
	if (ml__unlikely(!ml__mapped_take())) {
		if (!ml__mapped_defer(op))
			d = (struct ml__mapped_done){false, op->s};
		return d;
	}
	struct ml__ranges *R = ml__mapped_ranges();
	if (ml__likely(R != NULL)) {
		uint64_t before = R->counted;
		d = ml__mapped_apply(R, op);
		*delta = (int64_t)(R->counted - before);
	} else {
		d = (struct ml__mapped_done){false, op->s};
	}
	ml__mapped_give();
	return d;
}

/* A new mapping [p, p + n) of `state` at an address the kernel handed
 * out (or MAP_FIXED over what was there) is recorded with its samples
 * after the system call, and the meter told.  A record left at those
 * addresses by an unmap in flight is replaced (the kernel gave the pages
 * out again: they are gone), and that unmap's settle leaves this one
 * alone (it removes only what it claimed).  Returns the samples no record
 * took (all s: a full table). */
static uint64_t record_new(uintptr_t p, uintptr_t n, unsigned state,
                           uintptr_t pc, uintptr_t key, uint64_t s,
                           uint64_t unit)
{
	int64_t delta;
	struct ml__mapped_op op = {.kind = ML__OP_PUT,
	                           .state = (uint8_t)state,
	                           .a = p,
	                           .b = p + n,
	                           .key = key,
	                           .s = s,
	                           .unit = unit};
	uint64_t left = update(&op, &delta).left;
	meter(delta);
	counted_from(pc, delta);
	return left;
}

/* The common mapping made while sampling takes its slow path: sampled,
 * and refused or recorded with its samples. */
static __attribute__((noinline)) void *
map_sampled(void *addr, size_t len, long pf, int fd, off_t off, uintptr_t pc)
{
	int prot = PF_PROT(pf), flags = PF_FLAGS(pf);
	uintptr_t n = page_up(len);
	struct decision d = {0};
	if (!decide_slow(n, &d))
		return refused("mmap", n, pc);
	void *p = ml__sys_mmap(addr, len, prot, flags, fd, off);
	bool ok = p != MAP_FAILED;
	settle(&d, ok);
	if (ok)
		unheld(&d, record_new((uintptr_t)p, n, ML__RANGE_COUNTED, pc,
		                      d.key, d.s, d.unit));
	return p;
}

/* The fast path's way out when the table was held, is not made yet, or
 * [p, p + n) is not a plain gap: the general recording. */
static __attribute__((noinline)) void *map_record(void *p, uintptr_t n,
                                                  uintptr_t pc)
{
	record_new((uintptr_t)p, n, ML__RANGE_COUNTED, pc, 0, 0, 0);
	return p;
}

/* After the fast path counted n more bytes: the meter's work while it
 * runs, and the report's attribution. */
static __attribute__((noinline)) void *map_after(void *p, int64_t m, int64_t n,
                                                 uintptr_t pc)
{
	if (ML__METER_ON)
		ml__meter_mapped_on(m, n); /* errno kept */
	counted_from(pc, n);
	return p;
}

/* The fast path's end: [p, p + n) is recorded (the table still held). */
static inline __attribute__((always_inline)) void *
map_done(void *p, uintptr_t n, uintptr_t pc)
{
	ml__mapped_give_fast();
	int64_t m = ml__meter_mapped_add((int64_t)n);
	if (ml__unlikely(ML__METER_ON ||
	                 atomic_load_explicit(&ml__mapped_attribute,
	                                      memory_order_relaxed)))
		return map_after(p, m, (int64_t)n, pc);
	return p;
}

/* The fast path, a mapping not after the last record: a search, and one
 * record inserted before others (the kernel's top-down placement puts it
 * before them all: ranges.c then moves none), or the general
 * recording. */
static __attribute__((noinline)) void *map_insert(void *p, uintptr_t n,
                                                  uintptr_t pc)
{
	struct ml__ranges *R = &ml__mapped_table;
	uintptr_t a = (uintptr_t)p;
	size_t i = ml__ranges_gap(R, a, a + n);
	if (i == SIZE_MAX) {
		ml__mapped_give();
		return map_record(p, n, pc);
	}
	ml__ranges_insert(R, i, a, a + n, 0, 0, 0);
	return map_done(p, n, pc);
}

static void *map_other(void *addr, size_t len, long pf, int fd, off_t off,
                       uintptr_t pc);

/* The common counted mapping (private, anonymous, writable, at an address
 * of the kernel's choosing), the fast path (issue 34): no sample, one
 * record appended after the others.  Every other case leaves by a tail
 * call, so that the common one keeps a small frame. */
static inline __attribute__((always_inline)) void *
map_counted(void *addr, size_t len, int prot, int flags, int fd, off_t off,
            uintptr_t pc)
{
	if (ml__unlikely(!len || len > SIZE_MAX / 2 || !counting()))
		return ml__sys_mmap(addr, len, prot, flags, fd, off);
	if (ml__unlikely(!atomic_load_explicit(&ml__allocator_span.known,
	                                       memory_order_acquire)))
		return map_other(addr, len, PF(prot, flags), fd, off, pc);
	if (ml__allocator_holds_known(pc))
		return ml__sys_mmap(addr, len, prot, flags, fd, off);
	uintptr_t n = page_up(len);
	if (ml__unlikely(sampled(n)))
		return map_sampled(addr, len, PF(prot, flags), fd, off, pc);
	void *p = ml__sys_mmap(addr, len, prot, flags, fd, off);
	if (ml__unlikely(p == MAP_FAILED))
		return p;
	struct ml__ranges *R = &ml__mapped_table;
	if (ml__unlikely(!ml__mapped_try()))
		return map_record(p, n, pc);
	/* After the last record (the bench's under valgrind): appended.  A
	 * kernel handing out addresses downwards puts it before them all:
	 * map_insert, a search and no record moved. */
	size_t k = R->n;
	if (ml__unlikely(!R->r || k == R->cap)) {
		ml__mapped_give();
		return map_record(p, n, pc);
	}
	if (k && R->r[k - 1].end > (uintptr_t)p)
		return map_insert(p, n, pc);
	R->r[k] = (struct ml__range){.start = (uintptr_t)p,
	                             .end = (uintptr_t)p + n,
	                             .state = ML__RANGE_COUNTED};
	R->n = k + 1;
	R->counted += n;
	return map_done(p, n, pc);
}

/* Reservations and MAP_FIXED (of any kind: it replaces what was there). */
static __attribute__((noinline)) void *
map_other(void *addr, size_t len, long pf, int fd, off_t off, uintptr_t pc)
{
	int prot = PF_PROT(pf), flags = PF_FLAGS(pf);
	if (!len || len > SIZE_MAX / 2 || !counting())
		return ml__sys_mmap(addr, len, prot, flags, fd, off);
	bool fixed = flags & MAP_FIXED;
	unsigned state = 0;
	if ((flags & MAP_ANONYMOUS) && (flags & MAP_TYPE) == MAP_PRIVATE)
		state =
		    prot & PROT_WRITE ? ML__RANGE_COUNTED : ML__RANGE_RESERVED;
	if ((!state && !fixed) || ml__allocator_holds(pc))
		return ml__sys_mmap(addr, len, prot, flags, fd, off);
	uintptr_t n = page_up(len);
	struct decision d = {0};
	if (state == ML__RANGE_COUNTED && !decide(n, &d))
		return refused("mmap", n, pc);
	/* MAP_FIXED replaces what was there: the record after the system
	 * call replaces the old pages' records too.  No lock across the
	 * call: a thread that unmaps what another maps over at the same
	 * moment races in the program already. */
	void *p = ml__sys_mmap(addr, len, prot, flags, fd, off);
	settle(&d, p != MAP_FAILED);
	if (p != MAP_FAILED)
		unheld(&d, record_new((uintptr_t)p, n, state, pc, d.key, d.s,
		                      d.unit));
	return p;
}

/* One test sorts the calls: counted at a fresh address (the fast path),
 * never recorded (file-backed or shared, not MAP_FIXED: straight to the
 * kernel), or the rest. */
static inline __attribute__((always_inline)) void *map(void *addr, size_t len,
                                                       int prot, int flags,
                                                       int fd, off_t off,
                                                       uintptr_t pc)
{
	int kind = flags & (MAP_ANONYMOUS | MAP_TYPE | MAP_FIXED);
	if (ml__likely(kind == (MAP_ANONYMOUS | MAP_PRIVATE))) {
		if (ml__likely(prot & PROT_WRITE))
			return map_counted(addr, len, prot, flags, fd, off, pc);
	} else if (!(kind & MAP_FIXED) && (kind & (MAP_ANONYMOUS | MAP_TYPE)) !=
	                                      (MAP_ANONYMOUS | MAP_PRIVATE)) {
		return ml__sys_mmap(addr, len, prot, flags, fd, off);
	}
	return map_other(addr, len, PF(prot, flags), fd, off, pc);
}

ML__API void *mmap(void *addr, size_t len, int prot, int flags, int fd,
                   off_t off)
{
	return map(addr, len, prot, flags, fd, off,
	           (uintptr_t)__builtin_return_address(0));
}

ML__API void *mmap64(void *addr, size_t len, int prot, int flags, int fd,
                     off64_t off)
{
	return map(addr, len, prot, flags, fd, (off_t)off,
	           (uintptr_t)__builtin_return_address(0));
}

static _Atomic uint32_t tickets;

/* munmap's general case: the records of [addr, addr + len) are claimed
 * under the table, the system call made without it, then the claimed
 * records go (or lose their claim, if the kernel refused).  A mapping
 * the kernel makes at those addresses meanwhile replaces the claimed
 * records and keeps its own.  On a signal handler whose thread holds the
 * table: the system call, then the removal queued for that thread (the
 * table is held across it: nobody else's update comes between). */
static __attribute__((noinline)) int unmap_general(void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr, b = a + page_up(len);
	if (!len || misaligned(addr) || b < a)
		return ml__sys_munmap(addr, len); /* refused: EINVAL */
	uint32_t op;
	while (!(
	    op = atomic_fetch_add_explicit(&tickets, 1, memory_order_relaxed) +
	         1))
		;
	if (!ml__mapped_take()) {
		int r = ml__sys_munmap(addr, len);
		struct ml__mapped_op q = {.kind = ML__OP_PUT, .a = a, .b = b};
		if (r == 0)
			ml__mapped_defer(&q);
		return r;
	}
	struct ml__ranges *R = &ml__mapped_table;
	bool any = R->n != 0;
	if (any)
		ml__ranges_claim(R, a, b, op);
	ml__mapped_give();
	int r = ml__sys_munmap(addr, len);
	if (!any)
		return r;
	int64_t delta = 0;
	if (ml__mapped_take()) {
		uint64_t before = R->counted;
		ml__ranges_unclaim(R, a, b, op, r == 0);
		delta = (int64_t)(R->counted - before);
		ml__mapped_give();
	}
	meter(delta);
	return r;
}

/* The fast path's system call failed after its record went: the kernel
 * kept the pages (munmap changes nothing when it fails), so the record
 * comes back. */
static __attribute__((noinline)) int unmap_undo(uintptr_t a, uintptr_t n, int r)
{
	int e = errno;
	int64_t delta;
	struct ml__mapped_op op = {
	    .kind = ML__OP_PUT, .state = ML__RANGE_COUNTED, .a = a, .b = a + n};
	update(&op, &delta);
	/* The meter never saw the record go. */
	meter(delta - (int64_t)n);
	errno = e;
	return r;
}

/* The meter's work while it runs, after the fast path uncounted -d
 * bytes. */
static __attribute__((noinline)) int unmap_after(int64_t m, int64_t d)
{
	ml__meter_mapped_on(m, d);
	return 0;
}

/* The fast path (issue 34): [addr, addr + len) is the last record, whole,
 * counted, holding no samples (the mapping the fast mmap appended; an
 * unmap in flight that claimed it finds it gone, as it would after its
 * own call): its record goes before the system call, with no
 * search, and comes back if the kernel refuses (unmap_undo); the table
 * is not held across the call.  Every other case leaves by a tail call
 * for the general update (unmap_general).  The table not made yet has
 * n = 0. */
ML__API int munmap(void *addr, size_t len)
{
	if (!counting())
		return ml__sys_munmap(addr, len);
	if (ml__unlikely(!ml__mapped_try()))
		return unmap_general(addr, len);
	struct ml__ranges *R = &ml__mapped_table;
	size_t n = R->n;
	if (!n) {
		ml__mapped_give();
		return ml__sys_munmap(addr, len);
	}
	uintptr_t a = (uintptr_t)addr, b = a + page_up(len);
	const struct ml__range *last = R->r + n - 1;
	if (ml__unlikely(last->start != a || last->end != b || last->samples ||
	                 last->state != ML__RANGE_COUNTED)) {
		ml__mapped_give();
		return unmap_general(addr, len);
	}
	R->n = n - 1;
	R->counted -= b - a;
	ml__mapped_give_fast();
	if (ml__unlikely(ml__sys_munmap(addr, len) != 0))
		return unmap_undo(a, b - a, -1);
	int64_t m = ml__meter_mapped_add(-(int64_t)(b - a));
	if (ml__unlikely(ML__METER_ON))
		return unmap_after(m, -(int64_t)(b - a));
	return 0;
}

/* System calls only these need (util.h has the family's). */
#if defined(__x86_64__) && !defined(ML_NO_ASM)
static inline int sys_pkey_mprotect(void *addr, size_t len, int prot, int pkey)
{
	return (int)ml__sys6(329, (long)addr, (long)len, prot, pkey, 0, 0);
}
static inline int sys_madvise(void *addr, size_t len, int advice)
{
	return (int)ml__sys6(28, (long)addr, (long)len, advice, 0, 0, 0);
}
static inline int sys_msync(void *addr, size_t len, int flags)
{
	return (int)ml__sys6(26, (long)addr, (long)len, flags, 0, 0, 0);
}
#else
#include <sys/syscall.h>
static inline int sys_pkey_mprotect(void *addr, size_t len, int prot, int pkey)
{
	return (int)syscall(SYS_pkey_mprotect, addr, len, prot, pkey);
}
static inline int sys_madvise(void *addr, size_t len, int advice)
{
	return (int)syscall(SYS_madvise, addr, len, advice);
}
static inline int sys_msync(void *addr, size_t len, int flags)
{
	return (int)syscall(SYS_msync, addr, len, flags);
}
#endif

/* mprotect, or pkey_mprotect with key pkey (pk). */
static int sys_protect(void *addr, size_t len, int prot, bool pk, int pkey)
{
	return pk ? sys_pkey_mprotect(addr, len, prot, pkey)
	          : ml__sys_mprotect(addr, len, prot);
}

/* A protection change the kernel refused with errno e after changing
 * part of [a, b) (issue 41): it applies the change VMA by VMA from a and
 * stops at a hole (ENOMEM) or at a mapping that refuses it (EACCES,
 * EPERM), leaving what came before changed.  Returns where the change
 * stops: the first hole (msync finds holes, ENOMEM, and changes nothing
 * with MS_ASYNC: a binary search); for a mapping that refused, the end
 * of the records that lie contiguous from a (ours are private anonymous
 * mappings, which never refuse: the refusing one lies past them, or
 * between them, where the count may then stay with pages that did not
 * change: above the truth, never below).  a: nothing changed (EINVAL). */
static ML__COLD uintptr_t changed_to(uintptr_t a, uintptr_t b, int e)
{
	uintptr_t pg = page_size();
	if (e == ENOMEM) {
		uintptr_t lo = a, hi = b; /* [a, lo) mapped; hi: not known */
		while (hi - lo > pg) {
			uintptr_t mid = lo + ((hi - lo) / 2 & ~(pg - 1));
			if (sys_msync((void *)a, mid - a, MS_ASYNC) == 0)
				lo = mid;
			else
				hi = mid;
		}
		return sys_msync((void *)a, hi - a, MS_ASYNC) == 0 ? hi : lo;
	}
	if (e != EACCES && e != EPERM)
		return a;
	uintptr_t x = a;
	if (ml__mapped_take()) {
		struct ml__ranges *R = ml__mapped_ranges();
		for (size_t i = R ? ml__ranges_find(R, a) : 0;
		     R && i < R->n && R->r[i].start <= x && x < b; i++)
			x = R->r[i].end;
		ml__mapped_give();
	}
	return x < b ? x : b;
}

static int protect(void *addr, size_t len, int prot, bool pk, int pkey,
                   uintptr_t pc)
{
	if (!len || misaligned(addr) || !counting())
		return sys_protect(addr, len, prot, pk, pkey);
	uintptr_t a = (uintptr_t)addr, b = a + page_up(len);
	unsigned state =
	    (prot & PROT_WRITE) ? ML__RANGE_COUNTED : ML__RANGE_RESERVED;
	struct decision d = {0};
	if (state == ML__RANGE_COUNTED) {
		/* A commit: the reserved bytes it makes writable are
		 * sampled (and may be refused) before the system call.  A
		 * handler on a thread that holds the table commits
		 * unsampled (the bytes count). */
		uint64_t k = 0;
		if (ml__mapped_take()) {
			struct ml__ranges *R = ml__mapped_ranges();
			k = R ? ml__ranges_bytes(R, a, b, ML__RANGE_RESERVED)
			      : 0;
			ml__mapped_give();
		}
		if (k && !decide(k, &d)) {
			note_refused(pk ? "pkey_mprotect" : "mprotect", k, pc);
			return -1;
		}
	}
	int r = sys_protect(addr, len, prot, pk, pkey);
	uintptr_t end = b;
	if (ml__unlikely(r != 0)) {
		int e = errno;
		end = changed_to(a, b, e);
		errno = e;
	}
	int64_t delta = 0;
	uint64_t left = 0;
	settle(&d, end > a);
	if (end > a) {
		struct ml__mapped_op op = {.kind = ML__OP_PROTECT,
		                           .state = (uint8_t)state,
		                           .a = a,
		                           .b = end,
		                           .key = d.key,
		                           .s = d.s,
		                           .unit = d.unit};
		left = update(&op, &delta).left;
	}
	meter(delta);
	counted_from(pc, delta);
	unheld(&d, left);
	return r;
}

ML__API int mprotect(void *addr, size_t len, int prot)
{
	return protect(addr, len, prot, false, 0,
	               (uintptr_t)__builtin_return_address(0));
}

/* pkey_mprotect(2) (issue 41): mprotect with a protection key, which
 * commits a reservation as mprotect does; uncounted before. */
ML__API int pkey_mprotect(void *addr, size_t len, int prot, int pkey)
{
	return protect(addr, len, prot, true, pkey,
	               (uintptr_t)__builtin_return_address(0));
}

/* madvise (issue 41): MADV_DONTNEED and MADV_FREE (and MADV_REMOVE,
 * MADV_DONTNEED_LOCKED) give back counted pages that are no longer
 * writable (a runtime that uncommits: PROT_NONE, then madvise, as V8
 * does); writable ones stay counted, as RLIMIT_DATA counts them.  The
 * allocator underneath's calls (jemalloc's purges) and every other
 * advice go straight to the kernel. */
ML__API int madvise(void *addr, size_t len, int advice)
{
	uintptr_t pc = (uintptr_t)__builtin_return_address(0);
	bool gives = advice == MADV_DONTNEED || advice == MADV_FREE ||
	             advice == MADV_REMOVE || advice == 24 /* _LOCKED */;
	if (!gives || !len || misaligned(addr) || !counting() ||
	    ml__allocator_holds(pc))
		return sys_madvise(addr, len, advice);
	int r = sys_madvise(addr, len, advice);
	if (r == 0) {
		int64_t delta;
		uintptr_t a = (uintptr_t)addr;
		struct ml__mapped_op op = {
		    .kind = ML__OP_ADVISE, .a = a, .b = a + page_up(len)};
		update(&op, &delta);
		meter(delta);
	}
	return r;
}

ML__API void *mremap(void *old, size_t oldlen, size_t newlen, int flags, ...)
{
	void *to = NULL;
	if (flags & MREMAP_FIXED) {
		va_list ap;
		va_start(ap, flags);
		to = va_arg(ap, void *);
		va_end(ap);
	}
	uintptr_t pc = (uintptr_t)__builtin_return_address(0);
	if (!newlen || newlen > SIZE_MAX / 2 || oldlen > SIZE_MAX / 2 ||
	    misaligned(old) || !counting() || ml__allocator_holds(pc))
		return ml__sys_mremap(old, oldlen, newlen, flags, to);
	uintptr_t a = (uintptr_t)old, on = page_up(oldlen),
	          nn = page_up(newlen);
	bool keep_old = flags & MREMAP_DONTUNMAP;
	unsigned state = 0;
	if (ml__mapped_take()) {
		struct ml__ranges *R = ml__mapped_ranges();
		state = R ? ml__ranges_state_at(R, a) : 0;
		ml__mapped_give();
	}
	/* The bytes that are new: growth, or all of them when the old
	 * pages stay (MREMAP_DONTUNMAP leaves them mapped, empty). */
	uint64_t grow = keep_old ? nn : nn > on ? nn - on : 0;
	struct decision d = {0};
	if (state == ML__RANGE_COUNTED && grow && !decide(grow, &d))
		return refused("mremap", grow, pc);
	/* No lock across the call: the records follow it after.  (A
	 * mapping another thread makes at the old addresses, and records,
	 * between the two is moved with them: docs/internals.md.) */
	void *p = ml__sys_mremap(old, oldlen, newlen, flags, to);
	uint64_t left = 0;
	int64_t delta = 0;
	settle(&d, p != MAP_FAILED);
	if (p != MAP_FAILED) {
		uintptr_t q = (uintptr_t)p;
		struct ml__mapped_op ops[3];
		unsigned k = 0, grown = 3;
		if (keep_old) {
			grown = k;
			ops[k++] =
			    (struct ml__mapped_op){.kind = ML__OP_PUT,
			                           .state = (uint8_t)state,
			                           .a = q,
			                           .b = q + nn,
			                           .key = d.key,
			                           .s = d.s,
			                           .unit = d.unit};
		} else {
			if (nn < on)
				ops[k++] =
				    (struct ml__mapped_op){.kind = ML__OP_PUT,
				                           .a = a + nn,
				                           .b = a + on};
			ops[k++] =
			    (struct ml__mapped_op){.kind = ML__OP_MOVE,
			                           .a = a,
			                           .b = a + (nn < on ? nn : on),
			                           .to = q};
			if (nn > on) {
				grown = k;
				ops[k++] = (struct ml__mapped_op){
				    .kind = ML__OP_PUT,
				    .state = (uint8_t)state,
				    .a = q + on,
				    .b = q + nn,
				    .key = d.key,
				    .s = d.s,
				    .unit = d.unit};
			}
		}
		if (ml__mapped_take()) {
			struct ml__ranges *R = ml__mapped_ranges();
			uint64_t before = R ? R->counted : 0;
			for (unsigned i = 0; R && i < k; i++) {
				struct ml__mapped_done dn =
				    ml__mapped_apply(R, &ops[i]);
				if (i == grown)
					left = dn.left;
			}
			if (R)
				delta = (int64_t)(R->counted - before);
			ml__mapped_give();
		} else {
			for (unsigned i = 0; i < k; i++)
				if (!ml__mapped_defer(&ops[i]) && i == grown)
					left = ops[i].s;
		}
	}
	meter(delta);
	counted_from(pc, delta);
	unheld(&d, left);
	return p;
}

/* ---- Private memory got by other calls (api/private.c) -----------------
 *
 * sbrk's growth and an IPC_PRIVATE segment's shmat are private memory in
 * effect (issue 41): they count as a mapping of their pages would, with
 * the same decision, refusal, record and settlement as the calls above.
 * make(arg) gets the memory and returns the first of its n counted bytes
 * (page-aligned), or 0 when it failed; it is not called when the bytes
 * are refused (then 0, errno ENOMEM, op in the report).  Not counted
 * (make alone) while the library is busy on the thread or when the call
 * comes from the allocator underneath (tcmalloc's sbrk). */
uintptr_t ml__map_private(uintptr_t n, uintptr_t (*make)(void *), void *arg,
                          const char *op, uintptr_t pc)
{
	if (!n || n > SIZE_MAX / 2 || !counting() || ml__allocator_holds(pc))
		return make(arg);
	struct decision d = {0};
	if (!decide(n, &d)) {
		note_refused(op, n, pc);
		return 0;
	}
	uintptr_t p = make(arg);
	settle(&d, p != 0);
	if (p)
		unheld(&d, record_new(p, n, ML__RANGE_COUNTED, pc, d.key, d.s,
		                      d.unit));
	return p;
}

/* And its release: [a, b) (page-aligned) no longer counts, its samples
 * given back.  Called next to the call that releases it (sbrk before,
 * shmdt after it succeeds), with no lock held across that call. */
void ml__unmap_private(uintptr_t a, uintptr_t b)
{
	if (a >= b || !counting())
		return;
	int64_t delta;
	struct ml__mapped_op op = {.kind = ML__OP_PUT, .a = a, .b = b};
	update(&op, &delta);
	meter(delta);
}
