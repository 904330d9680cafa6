/* Requests glibc refuses whatever the limits (malloc(SIZE_MAX / 2), as
 * CPython's tests make on purpose; aligned_alloc with an alignment glibc
 * rejects): each fails exactly as glibc itself fails it (NULL, the same
 * errno or error number), and a failed allocation is charged to nothing:
 * the task that made it is not interrupted, whatever its delivery or
 * limits, and its estimate of allocated bytes does not move. */
#define _GNU_SOURCE
#include "../tap/tap.h"

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <malloc.h>
#include <memlimits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define HUGE_REQUEST (SIZE_MAX / 2)
#define TIB ((uint64_t)1 << 40)

/* glibc's own functions, not the library's. */
static struct {
	void *(*malloc)(size_t);
	void *(*calloc)(size_t, size_t);
	void *(*realloc)(void *, size_t);
	void *(*memalign)(size_t, size_t);
	void *(*aligned_alloc)(size_t, size_t);
	int (*posix_memalign)(void **, size_t, size_t);
	void *(*valloc)(size_t);
	void *(*pvalloc)(size_t);
	void (*free)(void *);
} libc;

/* Members an allocator lacks, made as the library makes them: from its
 * aligned allocation (jemalloc has no pvalloc). */
static void *made_valloc(size_t n)
{
	return libc.memalign((size_t)getpagesize(), n);
}
static void *made_pvalloc(size_t n)
{
	size_t page = (size_t)getpagesize();
	if (n > SIZE_MAX - page) {
		errno = ENOMEM;
		return NULL;
	}
	return libc.memalign(page, n ? (n + page - 1) & ~(page - 1) : page);
}

/* The allocator underneath: glibc's, or the one ML_TEST_ALLOCATOR names
 * (tests/api/test-allocators.sh preloads it after the library).  dlsym
 * on a handle also searches its dependencies: only the object's own
 * definitions count. */
