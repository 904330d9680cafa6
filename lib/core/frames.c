/* Frame classification: whether the frames between an allocation and a
 * task's ml_run allow a jump (longjmp back to ml_run), and whether a
 * frame that cannot survive a failure called malloc (ml__frames_check,
 * for tasks/deliver.c).
 *
 * Each frame is attributed to the object holding its return address; an
 * object is "runtime" when abandoning or failing inside it is unsafe: the
 * C library, the loader, libstdc++, libgcc, libunwind, the allocator
 * underneath (jemalloc, tcmalloc, mimalloc), and this library (except its
 * own task frames, which a jump is meant to leave).
 *
 * It runs only after an interruption or before a refusal, never at
 * samples, and walks with libgcc's _Unwind_Backtrace (loaded by
 * capture.c), not capture.c's cached rules: it needs each frame's
 * function start (must_not_fail), which the rules do not keep.  The
 * loader check ends at the first user frame, so that a refusal's cost
 * does not grow with the depth of the stack (docs/performance.md,
 * "Stacks"). */
#define _GNU_SOURCE
#include "core/unwinder.h"

#include <locale.h>
#include <string.h>

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

/* The library's own load base: set at start (ml__unwind_init) or by the
 * first walk, by whichever thread gets there; every thread computes the
 * same value, so relaxed atomics suffice (a plain static was a data
 * race). */
static _Atomic uintptr_t self_base;

static enum kind classify(uintptr_t ip)
{
	struct ml__object o;
	if (ml__find_object(ip, &o) != 0)
		return K_USER; /* JIT code or similar: not ours to judge */
	if (o.start == atomic_load_explicit(&self_base, memory_order_relaxed))
		return K_SELF;
	/* The allocator underneath: never jumped across, nor failed in. */
	uintptr_t lo;
	ml__allocator_object(&lo, NULL);
	if (o.start == lo && lo)
		return K_RUNTIME;
	/* The main program's link map has an empty name. */
	return classify_name(o.name);
}

void ml__unwind_init(void)
{
	struct ml__object o;
	if (ml__find_object((uintptr_t)&ml__unwind_init, &o) == 0)
		atomic_store_explicit(&self_base, o.start,
		                      memory_order_relaxed);
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
	uintptr_t ip = ml__gcc_s.get_ip_info(ctx, &before);
	/* This frame's stack pointer is the frame below's CFA. */
	uintptr_t sp = w->prev_cfa;
	w->prev_cfa = (uintptr_t)ml__gcc_s.get_cfa(ctx);
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
	    (k == K_RUNTIME &&
	     must_not_fail((uintptr_t)ml__gcc_s.region_start(ctx)))) {
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
	if (!atomic_load_explicit(&self_base, memory_order_relaxed))
		ml__unwind_init();
	if (!ml__unwind_loaded())
		return ML__FRAMES_RUNTIME; /* no stack walks: not known safe */
	struct walk w = {.stop = stop,
	                 .leading = true,
	                 .reached = (stop == 0),
	                 .verdict = ML__FRAMES_SAFE};
	ml__gcc_s.backtrace(walk_frame, &w);
	/* A stack we could not follow up to the task is not known safe. */
	if (!w.reached && w.verdict == ML__FRAMES_SAFE)
		w.verdict = ML__FRAMES_RUNTIME;
	return w.verdict;
}

enum ml__frames ml__frames_check(uintptr_t stop)
{
	ml__unwind_lock();
	enum ml__frames f = walk(stop);
	ml__unwind_unlock();
	return f;
}
