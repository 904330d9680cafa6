/* memlimits run: what is preloaded.  Owns finding libmemlimits (installed
 * or in the build tree, next to this command) and --allocator's shared
 * object in the system library directories. */
#include "config.h"

#define _GNU_SOURCE
#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/util/util.h"
#include "run.h"
#include "tool.h"

static bool readable(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

static bool same_dir(const char *a, const char *b)
{
	struct stat x, y;
	return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev &&
	       x.st_ino == y.st_ino;
}

/* --allocator: the shared object memlimits forwards to, by name ("" for
 * glibc's, which is always there); NULL for an unknown name. */
const char *ml__run_allocator_soname(const char *name)
{
	static const char *const map[][2] = {
	    {"glibc", ""},
	    {"jemalloc", "libjemalloc.so.2"},
	    {"tcmalloc", "libtcmalloc_minimal.so.4"},
	    {"mimalloc", "libmimalloc.so.2"},
	};
	for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
		if (!strcmp(name, map[i][0]))
			return map[i][1];
	return NULL;
}

/* The allocator's path in the system library directories (those of the
 * C library in use, their /usr twins, LD_LIBRARY_PATH's), or a one-line
 * refusal naming the Debian package; NULL for glibc. */
char *ml__run_find_allocator(const char *name)
{
	const char *so = ml__run_allocator_soname(name);
	if (!*so)
		return NULL;
	char libc_dir[PATH_MAX] = "/lib";
	Dl_info info;
	if (dladdr((void *)gnu_get_libc_version, &info) && info.dli_fname &&
	    strlen(info.dli_fname) < sizeof libc_dir) {
		strcpy(libc_dir, info.dli_fname);
		*strrchr(libc_dir, '/') = 0;
	}
	char *dirs[16];
	int nd = 0;
	dirs[nd++] = strdup(libc_dir);
	if (asprintf(&dirs[nd++], "/usr%s", libc_dir) < 0)
		nd--;
	const char *llp = getenv("LD_LIBRARY_PATH");
	char *copy = llp ? strdup(llp) : NULL, *save = NULL;
	for (char *d = copy ? strtok_r(copy, ":", &save) : NULL; d && nd < 13;
	     d = strtok_r(NULL, ":", &save))
		dirs[nd++] = strdup(d);
	dirs[nd++] = strdup("/usr/local/lib");
	dirs[nd++] = strdup("/usr/lib");
	dirs[nd++] = strdup("/lib");
	for (int i = 0; i < nd; i++) {
		char *p;
		if (dirs[i] && asprintf(&p, "%s/%s", dirs[i], so) >= 0) {
			if (readable(p) && !strpbrk(p, " \t:"))
				return p;
			free(p);
		}
	}
	ml__tool_usage_error(CMD,
	                     "--allocator %s: %s not found in the system "
	                     "library path (Debian: apt install %s)",
	                     name, so,
	                     !strcmp(name, "jemalloc") ? "libjemalloc2"
	                     : !strcmp(name, "tcmalloc")
	                         ? "libtcmalloc-minimal4"
	                         : "libmimalloc2.0");
}

/* Installed: $bindir/memlimits uses $libdir/libmemlimits.so.0.  From the
 * build tree (tools/memlimits): lib/.libs/ next to it.  Moved as a whole
 * (a relocated prefix): ../lib/. */
char *ml__run_find_library(void)
{
	char self[PATH_MAX];
	ml__self_exe(self, sizeof self);
	if (self[0] != '/')
		ml__tool_usage_error(CMD, "cannot find this command's path");
	*strrchr(self, '/') = 0;
	char *c[6];
	int nc = 0;
#if defined(ML_LIBDIR) && defined(ML_BINDIR)
	if (same_dir(self, ML_BINDIR))
		c[nc++] = strdup(ML_LIBDIR "/" LIBNAME);
#endif
	if (asprintf(&c[nc++], "%s/../lib/.libs/" LIBNAME, self) < 0 ||
	    asprintf(&c[nc++], "%s/../../lib/.libs/" LIBNAME, self) < 0)
		ml__tool_usage_error(CMD, "out of memory");
#ifdef ML_LIBDIR
	c[nc++] = strdup(ML_LIBDIR "/" LIBNAME);
#endif
	if (asprintf(&c[nc++], "%s/../lib/" LIBNAME, self) < 0)
		ml__tool_usage_error(CMD, "out of memory");
	for (int i = 0; i < nc; i++) {
		if (!c[i] || !readable(c[i]))
			continue;
		/* The directory made canonical, the name kept: the soname,
		 * not the file it links to, stays right across upgrades. */
		*strrchr(c[i], '/') = 0;
		char *dir = realpath(c[i], NULL), *r;
		if (!dir || asprintf(&r, "%s/" LIBNAME, dir) < 0)
			continue;
		free(dir);
		/* LD_PRELOAD splits on blanks and colons. */
		if (strpbrk(r, " \t:"))
			ml__tool_usage_error(CMD,
			                     "the library's path '%s' holds a "
			                     "blank or a colon: it cannot be "
			                     "preloaded",
			                     r);
		return r;
	}
	ml__tool_usage_error(CMD,
	                     "cannot find " LIBNAME " (looked next to "
	                     "%s and in the library directory)",
	                     self);
}
