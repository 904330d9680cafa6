/* Layer 1, utilities: the bottom of the library (docs/internals.md,
 * "Layers").  Nothing here knows of sampling, allocators or tasks: locks
 * and their fork registry, our own memory, the one no-stdio writer,
 * diagnostics, parsing and number formatting, the environment, output
 * files, and the loaded-object lookup.  Never installed.
 *
 * Naming: ml_ is public, ml__ is internal but visible across our objects
 * (hidden in the shared object), everything else is static. */
#ifndef ML_UTIL_H
#define ML_UTIL_H

#include "config.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "memlimits.h"
#include "util/parse.h"

/* Every internal declaration is hidden: a reference from another of our
 * objects is then PC-relative, never through the GOT (the fast paths read
 * the allocator table and the meter's pointers). */
#pragma GCC visibility push(hidden)

#define ml__likely(x) __builtin_expect(!!(x), 1)
#define ml__unlikely(x) __builtin_expect(!!(x), 0)
#define ML__HIDDEN __attribute__((visibility("hidden")))
#define ML__COLD __attribute__((cold, noinline))
#define ML__TLS __thread __attribute__((tls_model("initial-exec")))
/* A public function that has several versions (lib/memlimits.map): its
 * code is defined under an internal name, exported as name@@version (the
 * default) or name@version (an older layout, lib/api/compat.c). */
