/* The memory a process may use (lib/util/memtotal.c), over fake cgroup v2
 * trees in a temporary directory: the smallest memory.max of the cgroup
 * and its ancestors, "max", missing files and garbage meaning none, and
 * physical memory when no level sets one.  And the percentage parser
 * (lib/util/parse.c) that --heap-limit P% and MEMLIMITS_HEAP_LIMIT=P% use.
 * The library's files are compiled in: no interposer here. */
#define _GNU_SOURCE
#include "util/util.h"
#include "../tap/tap.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char root[256]; /* the fake cgroup mount */
static char self[300]; /* the fake /proc/self/cgroup */

static uint64_t physical(void)
{
	return (uint64_t)sysconf(_SC_PHYS_PAGES) *
	       (uint64_t)sysconf(_SC_PAGESIZE);
}

static void put_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	if (!f || fputs(text, f) < 0 || fclose(f) != 0)
		tap_bail("cannot write %s", path);
}

/* mkdir -p root/rel; rel starts with '/'. */
static void make_dirs(const char *rel)
{
	char p[1024];
	if (!*rel)
		return; /* the root itself */
	snprintf(p, sizeof p, "%s%s", root, rel);
	for (char *s = p + strlen(root) + 1; *s; s++)
		if (*s == '/') {
			*s = 0;
			mkdir(p, 0755);
			*s = '/';
		}
	mkdir(p, 0755);
}

/* root/rel/memory.max := text (NULL: removed). */
static void set_max(const char *rel, const char *text)
{
	char p[1024];
	make_dirs(rel);
	snprintf(p, sizeof p, "%s%s/memory.max", root, rel);
	if (text)
		put_file(p, text);
	else
		unlink(p);
}

/* A fresh tree: the process in cgroup `path` (a cgroup file holding v1
 * lines too, as on a hybrid system), no memory.max anywhere. */
static void fresh(const char *path)
{
	char cmd[600];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", root, root);
	if (system(cmd) != 0)
		tap_bail("cannot empty %s", root);
	char text[1024];
	snprintf(text, sizeof text,
	         "12:memory:/v1/elsewhere\n3:cpu:/\n0::%s\n1:name=systemd:/\n",
	         path);
	put_file(self, text);
}

/* ml__memory_total_from on the fake tree; the diagnostics it printed
 * (fd 2 taken into a file meanwhile) counted into *lines. */
static uint64_t total(const char **src, int *lines)
{
	char errp[sizeof self + 8];
	snprintf(errp, sizeof errp, "%s.err", self);
	int fd = open(errp, O_RDWR | O_CREAT | O_TRUNC, 0644), saved = dup(2);
	if (fd < 0 || saved < 0)
		tap_bail("cannot capture stderr");
	fflush(stderr);
	dup2(fd, 2);
	uint64_t v = ml__memory_total_from(self, root, src);
	dup2(saved, 2);
	close(saved);
	char buf[2048];
	ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
	close(fd);
	*lines = 0;
	for (ssize_t i = 0; i < n; i++)
		*lines += buf[i] == '\n';
	if (n > 0) {
		buf[n] = 0;
		tap_diag("stderr: %s", buf);
	}
	return v;
}

/* One case: the total and its source as expected, no diagnostic unless
 * `diags` says how many. */
static void expect(const char *name, uint64_t want, const char *want_src,
                   int diags)
{
	const char *src = "unset";
	int lines;
	uint64_t v = total(&src, &lines);
	bool good = v == want && src && !strcmp(src, want_src);
	if (!tap_ok(good && lines == diags, "%s: %s", name, want_src))
		tap_diag("got %llu from %s (%d diagnostic lines), want %llu",
		         (unsigned long long)v, src ? src : "(null)", lines,
		         (unsigned long long)want);
}

