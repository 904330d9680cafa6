/* Run mode: where the memory went.  A heap profile built from the samples
 * (call stacks weighted by sampled bytes), the stack that tripped a limit,
 * and at exit (or at the trip, in abort mode) a report and a collapsed-stack
 * profile (memlimits(1), "REPORT").
 *
 * The sample hook runs inside malloc: stacks come from ml__backtrace into a
 * stack buffer and go into a fixed open-addressing table in our own mmap'd
 * memory, claimed with compare-and-swap (no lock, so a fork or a signal
 * cannot leave one held).  Symbols are looked up only when the report is
 * written, once per distinct address: dladdr for exported names, the
 * object's own .symtab for the rest, object+offset when stripped. */
#define _GNU_SOURCE
#include "run/run.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_DEPTH 32
#define CAPTURE 48  /* room for our own frames above the user's */
#define NSITES 4096 /* distinct stacks kept; the rest: "other" */
#define MAX_PROBES 64
#define TOP_SITES 8          /* stacks listed in the report */
#define SITE_FRAMES 16       /* frames shown per listed stack */
#define NSYMS 16384          /* symbol cache entries (distinct addresses) */
#define NOBJS 128            /* objects whose .symtab we read */
#define OUT_BYTES (1u << 20) /* output buffer, flushed at line boundaries */

struct site {
	_Atomic uint64_t key; /* 0: free; the stack's hash, odd */
	_Atomic uint64_t bytes;
	_Atomic uint64_t samples;
	_Atomic uint32_t ready; /* ips and depth are written */
	uint32_t depth;         /* | TRUNCATED when the stack was cut */
	uintptr_t ip[MAX_DEPTH];
};
#define TRUNCATED 0x80000000u

static struct site *_Atomic sites;
static _Atomic uint64_t total_bytes, total_samples, other_bytes;

/* The first stack that tripped a limit. */
static struct {
	ml_status why;
	uint64_t n;
	uint32_t depth;
	uintptr_t ip[MAX_DEPTH];
} trip;
static _Atomic int written;

static uintptr_t self_start, self_end;

/* ---- Capture (inside malloc) ------------------------------------------ */

static void find_self(void)
{
	struct ml__object o;
	if (ml__find_object((uintptr_t)&find_self, &o) == 0) {
		self_end = o.end;
		self_start = o.start;
	}
}

/* The caller's stack without the library's own frames on top (they are
 * the allocation path), innermost first, at most MAX_DEPTH frames. */
static uint32_t capture(uintptr_t *ip)
{
	void *buf[CAPTURE];
	int n = ml__backtrace(buf, CAPTURE);
	if (!self_end)
		find_self();
	int i = 0;
	while (i < n && (uintptr_t)buf[i] >= self_start &&
	       (uintptr_t)buf[i] < self_end)
		i++;
	uint32_t d = 0;
	for (; i < n && d < MAX_DEPTH; i++)
		ip[d++] = (uintptr_t)buf[i];
	/* A full buffer may have been cut short too. */
	if (i < n || n == CAPTURE)
		d |= TRUNCATED;
	return d;
}

static uint64_t hash_stack(const uintptr_t *ip, uint32_t depth)
{
	uint64_t h = 0x9e3779b97f4a7c15u ^ depth;
	for (uint32_t i = 0; i < (depth & ~TRUNCATED); i++) {
		h = (h ^ ip[i]) * 0xff51afd7ed558ccdu;
		h ^= h >> 32;
	}
	return h | 1;
}

static struct site *table(void)
{
	struct site *s = atomic_load_explicit(&sites, memory_order_acquire);
	if (ml__likely(s != NULL))
		return s;
	/* Pages are only touched as stacks arrive. */
	struct site *fresh = ml__raw_alloc(NSITES * sizeof *fresh);
	if (!fresh)
		return NULL;
	if (!atomic_compare_exchange_strong(&sites, &s, fresh)) {
		ml__raw_free(fresh, NSITES * sizeof *fresh);
		return s;
	}
	return fresh;
}