#define ML__VERSIONED __attribute__((visibility("default")))
#define ML__SYMVER_DEFAULT(impl, name, version) \
	__asm__(".symver " #impl ", " #name "@@" version)
#define ML__SYMVER_OLD(impl, name, version) \
	__asm__(".symver " #impl ", " #name "@" version)

/* ---- Locks ------------------------------------------------------------
 *
 * Every lock of the library is a spin lock made with ML__LOCK or ML__POOL,
 * which also add it to the fork registry (forklock.c): the fork handlers
 * hold every registered lock around fork, so that a child never inherits
 * one held by a thread it does not have.  Each layer registers its own
 * locks where it defines them.  They are taken in rank order, then in the
 * order they were registered; code that nests two locks must take them in
 * that order.  tests/concurrency/test-locks.sh rejects any other lock. */
enum ml__lock_rank {
	ML__RANK_MAPPED, /* the mapped ranges (alloc/mapped.c): outermost */
	ML__RANK_UNWIND, /* around a stack walk, which may allocate  */
	ML__RANK_GLOBAL, /* the list of live global tasks; the limit */
	ML__RANK_METER,  /* the meter switch (mallinfo2 under it)    */
	ML__RANK_STATS,  /* run-mode statistics: live list, totals   */
	ML__RANK_HELD,   /* the held-memory table: nothing inside    */
	ML__RANK_POOL,   /* a pool's free list: nothing taken inside */
};
struct ml__lock {
	atomic_flag flag;
};
/* Inline: uncontended, taking and releasing are one atomic exchange and
 * one store (the mmap family takes the ranges' lock on every call, issue
 * 34); a taken lock waits in ml__spin_wait, yielding. */
void ml__spin_wait(struct ml__lock *l);
/* true: taken, never waits (issue 27: lib/shared's publisher; nobody
 * waits on the allocation path). */
static inline bool ml__spin_trylock(struct ml__lock *l)
{
	return !atomic_flag_test_and_set_explicit(&l->flag,
	                                          memory_order_acquire);
}
static inline void ml__spin_lock(struct ml__lock *l)
{
	if (ml__unlikely(!ml__spin_trylock(l)))
		ml__spin_wait(l);
}
static inline void ml__spin_unlock(struct ml__lock *l)
{
	atomic_flag_clear_explicit(&l->flag, memory_order_release);
}
/* Called before main by the constructors ML__LOCK and ML__POOL make. */
void ml__fork_lock_register(struct ml__lock *l, enum ml__lock_rank rank);
void ml__fork_locks_acquire(void); /* fork: prepare */
void ml__fork_locks_release(void); /* fork: parent and child */
/* pthread_atfork, or one diagnostic saying what a fork loses without. */
void ml__atfork(void (*prepare)(void), void (*parent)(void),
                void (*child)(void), const char *lost);

#define ML__CAT_(a, b) a##b
#define ML__CAT(a, b) ML__CAT_(a, b)
#define ML__LOCK_REGISTER_(lockp, rank, fn)                    \
	__attribute__((constructor(101))) static void fn(void) \
	{                                                      \
		ml__fork_lock_register((lockp), (rank));       \
	}
#define ML__LOCK_REGISTER(lockp, rank)  \
	ML__LOCK_REGISTER_(lockp, rank, \
	                   ML__CAT(ml__fork_register_, __COUNTER__))
/* ML__LOCK(static, name, rank) or ML__LOCK(, name, rank): define a lock. */
#define ML__LOCK(storage, name, rank)                      \
	storage struct ml__lock name = {ATOMIC_FLAG_INIT}; \
	ML__LOCK_REGISTER(&name, rank)

/* ML__LOCKS(static, name, n, rank): an array of n locks, each on its own
 * cache line (name[i].lock), all registered. */
struct ml__lock_line {
	struct ml__lock lock;
} __attribute__((aligned(64)));
#define ML__LOCKS_REGISTER_(name, n, rank, fn)                            \
	__attribute__((constructor(101))) static void fn(void)            \
	{                                                                 \
		for (unsigned i_ = 0; i_ < (n); i_++)                     \
			ml__fork_lock_register(&(name)[i_].lock, (rank)); \
	}
#define ML__LOCKS(storage, name, n, rank)     \
	storage struct ml__lock_line name[n]; \
	ML__LOCKS_REGISTER_(name, n, rank,    \
	                    ML__CAT(ml__fork_register_, __COUNTER__))

/* ---- A function and its argument, read inside malloc ------------------
 *
 * A callback the program registers (the refusal guard, the frame source)
 * is read on the slow path of any thread, where no lock may be taken.  A
 * sequence count keeps the pair consistent: the setter, under a lock of
 * its own that the fork handlers hold (so that a child never inherits an
 * odd count), makes the count odd, stores both, and makes it even; a
 * reader retries until it has read both under one even count.  The
 * function is stored as void (*)(void) and cast back by its one user. */
typedef void (*ml__any_fn)(void);
struct ml__fn_pair {
	_Atomic uint64_t seq;
	_Atomic ml__any_fn fn;
	void *_Atomic arg;
};
/* The caller holds the lock that orders its setters. */
static inline void ml__fn_pair_set(struct ml__fn_pair *p, ml__any_fn fn,
                                   void *arg)
{
	uint64_t s = atomic_load_explicit(&p->seq, memory_order_relaxed);
	atomic_store_explicit(&p->seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
	atomic_store_explicit(&p->arg, fn ? arg : NULL, memory_order_relaxed);
	atomic_store_explicit(&p->seq, s + 2, memory_order_release);
}
/* The function (NULL: none) and, in *arg, its argument. */
static inline ml__any_fn ml__fn_pair_get(struct ml__fn_pair *p, void **arg)
{
	for (;;) {
		uint64_t s =
		    atomic_load_explicit(&p->seq, memory_order_acquire);
		if (s & 1)
			continue; /* a setter is between its two stores */
		ml__any_fn fn =
		    atomic_load_explicit(&p->fn, memory_order_relaxed);
		*arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&p->seq, memory_order_relaxed) == s)
			return fn;
	}
}

/* ---- Own memory ------------------------------------------------------- */

/* Fixed-size slots from mmap'd slabs; never touches the malloc family. */
struct ml__pool {
	size_t slot;
	struct ml__lock lock;
	void *free;
};
/* ML__POOL(static, name, slot bytes) or ML__POOL(, name, bytes): define a
 * pool, its lock registered for fork. */
#define ML__POOL(storage, name, slot_bytes)                          \
	storage struct ml__pool name = {.slot = (slot_bytes),        \
	                                .lock = {ATOMIC_FLAG_INIT}}; \
	ML__LOCK_REGISTER(&name.lock, ML__RANK_POOL)
void *ml__pool_get(struct ml__pool *p);
void ml__pool_put(struct ml__pool *p, void *slot);
void *ml__raw_alloc(size_t bytes); /* mmap; NULL on failure */
void ml__raw_free(void *p, size_t bytes);
/* *slot, mapped with ml__raw_alloc(bytes) at the first call (NULL without
 * memory): lock-free, for tables made inside an allocation. */
void *ml__raw_once(void *_Atomic *slot, size_t bytes);
/* The kernel's mmap family, called directly: the library interposes the
 * exported names (api/mmap.c), and neither its own memory nor the
 * interposer's own calls may go through them.  glibc 2.36 exports
 * __mmap, __munmap and __mprotect only as GLIBC_PRIVATE, and no __mremap.
 * Return values and errno as the libc functions'.  On x86-64 the
 * instruction, inline (issue 34: a call of syscall(2) cost as much again
 * as the rest of an idle mmap+munmap pair, and a call of our own kept
 * registers live across it); elsewhere syscall(2) (pool.c).  Either sets
 * errno and returns -1 for the kernel's -4095 .. -1, which no mapping's
 * address can be. */
#if defined(__x86_64__) && !defined(ML_NO_ASM)
/* errno = -r, and -1 (pool.c: out of line, so that the callers' common
 * path makes no call). */
long ml__sys_fail(long r);
static inline long ml__sys6(long nr, long a, long b, long c, long d, long e,
                            long f)
{
	long r;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
	                 : "=a"(r)
	                 : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8),
	                   "r"(r9)
	                 : "rcx", "r11", "memory");
	if (ml__unlikely((unsigned long)r > -4096ul))
		return ml__sys_fail(r);
	return r;
}
/* The x86-64 system call numbers (asm/unistd_64.h). */
static inline void *ml__sys_mmap(void *addr, size_t len, int prot, int flags,
                                 int fd, long off)
{
	return (void *)ml__sys6(9, (long)addr, (long)len, prot, flags, fd, off);
}
static inline int ml__sys_munmap(void *addr, size_t len)
{
	return (int)ml__sys6(11, (long)addr, (long)len, 0, 0, 0, 0);
}
static inline int ml__sys_mprotect(void *addr, size_t len, int prot)
{
	return (int)ml__sys6(10, (long)addr, (long)len, prot, 0, 0, 0);
}
static inline void *ml__sys_mremap(void *old, size_t oldlen, size_t newlen,
                                   int flags, void *to)
{
	return (void *)ml__sys6(25, (long)old, (long)oldlen, (long)newlen,
	                        flags, (long)to, 0);
}
#else
void *ml__sys_mmap(void *addr, size_t len, int prot, int flags, int fd,
                   long off);
