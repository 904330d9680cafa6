/* Symbols for the stacks that reports and profiles print (run/report.c,
 * ml_write_held_profile): looked up only when something is written, once
 * per distinct address, never inside an allocation's decision.  Per
 * object, read from files with the one ELF reader (util/elf.c): its
 * .dynsym, and its .symtab or, where it was stripped, the .symtab of its
 * separate debug file (by build id under /usr/lib/debug/.build-id/, then
 * by .gnu_debuglink); sorted once into address spans, so that each lookup
 * is a binary search; object+offset where nothing names it.  No dladdr:
 * it searches every dynamic symbol of the object per call (0.9 million
 * instructions a frame in cc1).  Nothing here calls malloc but the
 * demangler, which the caller allows (a report in abort mode is written
 * inside an allocation). */
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
/* The largest debug file found by .gnu_debuglink alone (an object without
 * a build id) that is read whole for its CRC: about a second's work (10
 * MiB took 85 ms). */
#define CRC_MAX ((size_t)128 << 20)

/* A file mapped read-only, ours to unmap. */
struct image {
	const unsigned char *m;
	size_t len;
};

/* An object's symbol tables: .dynsym (the exported names, which dladdr
 * gave before), then .symtab, its own or its debug file's.  A symbol's
 * number runs over both, in that order.  elf[t]: the image table t was
 * read from, whose section headers bound a function of size 0. */
struct obj {
	uintptr_t bias;
	struct image file, debug;
	struct ml__elf elf[2];
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
	/* Where debug files are looked for: /usr/lib/debug (a test's
	 * temporary tree in tests/unit/test-symtab.c). */
	const char *debug_root;
	char exe[ML__PATH_MAX];
	char path[ML__PATH_MAX]; /* a debug file's, being made */
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

/* Symbol i of the object (over its tables), copied out; the number of
 * its table in *tab. */
static bool sym_in(const struct obj *ob, size_t i, Elf64_Sym *s, unsigned *tab)
{
	for (unsigned t = 0; t < ob->ntab; i -= ob->tab[t++].n)
		if (i < ob->tab[t].n) {
			*tab = t;
			return ml__elf_sym(&ob->tab[t], i, s);
		}
	return false;
}

/* Symbol i of the object, copied out; its table. */
static const struct ml__elf_table *sym_at(const struct obj *ob, size_t i,
                                          Elf64_Sym *s)
{
	unsigned t;
	return sym_in(ob, i, s, &t) ? &ob->tab[t] : NULL;
}

/* The symbols a lookup may name: functions defined here. */
static bool is_func(const struct ml__elf_table *t, const Elf64_Sym *s)
{
	int type = ELF64_ST_TYPE(s->st_info);
	return (type == STT_FUNC || type == STT_GNU_IFUNC) &&
	       s->st_shndx != SHN_UNDEF && s->st_name < t->strsz;
}

/* What symbol i may name.  SIZED: [value, value + size), to the top of
 * the address space where that wraps (*end = 0).  UNSIZED, a function of
 * size 0 (assembly without .size, some .dynsym entries): its extent is
 * not known, and it may name addresses from its value up to the next
 * start or end of a function, within its section: *end is the end of its
 * section, which must be executable and hold the value. */
enum kind { NONE, SIZED, UNSIZED };
static enum kind func_at(const struct obj *ob, size_t i, Elf64_Sym *s,
                         uint64_t *end)
{
	unsigned t;
	uint64_t lo, hi;
	if (!sym_in(ob, i, s, &t) || !is_func(&ob->tab[t], s))
		return NONE;
	if (s->st_size) {
		*end = s->st_value + s->st_size > s->st_value
		           ? s->st_value + s->st_size
		           : 0;
		return SIZED;
	}
	if (s->st_shndx >= SHN_LORESERVE ||
	    !ml__elf_code_span(&ob->elf[t], s->st_shndx, &lo, &hi) ||
	    s->st_value < lo || s->st_value >= hi)
		return NONE;
	*end = hi;
	return UNSIZED;
}

/* Symbol i, if a lookup may name it and it has a size. */
static bool sized_func(const struct obj *ob, size_t i, Elf64_Sym *s)
{
	uint64_t end;
	return func_at(ob, i, s, &end) == SIZED;
}

/* The name an address gets, said once here and kept by the index:
 * 1. the first function in table order (.dynsym, then .symtab: an
 *    exported name before its aliases) whose [value, value + size) holds
 *    addr;
 * 2. else, where the nearest start or end of a function at or below addr
 *    (section ends of size-0 functions counted) is the value of a
 *    function of size 0, the first such function in table order: the
 *    nearest preceding function, when its size is not known and nothing
 *    says it ended;
 * 3. else NOSYM (object+offset).  Scanned here, in O(symbols) a lookup;
 *    the indexed lookup returns the same. */
static uint32_t symtab_scan(const struct obj *ob, uintptr_t addr)
{
	Elf64_Sym s;
	uint64_t end, cut = 0;
	bool any = false;
	for (size_t i = 0; i < ob->nsym; i++)
		if (sized_func(ob, i, &s) && addr >= s.st_value &&
		    addr - s.st_value < s.st_size)
			return (uint32_t)i;
	for (size_t i = 0; i < ob->nsym; i++) {
		enum kind k = func_at(ob, i, &s, &end);
		if (k == NONE)
			continue;
		if (s.st_value <= addr && (!any || s.st_value > cut))
			cut = s.st_value, any = true;
		if (end && end <= addr && (!any || end > cut))
			cut = end, any = true;
	}
	for (size_t i = 0; any && i < ob->nsym; i++)
		if (func_at(ob, i, &s, &end) == UNSIZED && s.st_value == cut)
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
 * 100 000 symbols).  Every start and end of a function (a section's end
 * for one of size 0) cuts the address space into spans, and each span
 * gets the symbol the scan would return there.  Sized functions first:
 * where they overlap (aliases at one address, or one inside another) the
 * first of them in table order, the one the scan meets first, so they
 * claim spans in table order, each only those that no earlier one has.
 * Then each span still unclaimed that starts at the value of a function
 * of size 0 gets the first such function.  Without the memory, lookups
 * scan. */
static void index_symtab(struct obj *ob)
{
	if (ob->nsym >= UINT32_MAX / 2)
		return;
	size_t n = 0;
	Elf64_Sym s;
	uint64_t end;
	for (size_t i = 0; i < ob->nsym; i++)
		n += func_at(ob, i, &s, &end) != NONE;
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
		if (func_at(ob, i, &s, &end) == NONE)
			continue;
		sp[m++].lo = s.st_value;
		if (end) /* 0: an end past the top of the address space */
			sp[m++].lo = end;
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
		if (func_at(ob, i, &s, &end) != SIZED)
			continue;
		size_t a = span_at(sp, m, s.st_value);
		size_t b = end ? span_at(sp, m, end) : m;
		for (uint32_t j = unclaimed(next, (uint32_t)a); j < b;
		     j = unclaimed(next, j + 1)) {
			sp[j].sym = (uint32_t)i;
			next[j] = j + 1;
		}
	}
	ml__raw_free(next, next_bytes);
	for (size_t i = 0; i < ob->nsym; i++) {
		if (func_at(ob, i, &s, &end) != UNSIZED)
			continue;
		size_t a = span_at(sp, m, s.st_value);
		if (a < m && sp[a].sym == NOSYM)
			sp[a].sym = (uint32_t)i;
	}
	/* Neighbours with one symbol are one span. */
	k = 0;
	for (size_t j = 0; j < m; j++)
		if (!k || sp[j].sym != sp[k - 1].sym)
			sp[k++] = sp[j];
	ob->span = sp;
	ob->nspan = k;
	ob->span_bytes = bytes;
}

