/* Symbols for the stacks that reports and profiles print (run/report.c,
 * ml_write_held_profile): looked up only when something is written, once
 * per distinct address: dladdr for exported names, the object's own
 * .symtab for the rest (mapped from its file), object+offset when
 * stripped.  Never used inside an allocation's decision. */
#define _GNU_SOURCE
#include "run/run.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NSYMS 16384 /* symbol cache entries (distinct addresses) */
#define NOBJS 128   /* objects whose .symtab we read */

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
	struct span *span; /* NULL: scan sym[] instead */
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

/* The symbols a lookup may name: functions defined here. */
static bool is_func(const struct obj *ob, const Elf64_Sym *s)
{
	int type = ELF64_ST_TYPE(s->st_info);
	return (type == STT_FUNC || type == STT_GNU_IFUNC) &&
	       s->st_shndx != SHN_UNDEF && s->st_name < ob->strsz;
}

/* The first function in table order whose [value, value+size) holds addr
 * (size 0: none).  The indexed lookup returns the same. */
static const Elf64_Sym *symtab_scan(const struct obj *ob, uintptr_t addr)
{
	for (size_t i = 0; i < ob->nsym; i++) {
		const Elf64_Sym *s = &ob->sym[i];
		if (is_func(ob, s) && addr >= s->st_value &&
		    addr - s->st_value < s->st_size)
			return s;
	}
	return NULL;
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
	for (size_t i = 0; i < ob->nsym; i++)
		n += is_func(ob, &ob->sym[i]) && ob->sym[i].st_size;
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
		const Elf64_Sym *s = &ob->sym[i];
		if (!is_func(ob, s) || !s->st_size)
			continue;
		sp[m++].lo = s->st_value;
		/* An end past the top of the address space: none. */
		if (s->st_value + s->st_size > s->st_value)
			sp[m++].lo = s->st_value + s->st_size;
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
		const Elf64_Sym *s = &ob->sym[i];
		if (!is_func(ob, s) || !s->st_size)
			continue;
		uint64_t end = s->st_value + s->st_size;
		size_t a = span_at(sp, m, s->st_value);
		size_t b = end > s->st_value ? span_at(sp, m, end) : m;
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
		index_symtab(ob);
		return;
	}
unusable: /* stripped, or not an ELF file we understand */
	munmap((void *)m, len);
}

static const char *symtab_lookup(const struct obj *ob, uintptr_t addr,
                                 uintptr_t *start)
{
	const Elf64_Sym *best = NULL;
	if (ob->span) {
		size_t k = span_at(ob->span, ob->nspan, addr);
		if (k < ob->nspan && ob->span[k].sym != NOSYM)
			best = &ob->sym[ob->span[k].sym];
	} else {
		best = symtab_scan(ob, addr);
	}
	/* The winner's name only: a bad one is no name, as in the scan. */
	if (!best ||
	    !memchr(ob->str + best->st_name, 0, ob->strsz - best->st_name))
		return NULL;
	*start = best->st_value + ob->bias;
	return ob->str + best->st_name;
}

static struct obj *object_for(struct ml__symbols *sy, struct link_map *lm,
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
			munmap((void *)sy->objs[i].map, sy->objs[i].map_len);
		ml__raw_free(sy->objs[i].span, sy->objs[i].span_bytes);
	}
	for (unsigned i = 0; sy->cache && i < NSYMS; i++)
		free(sy->cache[i].demangled);
	ml__raw_free(sy->cache, NSYMS * sizeof *sy->cache);
	ml__raw_free(sy->objs, NOBJS * sizeof *sy->objs);
	ml__raw_free(sy, sizeof *sy);
}