int ml__sys_munmap(void *addr, size_t len);
int ml__sys_mprotect(void *addr, size_t len, int prot);
void *ml__sys_mremap(void *old, size_t oldlen, size_t newlen, int flags,
                     void *to);
#endif
/* Fault injection (MEMLIMITS_FAULT=pool, tests only): our own page
 * allocations fail. */
extern bool ml__fault_pool;

/* ---- Diagnostics and the writer --------------------------------------- */

void ml__diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* At start: remember which file stderr is (diag.c).  ml__diag_keep: a
 * report on stderr is due, keep a close-on-exec copy of it above the low
 * descriptors (none is held before).  ml__diag_fd: where diagnostics and a
 * report on stderr go, or -1 (stderr was closed at start, or is another
 * file now and no copy was kept). */
void ml__diag_init(void);
void ml__diag_keep(void);
int ml__diag_fd(void);
/* The no-stdio writer (diag.c): text into buf[cap].  With fd >= 0 a full
 * buffer sends its complete lines to fd (O_APPEND keeps the lines of
 * concurrent processes apart; the first error is kept in err, and nothing
 * more is written); with fd < 0 a text that does not fit is dropped, and
 * so is everything after it (cut). */
struct ml__out {
	char *buf;
	size_t len, cap, line; /* line: end of the last complete line */
	int fd;
	int err;
	bool cut;
};
void ml__out_put(struct ml__out *o, const char *s, size_t n);
void ml__out_puts(struct ml__out *o, const char *s);
void ml__out_u(struct ml__out *o, uint64_t v, unsigned base);
void ml__out_x(struct ml__out *o, uint64_t v);                 /* 0x1f */
void ml__out_ratio(struct ml__out *o, uint64_t v, uint64_t d); /* 12.5 */
/* "67108864 bytes (64.0 MiB)" */
void ml__out_size(struct ml__out *o, uint64_t v);
/* "64.0 MiB", or "12 bytes" below 1 KiB */
void ml__out_human(struct ml__out *o, uint64_t v);
void ml__out_flush(struct ml__out *o, size_t upto); /* buf[0, upto) to fd */
/* write(2) all of buf: 0 or an errno value. */
int ml__out_write(int fd, const char *buf, size_t len);

