/* Symbols for the stacks that reports and profiles print (run/report.c,
 * ml_write_held_profile): looked up only when something is written, once
 * per distinct address: the object's own .dynsym and .symtab, read from
 * its file (util/elf.c) and sorted once into address spans, so that each
 * lookup is a binary search; object+offset where neither names it.  No
 * dladdr: it searches every dynamic symbol of the object per call (0.9
 * million instructions a frame in cc1).  Never used inside an
 * allocation's decision. */
#define _GNU_SOURCE
#include "run/run.h"
#include "util/elf.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NSYMS 16384 /* symbol cache entries (distinct addresses) */
#define NOBJS 128   /* objects whose symbol tables we read */

/* An object's symbol tables, read from its file: .dynsym first (the
 * exported names, which dladdr gave before), then .symtab, if the object
 * is not stripped.  A symbol's number runs over both, in that order. */
struct obj {
	uintptr_t bias;
	const void *map; /* ours to unmap */
	size_t map_len;
	struct ml__elf_table tab[2];
	unsigned ntab;
	size_t nsym;       /* over all tables */
	struct span *span; /* NULL: scan the tables instead */
	size_t nspan, span_bytes;
	bool tried;
};

/* From lo up to the next span's lo, the function there is sym[sym]. */
struct span {
	uint64_t lo;
	uint32_t sym; /* NOSYM: none */
};
#define NOSYM UINT32_MAX

struct sym {
	uintptr_t ip; /* 0: free */
	const char *name;
	char *demangled;    /* ours to free */
	uintptr_t start;    /* the function's address, if named */
	const char *object; /* path */
	uintptr_t base;     /* the object's load address */
};

struct ml__symbols {
	struct sym *cache;
	struct obj *objs;
	unsigned nobjs;
	char *(*demangle)(const char *, char *, size_t *, int *);
	char exe[4096];
};

static void demangle(struct ml__symbols *sy, struct sym *e)
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

/* Symbol i of the object (over its tables), copied out; its table. */
static const struct ml__elf_table *sym_at(const struct obj *ob, size_t i,
                                          Elf64_Sym *s)
{
	for (unsigned t = 0; t < ob->ntab; i -= ob->tab[t++].n)
		if (i < ob->tab[t].n)
			return ml__elf_sym(&ob->tab[t], i, s) ? &ob->tab[t]
			                                      : NULL;
	return NULL;
}

/* The symbols a lookup may name: functions defined here. */
static bool is_func(const struct ml__elf_table *t, const Elf64_Sym *s)
{
	int type = ELF64_ST_TYPE(s->st_info);
	return (type == STT_FUNC || type == STT_GNU_IFUNC) &&
	       s->st_shndx != SHN_UNDEF && s->st_name < t->strsz;
}

/* Symbol i, if a lookup may name it and it has a size. */
static bool sized_func(const struct obj *ob, size_t i, Elf64_Sym *s)
{
	const struct ml__elf_table *t = sym_at(ob, i, s);
	return t && is_func(t, s) && s->st_size;
}

/* The first function in table order whose [value, value+size) holds addr
 * (size 0: none), or NOSYM.  The indexed lookup returns the same. */
static uint32_t symtab_scan(const struct obj *ob, uintptr_t addr)
{
	Elf64_Sym s;
	for (size_t i = 0; i < ob->nsym; i++)
		if (sized_func(ob, i, &s) && addr >= s.st_value &&
		    addr - s.st_value < s.st_size)
			return (uint32_t)i;
	return NOSYM;
}

/* The last span starting at or below x; n if none. */
static size_t span_at(const struct span *a, size_t n, uint64_t x)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (a[mid].lo <= x)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? lo - 1 : n;
}

static void sift(struct span *a, size_t i, size_t n)
{
	for (size_t c; (c = 2 * i + 1) < n; i = c) {
		if (c + 1 < n && a[c + 1].lo > a[c].lo)
			c++;
		if (a[i].lo >= a[c].lo)
			return;
		struct span t = a[i];
		a[i] = a[c];
		a[c] = t;
	}
}

/* Heapsort by lo: in place, where glibc's qsort may call malloc. */
static void sort_spans(struct span *a, size_t n)
{
	for (size_t i = n / 2; i-- > 0;)
		sift(a, i, n);
	for (size_t i = n; i-- > 1;) {
		struct span t = a[0];
		a[0] = a[i];
		a[i] = t;
		sift(a, 0, i);
	}
}

/* The first span from j on that no symbol has claimed yet. */
static uint32_t unclaimed(uint32_t *next, uint32_t j)
{
	uint32_t r = j;
	while (next[r] != r)
		r = next[r];
	while (next[j] != r) {
		uint32_t n = next[j];
		next[j] = r;
		j = n;
	}
	return r;
}

/* Sort the functions once by address, so that each lookup is a binary
 * search (a report may look up thousands of addresses in an object with
 * 100 000 symbols).  Every start and end of a function cuts the address
 * space into spans, and each span gets the symbol the scan would return
 * there: where functions overlap (aliases at one address, or one inside
 * another) the first of them in .symtab order, the one the scan meets
 * first.  So symbols claim spans in table order, each only those that no
 * earlier one has.  Without the memory, lookups scan. */