static void add(const uintptr_t *ip, uint32_t depth, uint64_t bytes, uint64_t s)
{
	struct site *tab = table();
	uint64_t h = hash_stack(ip, depth);
	for (unsigned p = 0; tab && p < MAX_PROBES; p++) {
		struct site *e = &tab[(h + p) & (NSITES - 1)];
		uint64_t k =
		    atomic_load_explicit(&e->key, memory_order_acquire);
		if (k == 0) {
			if (atomic_compare_exchange_strong(&e->key, &k, h)) {
				e->depth = depth;
				memcpy(e->ip, ip,
				       (depth & ~TRUNCATED) * sizeof *ip);
				atomic_store_explicit(&e->ready, 1,
				                      memory_order_release);
				k = h;
			}
		}
		/* 64-bit hashes of at most NSITES stacks: a collision is
		 * negligible, so the hash alone identifies the stack. */
		if (k == h) {
			atomic_fetch_add_explicit(&e->bytes, bytes,
			                          memory_order_relaxed);
			atomic_fetch_add_explicit(&e->samples, s,
			                          memory_order_relaxed);
			return;
		}
	}
	atomic_fetch_add_explicit(&other_bytes, bytes, memory_order_relaxed);
}

void ml__profile_sample(struct ml__thread *t, uint64_t s, uint64_t n)
{
	(void)n;
	uintptr_t ip[MAX_DEPTH];
	uint32_t depth = capture(ip);
	uint64_t bytes = s * (uint64_t)t->sampler.interval;
	atomic_fetch_add_explicit(&total_bytes, bytes, memory_order_relaxed);
	atomic_fetch_add_explicit(&total_samples, s, memory_order_relaxed);
	add(ip, depth, bytes, s);
}

void ml__profile_refused(struct ml__thread *t, uint64_t s)
{
	/* The same stack as the sample just taken (our own frames are
	 * skipped): take its bytes back, modulo 2^64. */
	uintptr_t ip[MAX_DEPTH];
	uint32_t depth = capture(ip);
	uint64_t bytes = s * (uint64_t)t->sampler.interval;
	atomic_fetch_sub_explicit(&total_bytes, bytes, memory_order_relaxed);
	atomic_fetch_sub_explicit(&total_samples, s, memory_order_relaxed);
	add(ip, depth, -bytes, -s);
}

void ml__profile_trip(ml_status why, uint64_t n)
{
	/* Called once per process (runmode.c guards it). */
	trip.depth = capture(trip.ip);
	trip.n = n;
	trip.why = why;
}

/* A forked child starts an empty profile: the parent's samples are the
 * parent's.  (Only the pointer is dropped: the copy is never touched.) */
static void atfork_child(void)
{
	atomic_store(&sites, NULL);
	atomic_store(&total_bytes, 0);
	atomic_store(&total_samples, 0);
	atomic_store(&other_bytes, 0);
	trip.why = ML_OK;
	trip.depth = 0;
	atomic_store(&written, 0);
}

__attribute__((constructor(102))) static void report_init(void)
{
	/* After config.c's constructor (101) has read the environment; here
	 * and not at the first sample, where pthread_atfork could meet its
	 * own lock held (a fork handler that allocates). */
	if (ml__run.profiling)
		ml__atfork(NULL, NULL, atfork_child,
		           "a forked child's profile and report include its "
		           "parent's samples");
}

/* ---- Output without stdio --------------------------------------------- */

/* The rest out, the file closed; a failure said once, naming the file
 * (on our stderr, where a report on stderr that failed cannot go). */
static void finish(struct ml__out *o, const char *what, const char *path,
                   bool own_fd)
{
	ml__out_flush(o, o->len);
	if (own_fd && close(o->fd) != 0 && !o->err && errno != EINTR)
		o->err = errno;
	if (o->err)
		ml__out_failed(what, path, o->err);
}

static void put_x(struct ml__out *o, uint64_t v)
{
	ml__out_puts(o, "0x");
	ml__out_u(o, v, 16);
}