/* ---- The process: environment, output files (system.c) ---------------- */

/* getenv for MEMLIMITS_*: NULL in a privileged (AT_SECURE) process. */
const char *ml__getenv(const char *name);
/* Output files (report, profile, statistics): paths are kept in our own
 * buffers of this size.  ml__out_open opens for writing with O_CLOEXEC,
 * never blocks, refuses what is neither a regular file, a character device
 * nor the process's own stdout/stderr pipe, and says why (naming `what`
 * and the path) once; -1 then. */
#define ML__PATH_MAX 4096
int ml__out_open(const char *what, const char *path, int flags);
void ml__out_failed(const char *what, const char *path, int err);
/* The path names the process's stderr (/dev/stderr, /dev/fd/2, ...). */
bool ml__names_stderr(const char *path);
const char *ml__strerror(int err); /* no allocation, no locale */
/* This program's path (/proc/self/exe) in buf, or "?"; cap >= 2. */
void ml__self_exe(char *buf, size_t cap);

/* ---- The memory the process may use (memtotal.c) ---------------------- */

/* The smallest memory.max (cgroup v2) over the process's cgroup and its
 * ancestors, files under cgroup_root (ML__CGROUP_ROOT; tests pass a tree
 * of their own), "max" meaning none; else physical memory.  *source says
 * which: "cgroup /a/b/memory.max" (static storage: valid until the next
 * call) or "physical memory"; NULL, and 0 returned, when neither can be
 * read.  Garbage in a memory.max counts as none and is said once.  No
 * allocation: safe in a constructor of the interposer.  _from reads the
 * cgroup from self_cgroup, a file in /proc/self/cgroup's format. */
#define ML__CGROUP_ROOT "/sys/fs/cgroup"
uint64_t ml__memory_total(const char *cgroup_root, const char **source);
/* The process's resident size now (/proc/self/statm), 0 if unknown. */
uint64_t ml__resident_bytes(void);
/* Its resident private (anonymous) memory now: /proc/self/statm's
 * resident less its shared pages, read by raw system calls into a stack
 * buffer (no allocation, no stdio, no lock, errno kept: safe inside
 * malloc and mmap); UINT64_MAX when it cannot be read. */
uint64_t ml__resident_private(void);
uint64_t ml__memory_total_from(const char *self_cgroup, const char *cgroup_root,
                               const char **source);

/* ---- Loaded objects (objects.c) --------------------------------------- */

/* The loaded object holding addr: _dl_find_object, or dl_iterate_phdr
 * before glibc 2.35.  name: the link map's ("" for the main program);
 * bias: its load bias (l_addr: an address in its file plus bias).
 * Allocates nothing. */
struct ml__object {
	uintptr_t start, end, bias;
	const char *name;
};
int ml__find_object(uintptr_t addr, struct ml__object *o);

/* ELF files and loaded objects' symbol tables: util/elf.h. */

#pragma GCC visibility pop

#endif
