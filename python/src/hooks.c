/* memlimits._memlimits, the hooks: how the interpreter's allocations
 * reach the library.  The RAW domain goes to the library's own malloc
 * family (found in the loaded library, which need not be the process's
 * malloc); the MEM and OBJ domains are wrapped (pymalloc.c), from the
 * first task entered or global limit set, or at import under the
 * preload. */
#include "module.h"

#include <dlfcn.h>
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
static PyMemAllocatorEx prev_raw;
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

/* PyMem's RAW contract: never NULL for 0 bytes. */
static void *raw_malloc(void *ctx, size_t n)
{
	(void)ctx;
	mlpy_raw_calls++;
	mlpy_req = n;
	return lib_malloc(n ? n : 1);
}
static void *raw_calloc(void *ctx, size_t a, size_t b)
{
	(void)ctx;
	if (a == 0 || b == 0)
		a = b = 1;
	mlpy_raw_calls++;
	mlpy_req = a * b;
	return lib_calloc(a, b);
}
static void *raw_realloc(void *ctx, void *p, size_t n)
{
	(void)ctx;
	mlpy_raw_calls++;
	mlpy_req = n;
	return lib_realloc(p, n ? n : 1);
}
static void raw_free(void *ctx, void *p)
{
	(void)ctx;
	lib_free(p);
}

/* The domains' wrappers, from the first limit on (never taken out: a
 * block noted as held must be seen when it is freed).  Under the GIL,
 * which every MEM and OBJ call holds, so that none runs while they
 * change.  Blocks made before are pymalloc's and glibc's own: pm_free
 * and the library's free take them (no record: nothing held to give
 * back), as they take arenas' objects made before the import. */
int mlpy_wrapped;

void mlpy_wrap(void)
{
	if (mlpy_wrapped || !mlpy_hooked)
		return;
	mlpy_wrapped = 1;
	mlpy_wrap_domains(mlpy_preloaded);
	if (!mlpy_preloaded) {
		/* RAW runs without the GIL too: a call that reads the domain
		 * while it changes gets glibc's function or the library's,
		 * either with a NULL context, and each frees what the other
		 * made (the library's family forwards to glibc). */
		PyMem_GetAllocator(PYMEM_DOMAIN_RAW, &prev_raw);
		PyMemAllocatorEx raw = {NULL, raw_malloc, raw_calloc,
		                        raw_realloc, raw_free};
		PyMem_SetAllocator(PYMEM_DOMAIN_RAW, &raw);
	}
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
	if (mlpy_preloaded) {
		mlpy_count_all = 1;
		mlpy_wrap();
	}
	return 0;
}
