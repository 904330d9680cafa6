/* Stacks: the call stack of an allocation, for run-mode profiles and for
 * frame safety (which code lies between an allocation and a task's
 * ml_run).
 *
 * The walk is libgcc's _Unwind_Backtrace, from the libgcc_s that the
 * library links anyway.  It opens no descriptor and takes no lock of its
 * own where glibc has _dl_find_object (2.35).
 * libunwind 1.6 was used before: its first use opens a pipe to validate
 * addresses (the lowest free descriptors: a program started with stdin
 * closed found a pipe as fd 0) and reopens it inside a later walk when the
 * program has closed it; no setting turns that off.  Costs of each way are
 * in docs/performance.md.
 *
 * Frame safety only runs after an interruption (never on the sampling
 * path).  Each frame is attributed to the object holding its return
 * address; an object is "runtime" when abandoning or failing inside it is
 * unsafe: the C library, the loader, libstdc++, libgcc, libunwind, and this
 * library (except its own task frames, which a jump is meant to leave). */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <link.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>
#include <unwind.h>

/* libgcc_s's unwinder, by name (the same on every architecture). */
static struct {
	_Unwind_Reason_Code (*backtrace)(_Unwind_Trace_Fn, void *);
	_Unwind_Ptr (*get_ip_info)(struct _Unwind_Context *, int *);
	_Unwind_Word (*get_cfa)(struct _Unwind_Context *);
	_Unwind_Ptr (*region_start)(struct _Unwind_Context *);
} U;
static _Atomic bool loaded;

/* ---- Which object holds an address ------------------------------------ */

#if HAVE__DL_FIND_OBJECT
int ml__find_object(uintptr_t addr, struct ml__object *o)
{
	/* Lock-free: safe inside malloc, also while another thread is in
	 * dlopen. */
	struct dl_find_object fo;
	if (_dl_find_object((void *)addr, &fo) != 0)
		return -1;
	o->start = (uintptr_t)fo.dlfo_map_start;
	o->end = (uintptr_t)fo.dlfo_map_end;
	o->name = fo.dlfo_link_map && fo.dlfo_link_map->l_name
	              ? fo.dlfo_link_map->l_name
	              : "";
	return 0;
}
#else
struct find {
	uintptr_t addr;
	struct ml__object *o;
};

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct find *f = arg;
	uintptr_t lo = UINTPTR_MAX, hi = 0;
	bool hit = false;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;
		if (s < lo)
			lo = s;
		if (s + ph->p_memsz > hi)
			hi = s + ph->p_memsz;
		hit |= f->addr >= s && f->addr - s < ph->p_memsz;
	}
	if (!hit)
		return 0;
	f->o->start = lo;
	f->o->end = hi;
	f->o->name = info->dlpi_name ? info->dlpi_name : "";
	return 1;
}

int ml__find_object(uintptr_t addr, struct ml__object *o)
{
	/* Before glibc 2.35: dl_iterate_phdr takes the loader's list lock
	 * only briefly (dlopen holds it while linking an object in, not
	 * while it allocates). */
	struct find f = {addr, o};
	return dl_iterate_phdr(find_cb, &f) ? 0 : -1;
}
#endif

/* ---- Loading ---------------------------------------------------------- */

void ml__unwind_load(void)
{
	/* libgcc_s is loaded already: the library needs it for its own
	 * -fexceptions cleanups (_Unwind_Resume).  By handle, so that a
	 * program's libunwind, which exports the same names, cannot stand
	 * in for it.  At start: a dlopen inside malloc can deadlock on the
	 * loader lock. */
	void *h = dlopen(ML_GCC_S_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		ml__diag(
		    "cannot load %s: jumps wait for ml_check or ml_unmask, "
		    "and run-mode reports have no stacks",
		    ML_GCC_S_SONAME);
		return;
	}
#define SYM(field, name) *(void **)&U.field = dlsym(h, name)
	SYM(backtrace, "_Unwind_Backtrace");
	SYM(get_ip_info, "_Unwind_GetIPInfo");
	SYM(get_cfa, "_Unwind_GetCFA");
	SYM(region_start, "_Unwind_GetRegionStart");
#undef SYM
	if (U.backtrace && U.get_ip_info && U.get_cfa && U.region_start)
		atomic_store_explicit(&loaded, true, memory_order_release);
	else
		ml__diag("%s lacks _Unwind_Backtrace", ML_GCC_S_SONAME);
}

bool ml__unwind_loaded(void)
{
	return atomic_load_explicit(&loaded, memory_order_acquire);
}

/* ---- Capture ---------------------------------------------------------- */

struct capture {
	void **ip;
	int n, max;
};

static _Unwind_Reason_Code capture_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct capture *c = arg;
	if (c->n == c->max)
		return _URC_END_OF_STACK;
	int before = 0;
	uintptr_t ip = U.get_ip_info(ctx, &before);
	if (!ip)
		return _URC_END_OF_STACK;
	/* Return addresses throughout, as the symbolizer expects (a signal
	 * frame's address is the interrupted instruction itself). */
	c->ip[c->n++] = (void *)(ip + (before != 0));
	return _URC_NO_REASON;
}

int ml__backtrace(void **ip, int max)
{
	if (!ml__unwind_loaded())
		return 0;
	struct capture c = {ip, 0, max};
	U.backtrace(capture_frame, &c);
	return c.n;
}