/* v/d with one decimal, rounded: "12.5". */
static void put_ratio(struct ml__out *o, uint64_t v, uint64_t d)
{
	if (!d) {
		ml__out_puts(o, "0.0");
		return;
	}
	unsigned __int128 tenths = ((unsigned __int128)v * 10 + d / 2) / d;
	ml__out_u(o, (uint64_t)(tenths / 10), 10);
	ml__out_puts(o, ".");
	ml__out_u(o, (uint64_t)(tenths % 10), 10);
}

/* "67108864 bytes (64.0 MiB)" */
static void put_size(struct ml__out *o, uint64_t v)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	ml__out_u(o, v, 10);
	ml__out_puts(o, " bytes");
	if (v < 1024)
		return;
	int u = 0;
	uint64_t d = 1024;
	while (u < 4 && v / d >= 1024) {
		d *= 1024;
		u++;
	}
	ml__out_puts(o, " (");
	put_ratio(o, v, d);
	ml__out_puts(o, " ");
	ml__out_puts(o, unit[u]);
	ml__out_puts(o, ")");
}

/* Paths may hold "%p": the process id, for one file per process.  A name
 * that does not fit in buf is refused, never cut short. */
static int open_out(const char *what, const char *path, char *buf, size_t cap)
{
	struct ml__out n = {.buf = buf, .cap = cap - 1, .fd = -1};
	for (const char *p = path; *p && !n.cut; p++) {
		if (p[0] == '%' && p[1] == 'p') {
			ml__out_u(&n, (uint64_t)getpid(), 10);
			p++;
		} else {
			ml__out_put(&n, p, 1);
		}
	}
	if (n.cut) {
		ml__diag("cannot write the %s to %s: the name is longer than "
		         "%zu bytes",
		         what, path, cap - 1);
		return -1;
	}
	buf[n.len] = 0;
	/* Appended: processes of one run share the file, memlimits run
	 * empties it first. */
	return ml__out_open(what, buf, O_CREAT | O_APPEND);
}

/* ---- Symbols ---------------------------------------------------------- */

/* An object's symbol table, read from its file (the main program's too,
 * which dladdr only knows through .dynsym). */
struct obj {
	uintptr_t bias;
	const void *map;
	size_t map_len;
	const Elf64_Sym *sym;
	size_t nsym;
	const char *str;
	size_t strsz;
	bool tried;
};

struct sym {
	uintptr_t ip; /* 0: free */
	const char *name;
	char *demangled;    /* ours to free */
	uintptr_t start;    /* the function's address, if named */
	const char *object; /* path */
	uintptr_t base;     /* the object's load address */
};

struct symbols {
	struct sym *cache;
	struct obj *objs;
	unsigned nobjs;
	char *(*demangle)(const char *, char *, size_t *, int *);
	char exe[4096];
};

/* C++ names read as written, with libstdc++'s own demangler: only where
 * the program has it loaded already (no dlopen) and where allocating is
 * safe.  At exit it is; a report written at the trip (abort mode) is
 * written inside an allocation, so it keeps the mangled names. */
static void find_demangler(struct symbols *sy)
{
	if (ml__run.on_limit == ML__ON_LIMIT_ABORT &&
	    atomic_load(&ml__run.fired) != ML_OK)
		return;
	*(void **)&sy->demangle = dlsym(RTLD_DEFAULT, "__cxa_demangle");
}

static void demangle(struct symbols *sy, struct sym *e)
{
	if (!sy->demangle || !e->name || strncmp(e->name, "_Z", 2) != 0)
		return;
	int status = -1;
	char *d = sy->demangle(e->name, NULL, NULL, &status);
	if (status == 0 && d)
		e->name = e->demangled = d;
	else
		free(d);
}

