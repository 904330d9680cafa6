/* ml_patch_objects(3): a program that does not link the library loads it
 * RTLD_LOCAL (as Python loads its extension), and has it rewrite every
 * loaded object's references to the malloc and mmap families.  Checks:
 * the program's own slots then hold the library's malloc; its RELRO pages
 * are read-only again; blocks glibc made before the rewrite are freed and
 * grown through the library; a block of ours grown by libc itself
 * (getline's realloc, inside libc, which is never rewritten) and freed
 * by us, and libc's own blocks (strdup) freed by us, many times over. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tap/tap.h"

#define ML_PATCH_QUERY 1u

/* Sizes from every glibc bin kind: tcache, small, large, mmapped. */
static const size_t sizes[] = {1, 24, 200, 1000, 5000, 70000, 300000};
#define N_OLD 6000
static void *old[N_OLD];
static void *volatile sink;

/* The first whole RELRO page of each object (the loader protects whole
 * pages only), up to 64 objects. */
struct relro {
	uintptr_t page[64];
	int n;
};

static int relro_pages(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	struct relro *r = data;
	for (int i = 0; i < info->dlpi_phnum && r->n < 64; i++)
		if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
			uintptr_t s =
			    info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
			uintptr_t lo = s & ~(uintptr_t)4095;
			uintptr_t hi =
			    (s + info->dlpi_phdr[i].p_memsz) & ~(uintptr_t)4095;
			if (hi > lo)
				r->page[r->n++] = lo;
		}
	return 0;
}

/* The protection of the page holding addr, as /proc/self/maps says. */
static int perms_at(uintptr_t addr, char perms[5])
{
	FILE *f = fopen("/proc/self/maps", "r");
	if (!f)
		return -1;
	char line[512];
	int found = -1;
	while (fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		char p[5];
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) == 3 &&
		    addr >= lo && addr < hi) {
			memcpy(perms, p, 5);
			found = 0;
			break;
		}
	}
	fclose(f);
	return found;
}

int main(void)
{
	const size_t nsizes = sizeof sizes / sizeof *sizes;
	for (size_t i = 0; i < N_OLD; i++) {
		old[i] = malloc(sizes[i % nsizes]);
		memset(old[i], 0x5a, 1);
	}

	const char *b = getenv("top_builddir");
	char path[4096];
	snprintf(path, sizeof path, "%s/lib/.libs/libmemlimits.so",
	         b ? b : ".");
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		tap_skip(1, "dlopen %s: %s", path, dlerror());
		return tap_done();
	}
	int (*patch)(unsigned) =
	    (int (*)(unsigned))dlsym(h, "ml_patch_objects");
	void *lib_malloc = dlsym(h, "malloc");
	tap_ok(patch && lib_malloc,
	       "the library's ml_patch_objects and malloc");
	if (!patch || !lib_malloc)
		return tap_done();
	/* Before: the program's malloc is glibc's. */
	void *(*volatile m)(size_t) = malloc;
	tap_ok((void *)m != lib_malloc, "before: the program's malloc is not "
	                                "the library's");

	errno = 0;
	int n = patch(0);
	if (n == -1 && errno == ENOTSUP) {
		/* valgrind's malloc (make check under memcheck, CI stage d):
		 * the library refuses, as under any other allocator. */
		tap_skip(1, "another allocator is the process's malloc "
		            "(valgrind): ml_patch_objects refuses, ENOTSUP");
		return tap_done();
	}
	tap_ok(n >= 1, "ml_patch_objects(0): %d objects", n);
	tap_is(patch(ML_PATCH_QUERY), n, "ML_PATCH_QUERY: the same count");
	tap_is(patch(0), n, "a second pass rewrites nothing new");
	errno = 0;
	tap_ok(patch(2) == -1 && errno == EINVAL, "unknown flags: EINVAL");

	/* The program's own malloc reaches the library: with a global limit
	 * set the library meters every block it sees. */
	int (*set_global)(uint64_t) =
	    (int (*)(uint64_t))dlsym(h, "ml_set_global_limit");
	uint64_t (*usage)(void) =
	    (uint64_t(*)(void))dlsym(h, "ml_global_memory_usage");
	if (set_global && usage && set_global((uint64_t)1 << 40) == 0) {
		uint64_t u0 = usage();
		sink = malloc(64 << 20);
		uint64_t u1 = usage();
		free(sink);
		uint64_t u2 = usage();
		tap_ok(u1 >= u0 + (64 << 20) && u2 + (32 << 20) < u1,
		       "after: the program's malloc and free reach the library "
		       "(metered %llu, %llu, %llu)",
		       (unsigned long long)u0, (unsigned long long)u1,
		       (unsigned long long)u2);
		set_global(UINT64_MAX);
	} else {
		tap_ok(0, "ml_set_global_limit");
	}

	struct relro r = {{0}, 0};
	dl_iterate_phdr(relro_pages, &r);
	int writable = 0;
	for (int i = 0; i < r.n; i++) {
		char perms[5] = "";
		if (perms_at(r.page[i], perms) == 0 && perms[1] != '-')
			writable++;
	}
	tap_ok(r.n > 0 && writable == 0,
	       "every object's RELRO pages are read-only again (%d objects)",
	       r.n);

	/* glibc's blocks from before, through the library: half grown,
	 * all freed. */
	size_t kept = 0;
	for (size_t i = 0; i < N_OLD; i += 2) {
		char *p = realloc(old[i], sizes[(i / 2) % 7] * 2 + 8);
		if (p) {
			old[i] = p;
			kept += p[0] == 0x5a;
		}
	}
	for (size_t i = 0; i < N_OLD; i++)
		free(old[i]);
	tap_ok(kept == (N_OLD + 1) / 2,
	       "%d blocks made before the rewrite: every other one grown with "
	       "its contents (%zu of %d), all freed",
	       N_OLD, kept, (N_OLD + 1) / 2);

	/* Ours, grown by libc's own realloc (inside libc, never rewritten)
	 * and freed by us; libc's strdup freed by us. */
	static const char text[] =
	    "a line long enough to grow the buffer more than once, "
	    "a line long enough to grow the buffer more than once\n";
	int bad = 0;
	for (int i = 0; i < 3000; i++) {
		size_t cap = 4;
		char *line = malloc(cap);
		FILE *f = fmemopen((void *)text, sizeof text - 1, "r");
		if (!f || !line) {
			bad++;
			free(line);
			continue;
		}
		if (getline(&line, &cap, f) != (ssize_t)(sizeof text - 1))
			bad++;
		fclose(f);
		free(line);
		char *s = strdup(text);
		if (!s || strcmp(s, text) != 0)
			bad++;
		free(s);
	}
	tap_is(bad, 0,
	       "libc's getline grew our blocks, libc's strdup "
	       "blocks freed by us: 3000 rounds");
	return tap_done();
}