/* The first whole symbol table of this type in e, as the object's next
 * table. */
static bool add_table(struct obj *ob, const struct ml__elf *e, uint32_t type)
{
	if (ob->ntab == 2 || !ml__elf_symbols(e, type, &ob->tab[ob->ntab]))
		return false;
	ob->elf[ob->ntab] = *e;
	ob->nsym += ob->tab[ob->ntab++].n;
	return true;
}

/* The object's tables from its image m[0, len): .dynsym, then .symtab
 * (the vdso, read where it is mapped: no debug file). */
static void read_tables(struct obj *ob, const unsigned char *m, size_t len)
{
	struct ml__elf e;
	ob->ntab = ob->nsym = 0;
	if (ml__elf_open(&e, m, len, 0) != ML__ELF_OK)
		return;
	add_table(ob, &e, SHT_DYNSYM);
	add_table(ob, &e, SHT_SYMTAB);
	index_symtab(ob);
}

/* Mapped, not read: only the pages of the headers and tables are
 * touched. */
static bool map_file(const char *path, struct image *im)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return false;
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > SIZE_MAX) {
		close(fd);
		return false;
	}
	size_t len = (size_t)st.st_size;
	const unsigned char *m =
	    ml__sys_mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (m == MAP_FAILED)
		return false;
	im->m = m;
	im->len = len;
	return true;
}

static void unmap(struct image *im)
{
	if (im->m)
		ml__sys_munmap((void *)im->m, im->len);
	im->m = NULL;
	im->len = 0;
}

/* A path made of pieces in buf[ML__PATH_MAX]; false where it does not
 * fit. */
static bool path_add(char *buf, size_t *len, const char *s, size_t n)
{
	if (n >= ML__PATH_MAX - *len)
		return false;
	memcpy(buf + *len, s, n);
	*len += n;
	buf[*len] = 0;
	return true;
}

static bool path_hex(char *buf, size_t *len, const unsigned char *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		char two[2] = {hex[p[i] >> 4], hex[p[i] & 15]};
		if (!path_add(buf, len, two, 2))
			return false;
	}
	return true;
}

/* The debug file at path, if it is the object's: an ELF file for its
 * machine, with the object's build id where the object has one, else
 * whose bytes have the CRC that .gnu_debuglink gives (any = false), with
 * a whole .symtab, which becomes the object's second table. */