static void find_libc(void)
{
	const char *name = getenv("ML_TEST_ALLOCATOR");
	void *h = dlopen(name ? name : "libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		tap_bail("cannot find %s: %s", name ? name : "libc.so.6",
		         dlerror());
	Dl_info base, at;
	if (!dladdr(dlsym(h, "malloc"), &base))
		tap_bail("no malloc in the allocator");
#define GET(f)                                                  \
	do {                                                    \
		*(void **)&libc.f = dlsym(h, #f);               \
		if (libc.f && (!dladdr((void *)libc.f, &at) ||  \
		               at.dli_fbase != base.dli_fbase)) \
			libc.f = NULL;                          \
	} while (0)
	GET(malloc);
	GET(calloc);
	GET(realloc);
	GET(memalign);
	GET(aligned_alloc);
	GET(posix_memalign);
	GET(valloc);
	GET(pvalloc);
	GET(free);
#undef GET
	if (!libc.valloc)
		libc.valloc = made_valloc;
	if (!libc.pvalloc)
		libc.pvalloc = made_pvalloc;
	if (!libc.malloc || !libc.calloc || !libc.realloc || !libc.memalign ||
	    !libc.aligned_alloc || !libc.posix_memalign || !libc.free)
		tap_bail("the allocator lacks a member of the family");
}

enum fn {
	F_MALLOC,
	F_CALLOC,
	F_REALLOC,
	F_MEMALIGN,
	F_ALIGNED_ALLOC,
	F_POSIX_MEMALIGN,
	F_VALLOC,
	F_PVALLOC,
	NFN
};
static const char *const fn_name[NFN] = {
    "malloc",        "calloc",         "realloc", "memalign",
    "aligned_alloc", "posix_memalign", "valloc",  "pvalloc"};

struct result {
	void *p;
	int err; /* errno after the call */
	int ret; /* posix_memalign's result */
};

/* The library's memalign and aligned_alloc through pointers: their
 * declarations promise the alignment asked for (alloc_align), which an
 * invalid one cannot keep, and -fsanitize=alignment checks that promise. */
static void *(*volatile lib_memalign)(size_t, size_t) = memalign;
static void *(*volatile lib_aligned_alloc)(size_t, size_t) = aligned_alloc;

/* One request of n bytes through the library (glibc = false) or glibc. */
static struct result request(enum fn f, size_t align, size_t n, bool glibc)
{
	struct result r = {NULL, 0, 0};
	void *old = NULL;
	if (f == F_REALLOC) {
		old = glibc ? libc.malloc(16) : malloc(16);
		memset(old, 7, 16);
	}
	errno = 0;
	switch (f) {
	case F_MALLOC:
		r.p = glibc ? libc.malloc(n) : malloc(n);
		break;
	case F_CALLOC:
		r.p = glibc ? libc.calloc(1, n) : calloc(1, n);
		break;
	case F_REALLOC:
		r.p = glibc ? libc.realloc(old, n) : realloc(old, n);
		break;
	case F_MEMALIGN:
		r.p = glibc ? libc.memalign(align, n) : lib_memalign(align, n);
		break;
	case F_ALIGNED_ALLOC:
		r.p = glibc ? libc.aligned_alloc(align, n)
		            : lib_aligned_alloc(align, n);
		break;
	case F_POSIX_MEMALIGN:
		r.ret = glibc ? libc.posix_memalign(&r.p, align, n)
		              : posix_memalign(&r.p, align, n);
		break;
	case F_VALLOC:
		r.p = glibc ? libc.valloc(n) : valloc(n);
		break;
	case F_PVALLOC:
		r.p = glibc ? libc.pvalloc(n) : pvalloc(n);
		break;
	case NFN:
		break;
	}
	r.err = errno;
	if (old) {
		/* A failed realloc leaves the old block as it was. */
		if (!r.p && ((char *)old)[15] != 7)
			r.err = -1;
		(glibc ? libc.free : free)(r.p ? r.p : old);
		r.p = r.p ? (void *)1 : NULL;
	} else if (r.p) {
		(glibc ? libc.free : free)(r.p);
		r.p = (void *)1;
	}
	return r;
}

struct body {
	enum fn f;
	struct result got;
	void *after; /* an ordinary allocation after the refused one */
};

static void *body(void *arg)
{
	struct body *b = arg;
	b->got = request(b->f, 64, HUGE_REQUEST, false);
	b->after = malloc(1000);
	free(b->after);
	return NULL;
}

/* The huge request inside a task: not interrupted, nothing charged, and
 * the failure as glibc's. */
static void test_huge_in_task(enum fn f, const char *kind, ml_limits lim)
{
	struct result want = request(f, 64, HUGE_REQUEST, true);
	struct body b = {f, {NULL, 0, 0}, NULL};
	ml_outcome out;
	ml_status st = ml_run(&lim, body, &b, &out);
	tap_ok(st == ML_OK && b.after != NULL && out.allocated < TIB,
	       "%s(SIZE_MAX/2) in a %s task: not interrupted (status %s), "
	       "later allocations succeed, %llu bytes charged",
	       fn_name[f], kind, ml_status_str(st),
	       (unsigned long long)out.allocated);
	tap_ok(b.got.p == NULL && b.got.err == want.err &&
	           b.got.ret == want.ret,
	       "%s(SIZE_MAX/2) fails as glibc's: errno %d (glibc %d), "
	       "result %d (glibc %d)",
	       fn_name[f], b.got.err, want.err, b.got.ret, want.ret);
}

/* aligned_alloc, memalign and posix_memalign with every kind of alignment
 * and sizes that are and are not multiples of it: the library answers as
 * the glibc underneath does (aligned_alloc rejects alignments that are not
 * powers of two from glibc 2.38 on). */
static void test_alignments(void)
{
	static const size_t aligns[] = {0, 1, 3, 8, 24, 48, 64, 100, 4096};
	static const size_t sizes[] = {0, 1, 10, 64, 100, 4097};
	static const enum fn fns[] = {F_ALIGNED_ALLOC, F_MEMALIGN,
	                              F_POSIX_MEMALIGN};
	for (size_t k = 0; k < sizeof fns / sizeof fns[0]; k++) {
		int bad = 0, cases = 0;
		for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++)
			for (size_t j = 0; j < sizeof sizes / sizeof sizes[0];
			     j++) {
				struct result want =
				    request(fns[k], aligns[i], sizes[j], true);
				struct result got =
				    request(fns[k], aligns[i], sizes[j], false);
				cases++;
				if (!want.p != !got.p || want.ret != got.ret ||
				    (!want.p && want.err != got.err)) {
					bad++;
					tap_diag("%s(%zu, %zu): glibc %s "
					         "errno %d ret %d, library %s "
					         "errno %d ret %d",
					         fn_name[fns[k]], aligns[i],
					         sizes[j],
					         want.p ? "ok" : "NULL",
					         want.err, want.ret,
					         got.p ? "ok" : "NULL", got.err,
					         got.ret);
				}
			}
		tap_ok(bad == 0,
		       "%s: all %d alignment/size cases as glibc %s (%d "
		       "differ)",
		       fn_name[fns[k]], cases, gnu_get_libc_version(), bad);
	}
}

