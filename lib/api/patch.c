/* The patcher (ml_patch_objects, issue 42 item 1): the malloc family and
 * the mmap family of every loaded object, and of every object loaded
 * later, routed to the library's own definitions, without the preload.
 *
 * A program that links the library, or a Python extension that loads it
 * (RTLD_LOCAL), finds glibc's malloc first in the lookup order: its own
 * calls, and its other objects' calls, never reach the library.  Here each
 * object's GOT slots for the families' names (R_X86_64_JUMP_SLOT and
 * R_X86_64_GLOB_DAT relocations, util/elf.c's ml__elf_rebind) that hold
 * glibc's definition are rewritten to hold ours, and so are its slots for
 * dlopen: the objects that arrive later are rewritten by our dlopen, once
 * the real one has returned.  Left alone: glibc's libc (its calls are its
 * allocator's own, and strdup's block is a glibc block the library's free
 * takes), the loader, and the library itself (whose definitions call
 * glibc's).  A slot bound to another definition than glibc's (an
 * allocator of the object's own, RTLD_DEEPBIND) is left alone too.
 *
 * Blocks made before the rewrite are glibc's blocks; the library's blocks
 * are glibc's blocks too (no header: alloc/underlying.c forwards), so
 * that either free takes the other's blocks; a block of ours freed by
 * glibc directly leaves its sample's record behind (held memory reads
 * high by it until the address is freed through us again).
 *
 * Not covered, as docs/python.md says: lookups through dlsym, pointers
 * taken before a pass, raw system calls, libc's own calls, objects that
 * dlmopen or libc's internal dlopen loads; and the loader searches for
 * what patch_dlopen loads with the library's DT_RUNPATH, not its
 * caller's, since it reads the caller from the return address.
 *
 * Every pass runs outside any allocation path (at the module's import,
 * in our dlopen after the real one) and allocates nothing: the tables are
 * static, the objects are read in place. */
#define _GNU_SOURCE
#include "api/api.h"
#include "util/elf.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <string.h>

/* The names routed: what the library defines of the two families (the
 * preload's set, lib/memlimits.map), and dlopen, last. */
static const char *const names[] = {
    "malloc",
    "free",
    "calloc",
    "realloc",
    "reallocarray",
    "posix_memalign",
    "aligned_alloc",
    "memalign",
    "valloc",
    "pvalloc",
    "malloc_usable_size",
    "__libc_malloc",
    "__libc_free",
    "__libc_calloc",
    "__libc_realloc",
    "__libc_memalign",
    "__libc_valloc",
    "__libc_pvalloc",
    "mmap",
    "mmap64",
    "munmap",
    "mremap",
    "mprotect",
    "pkey_mprotect",
    "madvise",
    "dlopen",
};
#define N_NAMES (sizeof names / sizeof *names)

static struct ml__elf_route routes[N_NAMES];
static size_t n_routes;
static void *(*real_dlopen)(const char *, int);
/* One pass at a time: a pass makes RELRO pages writable and read-only
 * again, which a second pass must not see half done. */
ML__LOCK(static, patch_lock, ML__RANK_MAPPED)
/* The loader's count of objects added at the last pass: a dlopen that
 * loaded nothing new (a module opened again) needs no pass. */
static unsigned long long last_adds;
static _Atomic int last_count = -1;

static void *patch_dlopen(const char *file, int mode);

struct find {
	uintptr_t self;
	bool libc_first, ours_first, other_first, seen_definer, own_found;
	bool valgrind; /* valgrind's preload is loaded */
	/* The library's own object: its program headers are the loader's,
	 * valid while it stays loaded, which it does while we run. */
	struct dl_phdr_info own;
	const void *dlopen_any;
};

static bool is_libc(const struct dl_phdr_info *info)
{
	return ml__elf_symbol(info, "gnu_get_libc_version") != NULL;
}

/* The loader: ld-linux-x86-64.so.2, ld-linux-aarch64.so.1 by its name,
 * or the object that defines _dl_mcount (the loader's own export) where
 * its name is another. */
static bool is_loader(const struct dl_phdr_info *info)
{
	const char *n = info->dlpi_name, *b = n ? strrchr(n, '/') : NULL;
	b = b ? b + 1 : n;
	if (b && (strncmp(b, "ld-linux", 8) == 0 ||
	          strncmp(b, "ld64.", 5) == 0 || strncmp(b, "ld.so", 5) == 0))
		return true;
	return ml__elf_symbol(info, "_dl_mcount") != NULL;
}

static int visit_find(struct dl_phdr_info *info, size_t size, void *data)
{
	struct find *f = data;
	uintptr_t lo, hi;
	if (ml__elf_span(info, f->self, &lo, &hi)) {
		memcpy(&f->own, info,
		       size < sizeof f->own ? size : sizeof f->own);
		f->own_found = true;
	}
	if (!f->dlopen_any && !is_loader(info))
		f->dlopen_any = ml__elf_symbol(info, "dlopen");
	/* Who defines malloc first in load order: the process's malloc,
	 * unless objects loaded RTLD_LOCAL came before libc (never: libc is
	 * among the program's first). */
	/* valgrind's preload defines no malloc: valgrind redirects libc's
	 * by name, and its blocks are not glibc's (the meter reads glibc's
	 * chunk header), so libc's malloc counts as another allocator
	 * there.  Ours, linked or preloaded before libc, is still the one
	 * called (valgrind redirects libc's, not ours). */
	if (info->dlpi_name && strstr(info->dlpi_name, "/vgpreload_"))
		f->valgrind = true;
	if (!f->seen_definer && ml__elf_symbol(info, "malloc")) {
		f->seen_definer = true;
		if (is_libc(info) && f->valgrind)
			f->other_first = true;
		else if (is_libc(info))
			f->libc_first = true;
		else if (ml__elf_span(info, f->self, &lo, &hi))
			f->ours_first = true;
		else
			f->other_first = true;
	}
	return 0;
}