static void load_symtab(struct obj *ob, const char *path)
{
	ob->tried = true;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (size_t)st.st_size < sizeof(Elf64_Ehdr)) {
		close(fd);
		return;
	}
	size_t len = (size_t)st.st_size;
	const char *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return;
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)(const void *)m;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > len ||
	    (size_t)eh->e_shnum > (len - eh->e_shoff) / sizeof(Elf64_Shdr))
		goto unusable;
	const Elf64_Shdr *sh =
	    (const Elf64_Shdr *)(const void *)(m + eh->e_shoff);
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
			continue;
		const Elf64_Shdr *ss = &sh[i], *sstr = &sh[sh[i].sh_link];
		if (ss->sh_offset > len || ss->sh_size > len - ss->sh_offset ||
		    sstr->sh_offset > len ||
		    sstr->sh_size > len - sstr->sh_offset || !sstr->sh_size)
			goto unusable;
		ob->map = m;
		ob->map_len = len;
		ob->sym = (const Elf64_Sym *)(const void *)(m + ss->sh_offset);
		ob->nsym = ss->sh_size / sizeof(Elf64_Sym);
		ob->str = m + sstr->sh_offset;
		ob->strsz = sstr->sh_size;
		return;
	}
unusable: /* stripped, or not an ELF file we understand */
	munmap((void *)m, len);
}

static const char *symtab_lookup(const struct obj *ob, uintptr_t addr,
                                 uintptr_t *start)
{
	const Elf64_Sym *best = NULL;
	for (size_t i = 0; i < ob->nsym; i++) {
		const Elf64_Sym *s = &ob->sym[i];
		int type = ELF64_ST_TYPE(s->st_info);
		if ((type != STT_FUNC && type != STT_GNU_IFUNC) ||
		    s->st_shndx == SHN_UNDEF || s->st_name >= ob->strsz)
			continue;
		if (addr >= s->st_value && addr - s->st_value < s->st_size) {
			best = s;
			break;
		}
	}
	if (!best ||
	    !memchr(ob->str + best->st_name, 0, ob->strsz - best->st_name))
		return NULL;
	*start = best->st_value + ob->bias;
	return ob->str + best->st_name;
}

static struct obj *object_for(struct symbols *sy, struct link_map *lm,
                              const char *path)
{
	for (unsigned i = 0; sy->objs && i < sy->nobjs; i++)
		if (sy->objs[i].bias == lm->l_addr)
			return &sy->objs[i];
	if (!sy->objs || sy->nobjs == NOBJS)
		return NULL;
	struct obj *ob = &sy->objs[sy->nobjs++];
	memset(ob, 0, sizeof *ob);
	ob->bias = lm->l_addr;
	load_symtab(ob, path);
	return ob;
}

static const struct sym *lookup(struct symbols *sy, uintptr_t ip)
{
	static struct sym none;
	if (!sy->cache)
		return &none;
	uint64_t h = ip * 0x9e3779b97f4a7c15u;
	struct sym *e = NULL;
	for (unsigned p = 0; p < NSYMS; p++) {
		e = &sy->cache[(h >> 20 ^ p) & (NSYMS - 1)];
		if (e->ip == ip)
			return e;
		if (!e->ip)
			break;
		e = NULL;
	}
	if (!e) { /* full: look up without remembering */
		e = &none;
		memset(e, 0, sizeof *e);
	}
	e->ip = ip;
	/* A return address may lie just past its function's end. */
	uintptr_t at = ip - 1;
	Dl_info info;
	struct link_map *lm = NULL;
	if (!dladdr1((void *)at, &info, (void **)&lm, RTLD_DL_LINKMAP) || !lm)
		return e;
	bool main_prog = !lm->l_name || !lm->l_name[0];
	e->object = main_prog ? sy->exe : lm->l_name;
	e->base = (uintptr_t)info.dli_fbase;
	if (info.dli_sname && info.dli_saddr) {
		e->name = info.dli_sname;
		e->start = (uintptr_t)info.dli_saddr;
		if (e != &none)
			demangle(sy, e);
		return e;
	}
	/* Not exported: the object's full symbol table, if it has one. */
	if (!main_prog && lm->l_name[0] != '/')
		return e; /* the vdso */
	struct obj *ob = object_for(sy, lm, e->object);
	uintptr_t start;
	const char *name;
	if (ob && ob->nsym && (name = symtab_lookup(ob, at - ob->bias, &start)))
		e->name = name, e->start = start;
	if (e != &none)
		demangle(sy, e);
	return e;
}

static const char *base_name(const char *path)
{
	const char *b = strrchr(path, '/');
	return b ? b + 1 : path;
}

