/* The memory the process may use, for a limit given as a percentage
 * (MEMLIMITS_HEAP_LIMIT=80%): the smallest memory.max of its cgroup (v2)
 * and the cgroup's ancestors, else physical memory.  Read once at start,
 * in a constructor of a malloc interposer (and by the memlimits command):
 * open/read into stack buffers, no allocation, no stdio. */
#define _GNU_SOURCE
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Where the last result came from; one call at a time (at start). */
static char source_buf[ML__PATH_MAX + 32];

/* The start of a small file, NUL-terminated in buf[cap]; its length, or -1
 * when it cannot be opened or read.  O_NONBLOCK: a FIFO planted in a
 * (test's) tree is not waited on. */
static ssize_t read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return -1;
	size_t len = 0;
	while (len < cap - 1) {
		ssize_t r = read(fd, buf + len, cap - 1 - len);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			close(fd);
			return -1;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	buf[len] = 0;
	return (ssize_t)len;
}

/* The cgroup v2 path ("0::/a/b") from a file in /proc/PID/cgroup's
 * format, into path[ML__PATH_MAX]; false when there is none. */
static bool cgroup_path(const char *self_cgroup, char *path)
{
	char buf[8192];
	ssize_t len = read_small(self_cgroup, buf, sizeof buf);
	if (len < 0)
		return false;
	/* A file longer than buf: its last line may be cut short. */
	bool full = (size_t)len == sizeof buf - 1;
	for (const char *l = buf; *l;) {
		const char *end = strchrnul(l, '\n');
		size_t n = (size_t)(end - l);
		/* "/.." when the cgroup is outside our namespace: its files
		 * are not under the mount. */
		if (n > 3 && !memcmp(l, "0::/", 4) && n - 3 < ML__PATH_MAX &&
		    !(n >= 6 && !memcmp(l + 3, "/..", 3)) && (*end || !full)) {
			memcpy(path, l + 3, n - 3);
			path[n - 3] = 0;
			return true;
		}
		l = *end ? end + 1 : end;
	}
	return false;
}

/* memory.max in dir (root + rel): its bytes, or UINT64_MAX for none
 * ("max", missing, unreadable; garbage is said once per call). */
static uint64_t memory_max(const char *root, const char *rel, bool *said)
{
	char file[ML__PATH_MAX + 64], buf[64];
	struct ml__out o = {.buf = file, .cap = sizeof file - 1, .fd = -1};
	ml__out_puts(&o, root);
	ml__out_puts(&o, rel);
	ml__out_puts(&o, rel[1] ? "/memory.max" : "memory.max");
	if (o.cut)
		return UINT64_MAX;
	file[o.len] = 0;
	ssize_t n = read_small(file, buf, sizeof buf);
	if (n < 0)
		return UINT64_MAX;
	if (n > 0 && buf[n - 1] == '\n')
		buf[--n] = 0;
	uint64_t v;
	if (!strcmp(buf, "max"))
		return UINT64_MAX;
	if (ml__parse_u64(buf, &v) == 0)
		return v;
	if (!*said)
		ml__diag("%s: neither a number nor \"max\": taken as no limit",
		         file);
	*said = true;
	return UINT64_MAX;
}

uint64_t ml__memory_total_from(const char *self_cgroup, const char *cgroup_root,
                               const char **source)
{
	char path[ML__PATH_MAX];
	uint64_t best = UINT64_MAX;
	bool said = false;
	if (cgroup_path(self_cgroup, path)) {
		/* The leaf, then each ancestor up to the root: the
		 * smallest limit is the one that applies. */
		size_t len = strlen(path);
		while (len && path[len - 1] == '/')
			len--; /* "/" is the root: "" */
		for (;;) {
			path[len] = 0;
			uint64_t v =
			    memory_max(cgroup_root, len ? path : "/", &said);
			if (v < best) {
				struct ml__out o = {.buf = source_buf,
				                    .cap =
				                        sizeof source_buf - 1,
				                    .fd = -1};
				ml__out_puts(&o, "cgroup ");
				ml__out_puts(&o, len ? path : "");
				ml__out_puts(&o, "/memory.max");
				source_buf[o.cut ? 0 : o.len] = 0;
				best = v;
			}
			if (!len)
				break;
			while (len && path[len - 1] != '/')
				len--;
			while (len && path[len - 1] == '/')
				len--;
		}
		if (best != UINT64_MAX) {
			*source = source_buf;
			return best;
		}
	}
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || size <= 0) {
		*source = NULL;
		return 0;
	}
	*source = "physical memory";
	return (uint64_t)pages > UINT64_MAX / (uint64_t)size
	           ? UINT64_MAX
	           : (uint64_t)pages * (uint64_t)size;
}

uint64_t ml__memory_total(const char *cgroup_root, const char **source)
{
	return ml__memory_total_from("/proc/self/cgroup", cgroup_root, source);
}

uint64_t ml__resident_bytes(void)
{
	char buf[128];
	if (read_small("/proc/self/statm", buf, sizeof buf) <= 0)
		return 0;
	/* "size resident shared ...", in pages. */
	const char *p = strchr(buf, ' ');
	uint64_t pages = 0;
	for (p = p ? p + 1 : buf; *p >= '0' && *p <= '9'; p++)
		pages = pages * 10 + (uint64_t)(*p - '0');
	return pages * (uint64_t)sysconf(_SC_PAGESIZE);
}

/* A system call with no errno and no libc wrapper (a program or a
 * sandbox may interpose open and read): -errno on failure. */
static long raw_call(long nr, long a, long b, long c, long d)
{
#if defined(__x86_64__) && !defined(ML_NO_ASM)
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall"
	                 : "=a"(r)
	                 : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10)
	                 : "rcx", "r11", "memory");
	return r;
#else
	int e = errno;
	long r = syscall(nr, a, b, c, d);
	if (r < 0)
		r = -errno;
	errno = e;
	return r;
#endif
}

uint64_t ml__resident_private(void)
{
	char buf[128];
	long fd = raw_call(SYS_openat, AT_FDCWD, (long)"/proc/self/statm",
	                   O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return UINT64_MAX;
	long len;
	do
		len = raw_call(SYS_read, fd, (long)buf, sizeof buf - 1, 0);
	while (len == -EINTR);
	raw_call(SYS_close, fd, 0, 0, 0);
	if (len <= 0)
		return UINT64_MAX;
	buf[len] = 0;
	/* "size resident shared text lib data dt", in pages: shared is
	 * the resident file-backed and shared memory pages, so resident
	 * less shared is the anonymous (private) pages. */
	uint64_t f[3] = {0, 0, 0};
	const char *p = buf;
	for (int i = 0; i < 3; i++) {
		if (*p < '0' || *p > '9')
			return UINT64_MAX;
		for (; *p >= '0' && *p <= '9'; p++)
			f[i] = f[i] * 10 + (uint64_t)(*p - '0');
		if (*p == ' ')
			p++;
	}
	if (f[2] > f[1])
		return UINT64_MAX;
	return (f[1] - f[2]) * (uint64_t)getpagesize();
}