static void cgroup_trees(void)
{
	fresh("/a/b/c");
	set_max("/a/b/c", "1000\n");
	set_max("/a/b", "max\n");
	set_max("/a", "2000\n");
	expect("a limit at the leaf", 1000, "cgroup /a/b/c/memory.max", 0);

	fresh("/a/b/c");
	set_max("/a/b/c", "max\n");
	set_max("/a/b", "5000\n");
	set_max("/a", "max\n");
	expect("a limit at a parent only", 5000, "cgroup /a/b/memory.max", 0);

	fresh("/a/b/c");
	set_max("/a/b/c", "9000\n");
	set_max("/a", "3000"); /* no newline: as good */
	expect("the smallest over the levels", 3000, "cgroup /a/memory.max", 0);

	fresh("/a/b/c");
	set_max("/a/b/c", "max\n");
	set_max("/a/b", "max\n");
	set_max("/a", "max\n");
	expect("\"max\" everywhere: physical memory", physical(),
	       "physical memory", 0);

	fresh("/a/b/c");
	make_dirs("/a/b/c");
	expect("no memory.max files: physical memory", physical(),
	       "physical memory", 0);

	fresh("/gone/away");
	expect("no such cgroup directory: physical memory", physical(),
	       "physical memory", 0);

	fresh("/a/b/c");
	set_max("/a/b/c", "12abc\n");
	set_max("/a/b", "7000\n");
	expect("garbage at the leaf: taken as none, said once", 7000,
	       "cgroup /a/b/memory.max", 1);

	fresh("/a/b/c");
	set_max("/a/b/c", "\x1b[2J\n");
	set_max("/a/b", "-5\n");
	set_max("/a", "\n");
	expect("garbage at every level: physical memory, one line", physical(),
	       "physical memory", 1);

	fresh("/");
	set_max("", "4096\n");
	expect("the root cgroup", 4096, "cgroup /memory.max", 0);

	fresh("/a/");
	set_max("/a", "8192\n");
	set_max("", "max\n");
	expect("a trailing slash", 8192, "cgroup /a/memory.max", 0);

	fresh("/a");
	set_max("/a", "0\n");
	expect("memory.max 0 is a limit", 0, "cgroup /a/memory.max", 0);

	/* Outside our cgroup namespace: its files are not under the
	 * mount (root/.. is not its parent). */
	fresh("/../x");
	set_max("", "4096\n");
	expect("a cgroup outside the namespace: physical memory", physical(),
	       "physical memory", 0);

	/* A cgroup file longer than the library reads (8 KiB), its 0:: line
	 * cut short at the end: not taken for a cgroup of that name (here
	 * /a/b, whose limit would be 1000). */
	fresh("/a");
	set_max("/a/b", "1000\n");
	set_max("/a", "6000\n");
	{
		char big[8300];
		size_t n = 0;
		while (n < 8191 - 40)
			n += (size_t)snprintf(big + n, sizeof big - n,
			                      "9:name=x:/%030u\n", (unsigned)n);
		snprintf(big + n, sizeof big - n, "%s",
		         "0::/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w\n");
		put_file(self, big);
		/* Cut inside "0::/a/b/...": byte 8191 is the last read. */
		if (8191 - n < 6 || 8191 - n > 40)
			tap_bail("cgroup file layout: 0:: line at %zu", n);
	}
	expect("a 0:: line cut by the read: not used", physical(),
	       "physical memory", 0);

	/* cgroup v1 only: no 0:: line. */
	put_file(self, "12:memory:/v1\n3:cpu:/\n");
	set_max("/v1", "4096\n");
	expect("cgroup v1 only: physical memory", physical(), "physical memory",
	       0);

	char saved[sizeof self];
	memcpy(saved, self, sizeof self);
	snprintf(self, sizeof self, "%s/no-such-file", root);
	expect("no cgroup file: physical memory", physical(), "physical memory",
	       0);
	memcpy(self, saved, sizeof self);
}

/* ml__memory_total itself reads /proc/self/cgroup: a tree made at our
 * real cgroup path answers through it. */
static void real_self(void)
{
	char line[4096] = "", path[4096] = "";
	FILE *f = fopen("/proc/self/cgroup", "r");
	while (f && fgets(line, sizeof line, f))
		if (!strncmp(line, "0::/", 4)) {
			line[strcspn(line, "\n")] = 0;
			snprintf(path, sizeof path, "%s", line + 3);
		}
	if (f)
		fclose(f);
	if (!path[0] || strstr(path, "/..")) {
		tap_skip(1, "no cgroup v2 line in /proc/self/cgroup");
		return;
	}
	fresh("/");
	size_t n = strlen(path);
	while (n > 1 && path[n - 1] == '/')
		path[--n] = 0;
	bool at_root = !strcmp(path, "/");
	set_max(at_root ? "" : path, "123456789\n");
	char want[4200];
	snprintf(want, sizeof want, "cgroup %s/memory.max",
	         at_root ? "" : path);
	const char *src = NULL;
	uint64_t v = ml__memory_total(root, &src);
	tap_ok(v == 123456789 && src && !strcmp(src, want),
	       "ml__memory_total reads /proc/self/cgroup (%s)", want);
}