/* A name for a profile frame: no ';' (the separator) and no newline. */
static void put_frame_name(struct ml__out *o, const char *s)
{
	for (; *s; s++) {
		char c = *s == ';' ? ':' : (*s == '\n' ? ' ' : *s);
		ml__out_put(o, &c, 1);
	}
}

/* Collapsed-stack frame: the function, else object+offset (a stripped
 * object: resolve offline with addr2line -e OBJECT OFFSET). */
static void put_short(struct ml__out *o, struct symbols *sy, uintptr_t ip)
{
	const struct sym *s = lookup(sy, ip);
	if (s->name) {
		put_frame_name(o, s->name);
	} else if (s->object) {
		put_frame_name(o, base_name(s->object));
		ml__out_puts(o, "+");
		put_x(o, ip - s->base);
	} else {
		put_x(o, ip);
	}
}

/* Report frame: "name+0xoff (object)" or "object+0xoff" or the address. */
static void put_long(struct ml__out *o, struct symbols *sy, uintptr_t ip)
{
	const struct sym *s = lookup(sy, ip);
	ml__out_puts(o, "    ");
	if (s->name) {
		ml__out_puts(o, s->name);
		ml__out_puts(o, "+");
		put_x(o, ip - s->start);
		ml__out_puts(o, " (");
		ml__out_puts(o, s->object ? s->object : "?");
		ml__out_puts(o, ")\n");
	} else if (s->object) {
		ml__out_puts(o, s->object);
		ml__out_puts(o, "+");
		put_x(o, ip - s->base);
		ml__out_puts(o, "\n");
	} else {
		put_x(o, ip);
		ml__out_puts(o, "\n");
	}
}

static void put_stack(struct ml__out *o, struct symbols *sy,
                      const uintptr_t *ip, uint32_t depth, uint32_t max)
{
	uint32_t d = depth & ~TRUNCATED;
	for (uint32_t i = 0; i < d && i < max; i++)
		put_long(o, sy, ip[i]);
	if (d > max) {
		ml__out_puts(o, "    ... ");
		ml__out_u(o, d - max, 10);
		ml__out_puts(o, " more frames (all of them in the profile)\n");
	} else if (depth & TRUNCATED) {
		ml__out_puts(o, "    ... (deeper frames not captured)\n");
	}
	if (!(depth & ~TRUNCATED))
		ml__out_puts(o, "    (no frames)\n");
}

/* ---- Report ----------------------------------------------------------- */

static void put_limits(struct ml__out *o)
{
	ml_status why = (ml_status)atomic_load(&ml__run.fired);
	ml__out_puts(o, "limit reached: ");
	if (why == ML_ALLOC_LIMIT)
		ml__out_puts(o,
		             "the allocation limit (estimated allocated bytes "
		             "reached it)\n");
	else if (why == ML_GLOBAL_LIMIT)
		ml__out_puts(
		    o, "the heap limit (an allocation would have taken the "
		       "heap over it)\n");
	else if (why != ML_OK)
		ml__out_puts(o, ml_status_str(why)), ml__out_puts(o, "\n");
	else
		ml__out_puts(o, "none\n");
	ml__out_puts(o, "allocation limit: ");
	if (ml__run.alloc_limit == ML_NO_LIMIT) {
		ml__out_puts(o, "none\n");
	} else if (ml__malloc_in_front()) {
		ml__out_puts(o, "off (");
		put_size(o, ml__run.alloc_limit);
		ml__out_puts(o, " asked): no allocation seen\n");
	} else {
		put_size(o, ml__run.alloc_limit);
		ml__out_puts(o, ", reached at ");
		ml__out_u(o, ml__run.k, 10);
		ml__out_puts(o, " samples of all threads; counted so far: ");
		ml__out_u(o, atomic_load(&ml__run.samples), 10);
		ml__out_puts(o, "\n");
	}
	ml__out_puts(o, "heap limit: ");
	if (ml__run.heap_limit == ML_NO_LIMIT) {
		ml__out_puts(o, "none\n");
	} else if (ml__run.heap_blind) {
		/* Nothing measured: no number. */
		ml__out_puts(o, "off (");
		put_size(o, ml__run.heap_limit);
		ml__out_puts(o, " asked): the allocator in use (");
		ml__out_puts(o, ml__run.heap_blind);
		ml__out_puts(
		    o, ") is not glibc's, whose heap is all the meter can "
		       "read\n");
	} else {
		put_size(o, ml__run.heap_limit);
		ml__out_puts(o, "\n  heap in use now: ");
		put_size(o, ml__meter_usage());
		ml__out_puts(o, "\n  peak heap: ");
		put_size(o, ml__meter_peak());
		ml__out_puts(
		    o, "\n  (the heap is the blocks of the malloc family; "
		       "memory a program maps itself,\n  as the heaps of "
		       "cc1, the JVM or V8, is not counted)\n");
	}
}