static void index_symtab(struct obj *ob)
{
	if (ob->nsym >= UINT32_MAX / 2)
		return;
	size_t n = 0;
	Elf64_Sym s;
	for (size_t i = 0; i < ob->nsym; i++)
		n += sized_func(ob, i, &s);
	if (!n)
		return;
	size_t bytes = 2 * n * sizeof(struct span);
	size_t next_bytes = (2 * n + 1) * sizeof(uint32_t);
	struct span *sp = ml__raw_alloc(bytes);
	uint32_t *next = ml__raw_alloc(next_bytes);
	if (!sp || !next) {
		ml__raw_free(sp, bytes);
		ml__raw_free(next, next_bytes);
		return;
	}
	size_t m = 0;
	for (size_t i = 0; i < ob->nsym; i++) {
		if (!sized_func(ob, i, &s))
			continue;
		sp[m++].lo = s.st_value;
		/* An end past the top of the address space: none. */
		if (s.st_value + s.st_size > s.st_value)
			sp[m++].lo = s.st_value + s.st_size;
	}
	sort_spans(sp, m);
	size_t k = 0;
	for (size_t j = 0; j < m; j++)
		if (!k || sp[j].lo != sp[k - 1].lo)
			sp[k++] = sp[j];
	m = k;
	for (size_t j = 0; j <= m; j++)
		next[j] = (uint32_t)j;
	for (size_t j = 0; j < m; j++)
		sp[j].sym = NOSYM;
	for (size_t i = 0; i < ob->nsym; i++) {
		if (!sized_func(ob, i, &s))
			continue;
		uint64_t end = s.st_value + s.st_size;
		size_t a = span_at(sp, m, s.st_value);
		size_t b = end > s.st_value ? span_at(sp, m, end) : m;
		for (uint32_t j = unclaimed(next, (uint32_t)a); j < b;
		     j = unclaimed(next, j + 1)) {
			sp[j].sym = (uint32_t)i;
			next[j] = j + 1;
		}
	}
	ml__raw_free(next, next_bytes);
	/* Neighbours with one symbol are one span. */
	k = 0;
	for (size_t j = 0; j < m; j++)
		if (!k || sp[j].sym != sp[k - 1].sym)
			sp[k++] = sp[j];
	ob->span = sp;
	ob->nspan = k;
	ob->span_bytes = bytes;
}

/* The object's tables from its image m[0, len): .dynsym, then .symtab. */
static void read_tables(struct obj *ob, const unsigned char *m, size_t len)
{
	struct ml__elf e;
	ob->ntab = ob->nsym = 0;
	if (ml__elf_open(&e, m, len, 0) != ML__ELF_OK)
		return;
	static const uint32_t types[] = {SHT_DYNSYM, SHT_SYMTAB};
	for (unsigned i = 0; i < 2; i++)
		if (ml__elf_symbols(&e, types[i], &ob->tab[ob->ntab]))
			ob->nsym += ob->tab[ob->ntab++].n;
	index_symtab(ob);
}

/* Mapped, not read: only the pages of the headers and tables are
 * touched. */
static void load_symtab(struct obj *ob, const char *path)
{
	ob->tried = true;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || !st.st_size) {
		close(fd);
		return;
	}
	size_t len = (size_t)st.st_size;
	const unsigned char *m =
	    ml__sys_mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return;
	read_tables(ob, m, len);
	if (!ob->nsym) { /* stripped of both, or not ELF */
		ml__sys_munmap((void *)m, len);
		return;
	}
	ob->map = m;
	ob->map_len = len;
}

static const char *symtab_lookup(const struct obj *ob, uintptr_t addr,
                                 uintptr_t *start)
{
	uint32_t best = NOSYM;
	if (ob->span) {
		size_t k = span_at(ob->span, ob->nspan, addr);
		if (k < ob->nspan)
			best = ob->span[k].sym;
	} else {
		best = symtab_scan(ob, addr);
	}
	Elf64_Sym s;
	const struct ml__elf_table *t;
	const char *name;
	/* The winner's name only: a bad one is no name, as in the scan. */
	if (best == NOSYM || !(t = sym_at(ob, best, &s)) ||
	    !(name = ml__elf_str(t, s.st_name)))
		return NULL;
	*start = s.st_value + ob->bias;
	return name;
}

static struct obj *object_for(struct ml__symbols *sy,
                              const struct ml__object *o, const char *path)
{
	for (unsigned i = 0; sy->objs && i < sy->nobjs; i++)
		if (sy->objs[i].bias == o->bias)
			return &sy->objs[i];
	if (!sy->objs || sy->nobjs == NOBJS)
		return NULL;
	struct obj *ob = &sy->objs[sy->nobjs++];
	memset(ob, 0, sizeof *ob);
	ob->bias = o->bias;
	if (path[0] == '/') {
		load_symtab(ob, path);
	} else if (o->name[0]) {
		/* The vdso has no file: its image is mapped whole, as one
		 * segment. */
		ob->tried = true;
		read_tables(ob, (const unsigned char *)o->start,
		            o->end - o->start);
	}
	return ob;
}

