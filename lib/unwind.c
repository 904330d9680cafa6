/* Frame safety: which code lies between an allocation and a task's ml_run.
 *
 * Only runs after an interruption (never on the sampling path).  Each frame
 * is attributed to the object holding its return address with glibc's
 * lock-free _dl_find_object; an object is "runtime" when abandoning or
 * failing inside it is unsafe: the C library, the loader, libstdc++,
 * libgcc, libunwind, and this library (except its own task frames, which a
 * jump is meant to leave). */
#define _GNU_SOURCE
#include "internal.h"

#include <dlfcn.h>
#include <link.h>
#include <locale.h>
#include <stdlib.h>
#include <string.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

/* libunwind, loaded with RTLD_LOCAL at start (ml__unwind_load), never linked:
 * it exports its own _Unwind_* symbols, which in the global scope would
 * interpose libgcc_s's and mix two unwinders in pthread_exit and C++
 * exceptions.  The entry points we use, by their real (macro-expanded)
 * names. */
static struct {
	int (*getcontext)(unw_context_t *);
	int (*init_local)(unw_cursor_t *, unw_context_t *);
	int (*step)(unw_cursor_t *);
	int (*get_reg)(unw_cursor_t *, unw_regnum_t, unw_word_t *);
	int (*get_proc_info)(unw_cursor_t *, unw_proc_info_t *);
	int (*backtrace)(void **, int);
} U;
static _Atomic bool loaded;

void ml__unwind_load(void)
{
	void *h = dlopen(ML_UNWIND_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		ml__diag(
		    "cannot load %s: jumps wait for ml_check or ml_unmask, "
		    "and run-mode reports have no stacks",
		    ML_UNWIND_SONAME);
		return;
	}
#define SYM(field, name) *(void **)&U.field = dlsym(h, name)
	SYM(getcontext, "_Ux86_64_getcontext");
	SYM(init_local, "_ULx86_64_init_local");
	SYM(step, "_ULx86_64_step");
	SYM(get_reg, "_ULx86_64_get_reg");
	SYM(get_proc_info, "_ULx86_64_get_proc_info");
	SYM(backtrace, "unw_backtrace");
#undef SYM
	if (U.getcontext && U.init_local && U.step && U.get_reg &&
	    U.get_proc_info && U.backtrace)
		atomic_store_explicit(&loaded, true, memory_order_release);
	else
		ml__diag("%s lacks the x86-64 local unwinding entry points",
		         ML_UNWIND_SONAME);
}

int ml__backtrace(void **ip, int max)
{
	if (!atomic_load_explicit(&loaded, memory_order_acquire))
		return 0;
	return U.backtrace(ip, max);
}

#define MAX_FRAMES 256

enum kind { K_USER, K_SELF, K_RUNTIME, K_LOADER };

/* libc functions that must never see an allocation fail: the first aborts
 * the process ("failed to register TLS destructor"); the locale loaders
 * remember a locale whose loading met ENOMEM as missing, for good. */
extern int __cxa_thread_atexit_impl(void (*)(void *), void *, void *);
static bool must_not_fail(unw_word_t start)
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

static void *self_base;

static enum kind classify(uintptr_t ip)
{
	struct dl_find_object fo;
	if (_dl_find_object((void *)ip, &fo) != 0)
		return K_USER; /* JIT code or similar: not ours to judge */
	if (fo.dlfo_map_start == self_base)
		return K_SELF;
	/* The main program's link map has an empty name. */
	const char *name = fo.dlfo_link_map ? fo.dlfo_link_map->l_name : "";
	return classify_name(name ? name : "");
}

void ml__unwind_init(void)
{
	struct dl_find_object fo;
	if (_dl_find_object((void *)(uintptr_t)&ml__unwind_init, &fo) == 0)
		self_base = fo.dlfo_map_start;
}

/* libunwind keeps caches behind its own mutexes; a fork while another
 * thread holds one would leave it held in the child.  This lock is taken
 * around every walk and by fork's prepare handler (thread.c). */
static atomic_flag walk_lock = ATOMIC_FLAG_INIT;

void ml__unwind_lock(void)
{
	ml__spin_lock(&walk_lock);
}

void ml__unwind_unlock(void)
{
	ml__spin_unlock(&walk_lock);
}

static enum ml__frames walk(uintptr_t stop);

enum ml__frames ml__frames_check(uintptr_t stop)
{
	/* libunwind may allocate: those allocations must pass straight
	 * through, also when we come from ml_check or ml_unmask. */
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

static enum ml__frames walk(uintptr_t stop)
{
	if (!self_base)
		ml__unwind_init();
	unw_context_t ctx;
	unw_cursor_t cur;
	if (!atomic_load_explicit(&loaded, memory_order_acquire))
		return ML__FRAMES_RUNTIME; /* no stack walks: not known safe */
	if (U.getcontext(&ctx) != 0 || U.init_local(&cur, &ctx) != 0)
		return ML__FRAMES_RUNTIME;
	enum ml__frames verdict = ML__FRAMES_SAFE;
	bool leading = true, reached = (stop == 0);
	for (int depth = 0; depth < MAX_FRAMES && U.step(&cur) > 0; depth++) {
		unw_word_t ip = 0, sp = 0;
		U.get_reg(&cur, UNW_REG_IP, &ip);
		U.get_reg(&cur, UNW_REG_SP, &sp);
		if (stop && sp >= stop) {
			reached = true;
			break;
		}
		/* A return address may sit just past the end of its caller. */
		enum kind k = classify(ip - 1);
		if (leading && k == K_SELF)
			continue; /* the allocation path itself */
		leading = false;
		if (k == K_LOADER)
			return ML__FRAMES_LOADER;
		if (k == K_RUNTIME) {
			unw_proc_info_t pi;
			if (U.get_proc_info(&cur, &pi) == 0 &&
			    must_not_fail(pi.start_ip))
				return ML__FRAMES_LOADER;
			verdict = ML__FRAMES_RUNTIME;
		}
	}
	/* A stack we could not follow up to the task is not known safe. */
	if (!reached && verdict == ML__FRAMES_SAFE)
		verdict = ML__FRAMES_RUNTIME;
	return verdict;
}