static bool try_debug(struct obj *ob, const struct ml__elf *obj_elf,
                      const char *path, const unsigned char *id, size_t id_len,
                      uint32_t crc)
{
	struct image im;
	struct ml__elf d;
	const unsigned char *did;
	size_t dlen;
	if (!map_file(path, &im))
		return false;
	bool ok =
	    ml__elf_open(&d, im.m, im.len, obj_elf->eh.e_machine) == ML__ELF_OK;
	if (ok && id)
		ok = ml__elf_build_id(&d, &did, &dlen) && dlen == id_len &&
		     !memcmp(did, id, id_len);
	else if (ok)
		ok = im.len <= CRC_MAX && ml__elf_crc32(0, im.m, im.len) == crc;
	if (ok && add_table(ob, &d, SHT_SYMTAB)) {
		ob->debug = im;
		return true;
	}
	unmap(&im);
	return false;
}

/* The separate debug file of a stripped object, where gdb looks for it:
 * ROOT/.build-id/xx/yyyy.debug by the object's build id; then, by the
 * name in .gnu_debuglink, DIR/NAME, DIR/.debug/NAME and ROOT/DIR/NAME,
 * DIR being the object's folder.  ROOT is /usr/lib/debug, where Debian's
 * -dbg and -dbgsym packages put them.  A file found by build id must
 * carry that id; one found by the link must carry the object's build id
 * too, or, where the object has none, match the link's CRC. */
static void find_debug(struct obj *ob, const struct ml__elf *e,
                       const char *obj_path, const char *root, char *buf)
{
	const unsigned char *id = NULL;
	size_t id_len = 0, len = 0, rlen = strlen(root);
	const char *name;
	uint32_t crc;
	if (ml__elf_build_id(e, &id, &id_len) && id_len >= 2 &&
	    path_add(buf, &len, root, rlen) &&
	    path_add(buf, &len, "/.build-id/", 11) &&
	    path_hex(buf, &len, id, 1) && path_add(buf, &len, "/", 1) &&
	    path_hex(buf, &len, id + 1, id_len - 1) &&
	    path_add(buf, &len, ".debug", 6) &&
	    try_debug(ob, e, buf, id, id_len, 0))
		return;
	if (!ml__elf_debuglink(e, &name, &crc))
		return;
	const char *slash = strrchr(obj_path, '/');
	size_t dir = slash ? (size_t)(slash - obj_path) : 0;
	size_t nlen = strlen(name);
	for (int where = 0; where < 3; where++) {
		len = 0;
		bool fits =
		    (where < 2 || path_add(buf, &len, root, rlen)) &&
		    path_add(buf, &len, obj_path, dir) &&
		    path_add(buf, &len, "/.debug/", where == 1 ? 8 : 1) &&
		    path_add(buf, &len, name, nlen);
		if (fits && try_debug(ob, e, buf, id, id_len, crc))
			return;
	}
}

/* The object's file: its .dynsym, and its .symtab or, where it has
 * none, its debug file's (root: NULL for none). */
static void load_symtab(struct obj *ob, const char *path, const char *root,
                        char *buf)
{
	struct ml__elf e;
	ob->tried = true;
	ob->ntab = ob->nsym = 0;
	if (!map_file(path, &ob->file))
		return;
	if (ml__elf_open(&e, ob->file.m, ob->file.len, 0) == ML__ELF_OK) {
		add_table(ob, &e, SHT_DYNSYM);
		if (!add_table(ob, &e, SHT_SYMTAB) && root)
			find_debug(ob, &e, path, root, buf);
	}
	if (!ob->nsym) { /* stripped of all, or not ELF */
		unmap(&ob->file);
		unmap(&ob->debug);
		return;
	}
	index_symtab(ob);
}

static void obj_free(struct obj *ob)
{
	unmap(&ob->file);
	unmap(&ob->debug);
	ml__raw_free(ob->span, ob->span_bytes);
	ob->span = NULL;
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
		load_symtab(ob, path, sy->debug_root, sy->path);
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
	if (ml__frame_named(ip)) {
		put_frame_name(o, ml__frame_text(ip));
		return;
	}
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
	ml__out_puts(o, "    ");
	if (ml__frame_named(ip)) {
		ml__out_puts(o, ml__frame_text(ip));
		ml__out_puts(o, "\n");
		return;
	}
	const struct sym *s = lookup(sy, ip);
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
	if (d == max + 1) {
		ml__out_puts(o, "    ... 1 more frame (in the profile)\n");
	} else if (d > max) {
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
	sy->debug_root = "/usr/lib/debug";
	if (demangle)
		*(void **)&sy->demangle = dlsym(RTLD_DEFAULT, "__cxa_demangle");
	return sy;
}

void ml__symbols_close(struct ml__symbols *sy)
{
	if (!sy)
		return;
	for (unsigned i = 0; sy->objs && i < sy->nobjs; i++)
		obj_free(&sy->objs[i]);
	for (unsigned i = 0; sy->cache && i < NSYMS; i++)
		free(sy->cache[i].demangled);
	ml__raw_free(sy->cache, NSYMS * sizeof *sy->cache);
	ml__raw_free(sy->objs, NOBJS * sizeof *sy->objs);
	ml__raw_free(sy, sizeof *sy);
}