/* ---- Frame safety ----------------------------------------------------- */

#define MAX_FRAMES 256

enum kind { K_USER, K_SELF, K_RUNTIME, K_LOADER };

/* libc functions that must never see an allocation fail: the first aborts
 * the process ("failed to register TLS destructor"); the locale loaders
 * remember a locale whose loading met ENOMEM as missing, for good. */
extern int __cxa_thread_atexit_impl(void (*)(void *), void *, void *);
static bool must_not_fail(uintptr_t start)
{
	return start == (uintptr_t)&__cxa_thread_atexit_impl ||
	       start == (uintptr_t)&setlocale || start == (uintptr_t)&newlocale;
}

static bool starts(const char *base, const char *prefix)
{
	return strncmp(base, prefix, strlen(prefix)) == 0;
}

static enum kind classify_name(const char *path)
{
	const char *base = strrchr(path, '/');
	base = base ? base + 1 : path;
	if (starts(base, "ld-linux") || starts(base, "ld.so") ||
	    starts(base, "ld64.so"))
		return K_LOADER;
	if (starts(base, "libc.so") || starts(base, "libpthread.so") ||
	    starts(base, "libdl.so") || starts(base, "libstdc++.so") ||
	    starts(base, "libgcc_s.so") || starts(base, "libunwind"))
		return K_RUNTIME;
	return K_USER;
}

static uintptr_t self_base;

static enum kind classify(uintptr_t ip)
{
	struct ml__object o;
	if (ml__find_object(ip, &o) != 0)
		return K_USER; /* JIT code or similar: not ours to judge */
	if (o.start == self_base)
		return K_SELF;
	/* The main program's link map has an empty name. */
	return classify_name(o.name);
}

void ml__unwind_init(void)
{
	struct ml__object o;
	if (ml__find_object((uintptr_t)&ml__unwind_init, &o) == 0)
		self_base = o.start;
}

/* libgcc keeps the frames registered at run time (JIT code) behind its own
 * mutex; a fork while another thread holds it would leave it held in the
 * child.  This lock is taken around every walk and by fork's prepare
 * handler (thread.c). */
static atomic_flag walk_lock = ATOMIC_FLAG_INIT;

void ml__unwind_lock(void)
{
	ml__spin_lock(&walk_lock);
}

void ml__unwind_unlock(void)
{
	ml__spin_unlock(&walk_lock);
}

struct walk {
	uintptr_t stop, prev_cfa;
	int depth;
	bool leading, reached;
	enum ml__frames verdict;
};

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg)
{
	struct walk *w = arg;
	if (w->depth++ == MAX_FRAMES)
		return _URC_END_OF_STACK;
	int before = 0;
	uintptr_t ip = U.get_ip_info(ctx, &before);
	/* This frame's stack pointer is the frame below's CFA. */
	uintptr_t sp = w->prev_cfa;
	w->prev_cfa = (uintptr_t)U.get_cfa(ctx);
	if (!ip)
		return _URC_END_OF_STACK;
	if (w->stop && sp && sp >= w->stop) {
		w->reached = true;
		return _URC_END_OF_STACK;
	}
	/* A return address may sit just past the end of its caller. */
	enum kind k = classify(ip - (before == 0));
	if (w->leading && k == K_SELF)
		return _URC_NO_REASON; /* the allocation path itself */
	w->leading = false;
	if (k == K_LOADER ||
	    (k == K_RUNTIME && must_not_fail((uintptr_t)U.region_start(ctx)))) {
		w->verdict = ML__FRAMES_LOADER;
		return _URC_END_OF_STACK;
	}
	if (k == K_RUNTIME) {
		w->verdict = ML__FRAMES_RUNTIME;
	} else if (!w->stop && k == K_USER) {
		/* The loader check ends at the first user frame: what
		 * cannot survive a failure calls malloc through runtime
		 * frames only (ld.so, __tls_get_addr, the locale loaders,
		 * __cxa_thread_atexit_impl); deeper frames do not matter to
		 * it.  This bounds the cost of a refusal by the depth of
		 * that run, not of the stack. */
		w->reached = true;
		return _URC_END_OF_STACK;
	}
	return _URC_NO_REASON;
}

static enum ml__frames walk(uintptr_t stop)
{
	if (!self_base)
		ml__unwind_init();
	if (!ml__unwind_loaded())
		return ML__FRAMES_RUNTIME; /* no stack walks: not known safe */
	struct walk w = {.stop = stop,
	                 .leading = true,
	                 .reached = (stop == 0),
	                 .verdict = ML__FRAMES_SAFE};
	U.backtrace(walk_frame, &w);
	/* A stack we could not follow up to the task is not known safe. */
	if (!w.reached && w.verdict == ML__FRAMES_SAFE)
		w.verdict = ML__FRAMES_RUNTIME;
	return w.verdict;
}

enum ml__frames ml__frames_check(uintptr_t stop)
{
	/* The unwinder may allocate (frames registered at run time): those
	 * allocations must pass straight through, also when we come from
	 * ml_check or ml_unmask. */
	struct ml__thread *t = &ml__self;
	uint8_t busy = t->busy;
	t->busy = 1;
	ml__force_slow(t);
	ml__unwind_lock();
	enum ml__frames f = walk(stop);
	ml__unwind_unlock();
	t->busy = busy;
	ml__unforce(t);
	return f;
}
