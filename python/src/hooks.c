/* memlimits._memlimits, the hooks: how the interpreter's allocations
 * reach the library.  The RAW domain goes to the library's own malloc
 * family (found in the loaded library, which need not be the process's
 * malloc); the MEM and OBJ domains are wrapped (pymalloc.c), from the
 * first task entered or global limit set, or at import under the
 * preload. */
#include "module.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- The library's malloc family ------------------------------------ */

static void *(*lib_malloc)(size_t);
static void *(*lib_calloc)(size_t, size_t);
static void *(*lib_realloc)(void *, size_t);
static void (*lib_free)(void *);
int mlpy_preloaded;
int mlpy_hooked;
const char *mlpy_counting = "off";
MLPY_TLS unsigned mlpy_raw_calls;

static int find_library_family(void)
{
	Dl_info info;
	if (!dladdr((void *)ml_version, &info) || !info.dli_fname)
		return -1;
	void *h = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	if (!h)
		return -1;
	lib_malloc = (void *(*)(size_t))dlsym(h, "malloc");
	lib_calloc = (void *(*)(size_t, size_t))dlsym(h, "calloc");
	lib_realloc = (void *(*)(void *, size_t))dlsym(h, "realloc");
	lib_free = (void (*)(void *))dlsym(h, "free");
	void *global = dlsym(RTLD_DEFAULT, "malloc");
	dlclose(h);
	if (!lib_malloc || !lib_calloc || !lib_realloc || !lib_free)
		return -1;
	mlpy_preloaded = global == (void *)lib_malloc ||
	                 (ml_capabilities() & ML_CAP_INTERPOSED);
	return 0;
}

/* PyMem's RAW contract: never NULL for 0 bytes.  Each call is marked as
 * the interpreter's (mlpy_in_python): with the other objects patched, the
 * refusal guard tells it from a C library's malloc, which gets no grace
 * (guard.c). */
static void *raw_malloc(void *ctx, size_t n)
{
	(void)ctx;
	mlpy_raw_calls++;
	mlpy_req = n;
	mlpy_in_python++;
	void *p = lib_malloc(n ? n : 1);
	mlpy_in_python--;
	return p;
}
static void *raw_calloc(void *ctx, size_t a, size_t b)
{
	(void)ctx;
	if (a == 0 || b == 0)
		a = b = 1;
	mlpy_raw_calls++;
	mlpy_req = a * b;
	mlpy_in_python++;
	void *p = lib_calloc(a, b);
	mlpy_in_python--;
	return p;
}
static void *raw_realloc(void *ctx, void *p, size_t n)
{
	(void)ctx;
	mlpy_raw_calls++;
	mlpy_req = n;
	mlpy_in_python++;
	void *q = lib_realloc(p, n ? n : 1);
	mlpy_in_python--;
	return q;
}
static void raw_free(void *ctx, void *p)
{
	(void)ctx;
	lib_free(p);
}

/* The RAW domain as this module installs it (rehook.c compares it). */
void mlpy_raw_ours(PyMemAllocatorEx *a)
{
	PyMemAllocatorEx raw = {NULL, raw_malloc, raw_calloc, raw_realloc,
	                        raw_free};
	*a = raw;
}

/* The domains' wrappers, from the first limit on (never taken out by
 * this module: a block noted as held must be seen when it is freed; put
 * back at every later call when another hook took them out, rehook.c).  Under
 * the GIL, which every MEM and OBJ call holds, so that none runs while they
 * change.  Blocks made before are pymalloc's and glibc's own: pm_free
 * and the library's free take them (no record: nothing held to give
 * back), as they take arenas' objects made before the import. */
int mlpy_wrapped;

void mlpy_wrap(void)
{
	if (!mlpy_hooked)
		return;
	if (mlpy_wrapped) {
		mlpy_rehook();
		return;
	}
	mlpy_wrapped = 1;
	mlpy_wrap_domains(mlpy_c_counted);
	if (!mlpy_preloaded) {
		/* RAW runs without the GIL too: a call that reads the domain
		 * while it changes gets glibc's function or the library's,
		 * either with a NULL context, and each frees what the other
		 * made (the library's family forwards to glibc). */
		PyMemAllocatorEx raw;
		mlpy_raw_ours(&raw);
		PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &raw);
	}
}

/* ---- The other objects' malloc (issue 42, item 1) -------------------
 *
 * Without the preload, an extension's own calls to malloc (numpy's arrays,
 * sqlite3's pages, libxml2's nodes, ctypes' calls into libc) go to glibc:
 * the library rewrites every loaded object's references to the malloc and
 * mmap families to its own, and those of every object dlopen brings later
 * (ml_patch_objects(3)).  At import, with nothing of the module's state
 * read by the allocation path yet.  MEMLIMITS_NO_PATCH=1 leaves the
 * objects alone (docs/python.md): what the limits then miss is measured
 * by python/tests/test_extensions.py. */
const char *mlpy_extensions = "off";
int mlpy_c_counted;

static void patch_extensions(void)
{
	const char *no = getenv("MEMLIMITS_NO_PATCH");
	if (mlpy_preloaded) {
		mlpy_extensions = "preloaded";
		mlpy_c_counted = 1;
		return;
	}
	if (no && *no && strcmp(no, "0") != 0) {
		mlpy_extensions = "off: MEMLIMITS_NO_PATCH is set";
		return;
	}
	int n = ml_patch_objects(0);
	if (n < 0) {
		mlpy_extensions = errno == ENOTSUP
		                      ? "off: another allocator is the malloc"
		                      : "off: the objects could not be patched";
		return;
	}
	mlpy_extensions = "patched";
	mlpy_c_counted = 1;
}

int mlpy_install_hooks(void)
{
	const char *pm = getenv("PYTHONMALLOC");
	if (pm && *pm && strcmp(pm, "pymalloc") != 0) {
		mlpy_counting = "off: PYTHONMALLOC is set";
		return 0;
	}
	if (find_library_family() != 0) {
		mlpy_counting = "off: the library's malloc was not found";
		return 0;
	}
	if (mlpy_arenas_install() != 0)
		return 0;
	mlpy_counting = mlpy_preloaded ? "preloaded" : "hooks";
	ml_set_refusal_guard(mlpy_refusal_guard, NULL);
	mlpy_hooked = 1;
	patch_extensions();
	if (mlpy_preloaded) {
		mlpy_count_all = 1;
		mlpy_wrap();
	}
	return 0;
}