/* The routes, once.  0, or an errno. */
static int prepare(void)
{
	if (n_routes)
		return 0;
	struct find f = {.self = (uintptr_t)ml_patch_objects};
	dl_iterate_phdr(visit_find, &f);
	if (!f.own_found)
		return ENOENT;
	if (f.ours_first)
		return EEXIST; /* preloaded: every object reaches us already */
	if (!f.libc_first)
		return ENOTSUP; /* another allocator is the process's malloc */
	size_t k = 0;
	for (size_t i = 0; i < N_NAMES; i++) {
		const void *from = ml__elf_libc_symbol(names[i]);
		const void *to = ml__elf_symbol(&f.own, names[i]);
		if (strcmp(names[i], "dlopen") == 0) {
			/* glibc before 2.34 defines dlopen in libdl. */
			if (!from)
				from = f.dlopen_any;
			real_dlopen = (void *(*)(const char *, int))from;
			to = (const void *)patch_dlopen;
		}
		if (!from || !to)
			continue; /* a name this libc lacks (pkey_mprotect) */
		routes[k++] = (struct ml__elf_route){names[i], from, to};
	}
	if (!real_dlopen || !k)
		return ENOENT;
	n_routes = k;
	return 0;
}

struct pass {
	int objects;
	int failed;
};

static int visit_patch(struct dl_phdr_info *info, size_t size, void *data)
{
	struct pass *p = data;
	uintptr_t lo, hi;
	(void)size;
	if (ml__elf_span(info, (uintptr_t)ml_patch_objects, &lo, &hi) ||
	    is_libc(info) || is_loader(info))
		return 0;
	int r = ml__elf_rebind(info, routes, n_routes);
	if (r < 0)
		p->failed++;
	else if (r > 0)
		p->objects++;
	return 0;
}

static int read_adds(struct dl_phdr_info *info, size_t size, void *data)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_subs))
		*(unsigned long long *)data = info->dlpi_adds;
	return 1;
}

/* A pass over every loaded object, under the lock.  force: even if the
 * loader added nothing since the last.  A pass asked for while another
 * runs is not waited for (wait: false): the dlopen asking may be nested
 * in a constructor, holding the loader's lock, which the running pass
 * may be waiting for in dl_iterate_phdr.  It is left to the running pass,
 * which walks again before it ends (pending). */
static _Atomic bool pending;

static int pass(bool force, bool wait)
{
	int c;
	for (;;) {
		if (wait) {
			ml__spin_lock(&patch_lock);
		} else if (!ml__spin_trylock(&patch_lock)) {
			atomic_store_explicit(&pending, true,
			                      memory_order_seq_cst);
			/* Taken still: its holder sees pending after its
			 * unlock at the latest. */
			if (!ml__spin_trylock(&patch_lock))
				return atomic_load_explicit(
				    &last_count, memory_order_relaxed);
		}
		atomic_store_explicit(&pending, false, memory_order_seq_cst);
		c = atomic_load_explicit(&last_count, memory_order_relaxed);
		unsigned long long adds = 0;
		dl_iterate_phdr(read_adds, &adds);
		if (force || c < 0 || adds != last_adds || adds == 0) {
			struct pass p = {0, 0};
			dl_iterate_phdr(visit_patch, &p);
			last_adds = adds;
			c = p.objects;
			atomic_store_explicit(&last_count, c,
			                      memory_order_relaxed);
		}
		ml__spin_unlock(&patch_lock);
		/* A pass asked for meanwhile, by a dlopen that did not wait:
		 * walk again (unless another thread has the lock by now,
		 * which then does). */
		if (!atomic_load_explicit(&pending, memory_order_seq_cst))
			return c;
		force = false;
		wait = false;
	}
}

/* Our dlopen, in the patched objects' slots: the real one, then a pass
 * for what it brought (the object and its dependencies), whose
 * constructors have run by then: what they allocated is glibc's, which
 * the library's free takes.  errno is the real dlopen's; dlerror's state
 * is untouched (dl_iterate_phdr sets none). */
static void *patch_dlopen(const char *file, int mode)
{
	void *h = real_dlopen(file, mode);
	if (h) {
		int e = errno;
		pass(false, false);
		errno = e;
	}
	return h;
}

ML_EXPORT int ml_patch_objects(unsigned flags)
{
	if (flags & ~ML_PATCH_QUERY) {
		errno = EINVAL;
		return -1;
	}
	if (flags & ML_PATCH_QUERY)
		return atomic_load_explicit(&last_count, memory_order_relaxed) <
		               0
		           ? 0
		           : atomic_load_explicit(&last_count,
		                                  memory_order_relaxed);
	ml__spin_lock(&patch_lock);
	int e = prepare();
	ml__spin_unlock(&patch_lock);
	if (e) {
		errno = e;
		return -1;
	}
	return pass(true, true);
}