static void put_site(struct ml__out *o, struct symbols *sy,
                     const struct site *e, unsigned rank, uint64_t total)
{
	uint64_t b = atomic_load(&e->bytes);
	ml__out_puts(o, "#");
	ml__out_u(o, rank, 10);
	ml__out_puts(o, ": ");
	put_size(o, b);
	ml__out_puts(o, ", ");
	put_ratio(o, b * 100, total ? total : 1);
	ml__out_puts(o, "% of sampled bytes, ");
	ml__out_u(o, atomic_load(&e->samples), 10);
	ml__out_puts(o, " samples\n");
	put_stack(o, sy, e->ip, e->depth, SITE_FRAMES);
}

static void write_report(struct symbols *sy, char *buf)
{
	ml_status why = (ml_status)atomic_load(&ml__run.fired);
	char path[ML__PATH_MAX];
	int fd;
	if (ml__run.report_path) {
		fd = open_out("report", ml__run.report_path, path, sizeof path);
		if (fd < 0)
			return;
	} else if (why == ML_OK) {
		return; /* on stderr only when a limit was reached */
	} else {
		/* Our copy of stderr: the program may have closed fd 2. */
		if ((fd = ml__diag_fd()) < 0)
			return;
		memcpy(path, "stderr", 7);
	}
	struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
	uint64_t total = atomic_load(&total_bytes);
	ml__out_puts(&o, "==== memlimits report: pid ");
	ml__out_u(&o, (uint64_t)getpid(), 10);
	ml__out_puts(&o, ", ");
	ml__out_puts(&o, sy->exe);
	ml__out_puts(&o, "\n");
	put_limits(&o);
	if (ml__malloc_in_front()) {
		/* Nothing reached us: no figure. */
		ml__out_puts(&o, "no allocation seen: the malloc of ");
		ml__out_puts(&o, ml__malloc_in_front());
		ml__out_puts(&o, " comes before the library's\n");
		goto end;
	}
	ml__out_puts(&o, "estimated bytes allocated: ");
	put_size(&o, total);
	ml__out_puts(&o, " (");
	ml__out_u(&o, atomic_load(&total_samples), 10);
	ml__out_puts(&o, " samples, interval ");
	ml__out_u(&o, atomic_load(&ml__interval), 10);
	ml__out_puts(&o, " bytes)\n");

	struct site *tab = atomic_load(&sites);
	const struct site *top[TOP_SITES] = {0};
	uint64_t stacks = 0;
	for (unsigned i = 0; tab && i < NSITES; i++) {
		const struct site *e = &tab[i];
		if (!atomic_load_explicit(&e->ready, memory_order_acquire))
			continue;
		uint64_t b = atomic_load(&e->bytes);
		/* A stack whose every sampled allocation was refused holds
		 * nothing: not a site. */
		if (!b)
			continue;
		stacks++;
		unsigned j = TOP_SITES;
		while (j > 0 &&
		       (!top[j - 1] || atomic_load(&top[j - 1]->bytes) < b))
			j--;
		if (j == TOP_SITES)
			continue;
		memmove(&top[j + 1], &top[j],
		        (TOP_SITES - 1 - j) * sizeof top[0]);
		top[j] = e;
	}
	ml__out_puts(&o, "top allocation sites by sampled bytes (");
	ml__out_u(&o, stacks, 10);
	ml__out_puts(&o, " distinct stacks");
	uint64_t other = atomic_load(&other_bytes);
	if (other) {
		ml__out_puts(&o, "; ");
		put_size(&o, other);
		ml__out_puts(&o, " in stacks beyond the table");
	}
	ml__out_puts(&o, "):\n");
	for (unsigned j = 0; j < TOP_SITES && top[j]; j++)
		put_site(&o, sy, top[j], j + 1, total);
	if (!top[0])
		ml__out_puts(&o, "    (no samples)\n");
	if (trip.why != ML_OK) {
		ml__out_puts(&o, "stack that tripped the ");
		ml__out_puts(&o, trip.why == ML_ALLOC_LIMIT ? "allocation"
		                                            : "heap");
		ml__out_puts(&o, " limit, in an allocation of ");
		put_size(&o, trip.n);
		ml__out_puts(&o, ":\n");
		put_stack(&o, sy, trip.ip, trip.depth, MAX_DEPTH);
	}
end:
	ml__out_puts(&o, "==== end of memlimits report\n");
	finish(&o, "report", path, ml__run.report_path != NULL);
}