static void percent(void)
{
	static const struct {
		const char *s;
		uint64_t want;
	} good[] = {
	    {"80%", 80ull * ML__PERCENT_UNIT},
	    {"12.5%", 12500000000ull},
	    {"100%", 100ull * ML__PERCENT_UNIT},
	    {"100.000000000%", 100ull * ML__PERCENT_UNIT},
	    {"0.000000001%", 1},
	    {"007%", 7ull * ML__PERCENT_UNIT},
	    {"33.333333333%", 33333333333ull},
	};
	for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
		uint64_t v = 0;
		int r = ml__parse_percent(good[i].s, &v);
		tap_ok(r == 0 && v == good[i].want, "'%s' is %llu", good[i].s,
		       (unsigned long long)good[i].want);
	}
	static const char *const bad[] = {
	    "0%",
	    "0.0%",
	    "101%",
	    "100.000000001%",
	    "x%",
	    "%",
	    "",
	    "80",
	    "80%%",
	    " 80%",
	    "80% ",
	    "-5%",
	    "+5%",
	    ".5%",
	    "5.%",
	    "1.0000000001%",
	    "1e2%",
	    "5 %",
	    "99999999999%",
	    "18446744073709551617%",
	    "50%x",
	    "0x10%",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 42;
		int r = ml__parse_percent(bad[i], &v);
		tap_ok(r == -1 && v == 42, "'%s' is refused, nothing written",
		       bad[i]);
	}
	uint64_t v = 42;
	tap_ok(ml__parse_percent(NULL, &v) == -1 && v == 42, "NULL refused");

	static const struct {
		uint64_t total;
		const char *pct;
		uint64_t want;
	} of[] = {
	    {8589934592ull, "80%", 6871947673ull}, /* 6871947673.6 */
	    {1000, "12.5%", 125},
	    {3, "33.333333333%", 0},
	    {300, "33.333333333%", 99},
	    {UINT64_MAX, "100%", UINT64_MAX},
	    {UINT64_MAX, "50%", UINT64_MAX / 2},
	    {UINT64_MAX, "0.000000001%", 184467440ull},
	    {0, "100%", 0},
	};
	for (size_t i = 0; i < sizeof of / sizeof of[0]; i++) {
		uint64_t p = 0;
		ml__parse_percent(of[i].pct, &p);
		uint64_t got = ml__percent_of(of[i].total, p);
		if (!tap_ok(got == of[i].want, "%s of %llu is %llu", of[i].pct,
		            (unsigned long long)of[i].total,
		            (unsigned long long)of[i].want))
			tap_diag("got %llu", (unsigned long long)got);
	}
}

/* Sizes take ASCII digits only (issue 41): Arabic-Indic "٣٤" and
 * fullwidth "３４" (UTF-8) are refused by the one size parser, and 0 parses
 * as 0 (its callers refuse it as a limit). */
static void size_digits(void)
{
	static const char *const bad[] = {
	    "\xd9\xa3\xd9\xa4",
	    "\xef\xbc\x93\xef\xbc\x94",
	    "3\xd9\xa4",
	    "\xd9\xa3"
	    "4KiB",
	    "\xef\xbc\x93\xef\xbc\x94MiB",
	    "1.\xd9\xa4",
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		uint64_t v = 42;
		int a = ml__parse_size(bad[i], &v);
		int b = ml__parse_limit(bad[i], &v);
		tap_ok(a == -1 && b == -1 && v == 42,
		       "non-ASCII digits refused (case %zu)", i);
	}
	uint64_t v = 42;
	tap_ok(ml__parse_size("0", &v) == 0 && v == 0, "0 parses as 0");
	tap_ok(ml__parse_size("34", &v) == 0 && v == 34, "34 parses as 34");
}

int main(void)
{
	const char *tmp = getenv("TMPDIR");
	snprintf(root, sizeof root, "%s/ml-memtotal.XXXXXX",
	         tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(root))
		tap_bail("mkdtemp %s", root);
	snprintf(self, sizeof self, "%s.cgroup", root);
	TAP_RUN(percent);
	TAP_RUN(size_digits);
	TAP_RUN(cgroup_trees);
	TAP_RUN(real_self);
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "rm -rf '%s' '%s' '%s.err'", root, self,
	         self);
	if (system(cmd) != 0)
		tap_diag("cannot remove %s", root);
	return tap_done();
}