/* A request small enough to be granted in principle, failed by the
 * allocator for lack of memory (RLIMIT_AS): no probe catches it, the
 * failure after sampling must give the samples back.  In a child, which
 * keeps the limit to itself. */
#define SMALL_FAIL ((size_t)16 << 20)

static void *small_body(void *arg)
{
	struct body *b = arg;
	b->got = request(b->f, 64, SMALL_FAIL, false);
	return NULL;
}

static void child_out_of_memory(void *arg)
{
	(void)arg;
	long vm = tap_proc_kb("VmSize");
	struct rlimit rl;
	if (vm < 0)
		_exit(100);
	rl.rlim_cur = rl.rlim_max = (rlim_t)vm * 1024 + (4 << 20);
	if (setrlimit(RLIMIT_AS, &rl) != 0)
		_exit(101);
	int bad = 0;
	for (int f = 0; f < NFN; f++) {
		ml_limits lim = ML_LIMITS_INIT;
		lim.alloc_bytes = TIB;
		lim.delivery = ML_DELIVER_FLAG;
		struct body b = {(enum fn)f, {NULL, 0, 0}, NULL};
		ml_outcome out;
		ml_status st = ml_run(&lim, small_body, &b, &out);
		/* mimalloc may have the memory reserved already: a request
		 * it grants tests nothing here (glibc's must fail). */
		if (st == ML_OK && b.got.p && getenv("ML_TEST_ALLOCATOR"))
			continue; /* (request() freed it) */
		if (st != ML_OK || b.got.p || out.allocated >= SMALL_FAIL / 4) {
			tap_write("# %s(16 MiB) out of memory: status %s, %s, "
			          "%llu bytes charged",
			          fn_name[f], ml_status_str(st),
			          b.got.p ? "allocated" : "NULL",
			          (unsigned long long)out.allocated);
			bad++;
		}
	}
	_exit(bad);
}

/* Huge requests inside FAIL, JUMP and FLAG tasks with a distant
 * allocation limit. */
static void test_huge_alloc_limits(void)
{
	ml_limits fail = ML_LIMITS_INIT, jump = ML_LIMITS_INIT,
	          flag = ML_LIMITS_INIT;
	fail.alloc_bytes = TIB;
	fail.delivery = ML_DELIVER_FAIL;
	jump.alloc_bytes = TIB;
	jump.delivery = ML_DELIVER_JUMP;
	flag.alloc_bytes = TIB;
	flag.delivery = ML_DELIVER_FLAG;
	for (int f = 0; f < NFN; f++) {
		test_huge_in_task((enum fn)f, "FAIL, 1 TiB allocation limit",
		                  fail);
		test_huge_in_task((enum fn)f, "JUMP, 1 TiB allocation limit",
		                  jump);
		test_huge_in_task((enum fn)f, "FLAG, 1 TiB allocation limit",
		                  flag);
	}
}

/* The heap limit: the meter on, 1 GiB of room. */
static void test_huge_heap_limited(void)
{
	ml_limits global = ML_LIMITS_INIT;
	global.global = true;
	global.delivery = ML_DELIVER_FAIL;
	ml_set_global_memory_limit(ml_global_memory_usage() + (1u << 30));
	for (int f = 0; f < NFN; f++)
		test_huge_in_task((enum fn)f, "heap-limited", global);
	ml_set_global_memory_limit(ML_NO_LIMIT);
}

static void test_out_of_memory(void)
{
	tap_is(tap_child(child_out_of_memory, NULL, 60), 0,
	       "a 16 MiB request failed by the allocator (RLIMIT_AS) is "
	       "charged to nothing, for each of the 8 functions");
}

int main(void)
{
	/* valgrind replaces glibc's allocator below ours (and aborts at
	 * pvalloc); RLIMIT_AS does not bind under it. */
	if (tap_under_valgrind()) {
		tap_write("1..0 # SKIP compared with glibc's own allocator, "
		          "which valgrind replaces");
		return 0;
	}
	find_libc();
	TAP_RUN(test_huge_alloc_limits);
	TAP_RUN(test_huge_heap_limited);
	TAP_RUN(test_alignments);
	TAP_RUN(test_out_of_memory);
	return tap_done();
}