static const struct sym *lookup(struct ml__symbols *sy, uintptr_t ip)
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
	struct ml__object o;
	if (ml__find_object(at, &o) != 0)
		return e;
	e->object = o.name[0] ? o.name : sy->exe;
	e->base = o.start;
	struct obj *ob = object_for(sy, &o, e->object);
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
void ml__put_frame(struct ml__out *o, struct ml__symbols *sy, uintptr_t ip)
{
	const struct sym *s = lookup(sy, ip);
	if (s->name) {
		put_frame_name(o, s->name);
	} else if (s->object) {
		put_frame_name(o, base_name(s->object));
		ml__out_puts(o, "+");
		ml__out_x(o, ip - s->base);
	} else {
		ml__out_x(o, ip);
	}
}

/* Report frame: "name+0xoff (object)" or "object+0xoff" or the address. */
static void put_long(struct ml__out *o, struct ml__symbols *sy, uintptr_t ip)
{
	const struct sym *s = lookup(sy, ip);
	ml__out_puts(o, "    ");
	if (s->name) {
		ml__out_puts(o, s->name);
		ml__out_puts(o, "+");
		ml__out_x(o, ip - s->start);
		ml__out_puts(o, " (");
		ml__out_puts(o, s->object ? s->object : "?");
		ml__out_puts(o, ")\n");
	} else if (s->object) {
		ml__out_puts(o, s->object);
		ml__out_puts(o, "+");
		ml__out_x(o, ip - s->base);
		ml__out_puts(o, "\n");
	} else {
		ml__out_x(o, ip);
		ml__out_puts(o, "\n");
	}
}

void ml__put_stack(struct ml__out *o, struct ml__symbols *sy,
                   const uintptr_t *ip, uint32_t depth, uint32_t max)
{
	uint32_t d = depth & ~ML__STACK_TRUNCATED;
	for (uint32_t i = 0; i < d && i < max; i++)
		put_long(o, sy, ip[i]);
	if (d > max) {
		ml__out_puts(o, "    ... ");
		ml__out_u(o, d - max, 10);
		ml__out_puts(o, " more frames (all of them in the profile)\n");
	} else if (depth & ML__STACK_TRUNCATED) {
		ml__out_puts(o, "    ... (deeper frames not captured)\n");
	}
	if (!(depth & ~ML__STACK_TRUNCATED))
		ml__out_puts(o, "    (no frames)\n");
}

/* Collapsed-stack frames: "[prog;]outer;...;inner", root first. */
void ml__put_collapsed(struct ml__out *o, struct ml__symbols *sy,
                       const char *prog, const struct ml__stack *st)
{
	const char *sep = "";
	if (prog) {
		put_frame_name(o, base_name(prog));
		sep = ";";
	}
	if (!st || !(st->depth & ~ML__STACK_TRUNCATED)) {
		ml__out_puts(o, sep);
		ml__out_puts(o, "[unknown]");
		return;
	}
	if (st->depth & ML__STACK_TRUNCATED) {
		ml__out_puts(o, sep);
		ml__out_puts(o, "[truncated]");
		sep = ";";
	}
	for (uint32_t d = st->depth & ~ML__STACK_TRUNCATED; d-- > 0;) {
		ml__out_puts(o, sep);
		ml__put_frame(o, sy, st->ip[d]);
		sep = ";";
	}
}

const char *ml__symbols_exe(const struct ml__symbols *sy)
{
	return sy->exe;
}

/* C++ names read as written, with libstdc++'s own demangler: only where
 * the program has it loaded already (no dlopen) and where allocating is
 * safe (not inside an allocation: the caller says). */
struct ml__symbols *ml__symbols_open(bool demangle)
{
	struct ml__symbols *sy = ml__raw_alloc(sizeof *sy);
	if (!sy)
		return NULL;
	sy->cache = ml__raw_alloc(NSYMS * sizeof *sy->cache);
	sy->objs = ml__raw_alloc(NOBJS * sizeof *sy->objs);
	ml__self_exe(sy->exe, sizeof sy->exe);
	if (demangle)
		*(void **)&sy->demangle = dlsym(RTLD_DEFAULT, "__cxa_demangle");
	return sy;
}

void ml__symbols_close(struct ml__symbols *sy)
{
	if (!sy)
		return;
	for (unsigned i = 0; sy->objs && i < sy->nobjs; i++) {
		if (sy->objs[i].map)
			ml__sys_munmap((void *)sy->objs[i].map,
			               sy->objs[i].map_len);
		ml__raw_free(sy->objs[i].span, sy->objs[i].span_bytes);
	}
	for (unsigned i = 0; sy->cache && i < NSYMS; i++)
		free(sy->cache[i].demangled);
	ml__raw_free(sy->cache, NSYMS * sizeof *sy->cache);
	ml__raw_free(sy->objs, NOBJS * sizeof *sy->objs);
	ml__raw_free(sy, sizeof *sy);
}