/* Collapsed stacks: "prog;outer;...;inner bytes", root first. */
static void write_profile(struct symbols *sy, char *buf)
{
	char path[ML__PATH_MAX];
	int fd = open_out("profile", ml__run.profile_path, path, sizeof path);
	if (fd < 0)
		return;
	struct ml__out o = {.fd = fd, .buf = buf, .cap = OUT_BYTES};
	const char *prog = base_name(sy->exe);
	struct site *tab = atomic_load(&sites);
	for (unsigned i = 0; tab && i < NSITES; i++) {
		const struct site *e = &tab[i];
		uint64_t b = atomic_load(&e->bytes);
		if (!atomic_load_explicit(&e->ready, memory_order_acquire) ||
		    !b)
			continue;
		put_frame_name(&o, prog);
		if (e->depth & TRUNCATED)
			ml__out_puts(&o, ";[truncated]");
		for (uint32_t d = e->depth & ~TRUNCATED; d-- > 0;) {
			ml__out_puts(&o, ";");
			put_short(&o, sy, e->ip[d]);
		}
		ml__out_puts(&o, " ");
		ml__out_u(&o, b, 10);
		ml__out_puts(&o, "\n");
	}
	uint64_t other = atomic_load(&other_bytes);
	if (other) {
		put_frame_name(&o, prog);
		ml__out_puts(&o, ";[other stacks] ");
		ml__out_u(&o, other, 10);
		ml__out_puts(&o, "\n");
	}
	finish(&o, "profile", path, true);
}

void ml__report_write(void)
{
	/* Once: at the trip in abort mode, else at exit. */
	if (atomic_exchange(&written, 1))
		return;
	struct symbols *sy = ml__raw_alloc(sizeof *sy);
	char *buf = ml__raw_alloc(OUT_BYTES);
	if (!sy || !buf) {
		ml__diag("no memory for the report");
		ml__raw_free(sy, sizeof *sy);
		ml__raw_free(buf, OUT_BYTES);
		return;
	}
	sy->cache = ml__raw_alloc(NSYMS * sizeof *sy->cache);
	sy->objs = ml__raw_alloc(NOBJS * sizeof *sy->objs);
	ml__self_exe(sy->exe, sizeof sy->exe);
	find_demangler(sy);
	write_report(sy, buf);
	if (ml__run.profile_path)
		write_profile(sy, buf);
	for (unsigned i = 0; sy->objs && i < sy->nobjs; i++)
		if (sy->objs[i].map)
			munmap((void *)sy->objs[i].map, sy->objs[i].map_len);
	for (unsigned i = 0; sy->cache && i < NSYMS; i++)
		free(sy->cache[i].demangled);
	ml__raw_free(sy->cache, NSYMS * sizeof *sy->cache);
	ml__raw_free(sy->objs, NOBJS * sizeof *sy->objs);
	ml__raw_free(sy, sizeof *sy);
	ml__raw_free(buf, OUT_BYTES);
}
