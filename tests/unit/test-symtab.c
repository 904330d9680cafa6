/* The symbolizer (lib/run/symbols.c, issues 17, 36): its sorted lookup
 * against the linear scan it replaced, which stays as its fallback: for
 * every address both must name the same symbol with the same start (the
 * rule is symtab_scan's: the first function in table order, .dynsym then
 * .symtab, whose [value, value + size) holds it, else a function of size
 * 0 that starts at the nearest start or end at or below it, within its
 * section).
 *
 * Random tables stress what a real .symtab rarely shows: aliases at one
 * address, functions inside functions, size 0, undefined and non-function
 * symbols, names out of the string table or unterminated, values near the
 * top of the address space, sections that do or do not hold a function
 * of size 0; one table, and two (.dynsym and .symtab, each with its own
 * strings).  Then the size-0 rule on a small table; this program's own
 * tables, read from its file as reports read it; a stripped copy of the
 * library (objcopy --strip-all: .dynsym only), whose exported functions
 * must keep their names; stripped copies of this program whose static
 * functions are named from a separate debug file, found by build id in a
 * temporary debug root and by .gnu_debuglink, and a wrong debug file
 * refused; a frame in libc (stripped on Debian) named without dladdr;
 * and a report's "1 more frame".  symbols.c is compiled in: its lookups
 * are static.  Fixed seed: the outcome is the same at every run. */
#include "run/symbols.c"

#include "../tap/tap.h"

#include <link.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static uint64_t rng = 0x243f6a8885a308d3u;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint64_t below(uint64_t n)
{
	return n ? next() % n : 0;
}

/* Both lookups at addr: the same name pointer and start, or both none. */
static bool agree(const struct obj *indexed, const struct obj *scan,
                  uintptr_t addr)
{
	uintptr_t s1 = 0, s2 = 0;
	const char *a = symtab_lookup(indexed, addr, &s1);
	const char *b = symtab_lookup(scan, addr, &s2);
	return a == b && (!a || s1 == s2);
}

/* The addresses worth asking: each symbol's edges and middle, and random
 * ones around them.  false at the first disagreement, said in a diag. */
static bool compare(const struct obj *ob, unsigned randoms, size_t *asked)
{
	struct obj scan = *ob;
	scan.span = NULL;
	for (size_t i = 0; i < ob->nsym; i++) {
		Elf64_Sym sym;
		if (!sym_at(ob, i, &sym)) {
			tap_diag("symbol %zu unreadable", i);
			return false;
		}
		uint64_t v = sym.st_value, z = sym.st_size, e = 0;
		func_at(ob, i, &sym, &e); /* a section's end, for size 0 */
		uint64_t at[] = {v - 1, v,         v + 1, v + z / 2, v + z - 1,
		                 v + z, v + z + 1, e - 1, e,         e + 1};
		for (size_t j = 0; j < sizeof at / sizeof at[0]; j++, ++*asked)
			if (!agree(ob, &scan, (uintptr_t)at[j])) {
				tap_diag("symbol %zu: 0x%llx differs", i,
				         (unsigned long long)at[j]);
				return false;
			}
	}
	for (unsigned r = 0; r < randoms; r++, ++*asked) {
		uint64_t a = r % 4 ? below(1 << 13) : next();
		if (!agree(ob, &scan, (uintptr_t)a)) {
			tap_diag("0x%llx differs", (unsigned long long)a);
			return false;
		}
	}
	return true;
}

enum { NSYM = 160, STRSZ = 512, NSEC = 6 };

/* An ELF image of section headers alone, for the size-0 rule. */
static unsigned char sections[sizeof(Elf64_Ehdr) + NSEC * sizeof(Elf64_Shdr)];

static struct ml__elf section_image(const Elf64_Shdr *sh, unsigned n)
{
	Elf64_Ehdr eh = {.e_shoff = sizeof eh,
	                 .e_shentsize = sizeof(Elf64_Shdr),
	                 .e_shnum = (Elf64_Half)n};
	const uint16_t one = 1;
	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] =
	    *(const unsigned char *)&one ? ELFDATA2LSB : ELFDATA2MSB;
	memset(sections, 0, sizeof sections);
	memcpy(sections, &eh, sizeof eh);
	memcpy(sections + sizeof eh, sh, n * sizeof *sh);
	struct ml__elf e;
	if (n > NSEC ||
	    ml__elf_open(&e, sections, sizeof sections, 0) != ML__ELF_OK ||
	    e.shnum != n)
		tap_bail("the section image does not open");
	return e;
}

/* Sections at random addresses, most executable, the last one now and
 * then wrapping past the top of the address space. */
static struct ml__elf random_sections(void)
{
	Elf64_Shdr sh[NSEC] = {{0}};
	for (unsigned i = 1; i < NSEC; i++) {
		sh[i].sh_type = SHT_PROGBITS;
		sh[i].sh_flags =
		    below(5) ? SHF_ALLOC | SHF_EXECINSTR : SHF_ALLOC;
		sh[i].sh_addr = below(1 << 13);
		sh[i].sh_size = below(1 << 12);
	}
	if (below(3) == 0)
		sh[NSEC - 1].sh_addr = UINT64_MAX - below(1 << 10);
	return section_image(sh, NSEC);
}

static void random_table(Elf64_Sym *sym, size_t n, char *str)
{
	/* Names: NUL-terminated words, the last one cut short. */
	for (size_t i = 0; i < STRSZ; i++)
		str[i] = (char)(i % 8 == 7 ? 0 : 'a' + (int)(i % 26));
	str[STRSZ - 1] = 'z';
	for (size_t i = 0; i < n; i++) {
		Elf64_Sym *s = &sym[i];
		memset(s, 0, sizeof *s);
		uint64_t kind = below(20);
		int type = kind == 0   ? STT_OBJECT
		           : kind == 1 ? STT_GNU_IFUNC
		           : kind == 2 ? STT_NOTYPE
		                       : STT_FUNC;
		s->st_info = ELF64_ST_INFO(STB_GLOBAL, type);
		s->st_shndx = below(25) == 0 ? SHN_UNDEF
		              : below(30) == 0
		                  ? (Elf64_Section)(below(2) ? NSEC : SHN_ABS)
		                  : (Elf64_Section)(1 + below(NSEC - 1));
		s->st_name = (Elf64_Word)(below(30) == 0 ? STRSZ + below(9)
		                                         : below(STRSZ));
		if (below(12) == 0 && i > 0) /* an alias of an earlier one */
			s->st_value = sym[below(i)].st_value;
		else if (below(40) == 0) /* near the top: ends may wrap */
			s->st_value = UINT64_MAX - below(1 << 10);
		else
			s->st_value = below(1 << 13);
		s->st_size = below(6) == 0    ? 0
		             : below(10) == 0 ? below(4)
		                              : 1 + below(600);
	}
}

static struct ml__elf_table table(const Elf64_Sym *sym, size_t n,
                                  const char *str, size_t strsz)
{
	struct ml__elf_table t = {.at = (const unsigned char *)sym,
	                          .n = n,
	                          .ent = sizeof *sym,
	                          .str = str,
	                          .strsz = strsz};
	return t;
}

/* One table, or two (the second with strings of its own, half as long:
 * more of its names fall outside). */
static struct obj random_obj(Elf64_Sym *sym, char *str, char *str2)
{
	size_t n = 1 + below(NSYM);
	random_table(sym, n, str);
	struct obj ob = {.ntab = 1, .nsym = n};
	ob.tab[0] = table(sym, n, str, STRSZ);
	ob.elf[0] = ob.elf[1] = random_sections();
	if (below(2)) {
		size_t first = below(n + 1);
		memcpy(str2, str, STRSZ / 2);
		ob.tab[0].n = first;
		ob.tab[1] = table(sym + first, n - first, str2, STRSZ / 2);
		ob.ntab = 2;
	}
	return ob;
}

static void test_random_tables(void)
{
	static Elf64_Sym sym[NSYM];
	static char str[STRSZ], str2[STRSZ / 2];
	unsigned tables = getenv("ML_TEST_QUICK") ? 300 : 3000;
	size_t asked = 0, spans = 0, two = 0, unsized = 0, by_unsized = 0;
	bool same = true;
	for (unsigned t = 0; t < tables && same; t++) {
		struct obj ob = random_obj(sym, str, str2);
		two += ob.ntab == 2;
		index_symtab(&ob);
		/* An index is made whenever some function may name an
		 * address. */
		size_t named = 0;
		Elf64_Sym s;
		uint64_t end;
		for (size_t i = 0; i < ob.nsym; i++) {
			enum kind k = func_at(&ob, i, &s, &end);
			named += k != NONE;
			unsized += k == UNSIZED;
		}
		same = (ob.span != NULL) == (named != 0);
		if (!same)
			tap_diag("table %u: index %p with %zu functions", t,
			         (void *)ob.span, named);
		spans += ob.nspan;
		for (size_t j = 0; ob.span && j < ob.nspan; j++)
			by_unsized +=
			    ob.span[j].sym != NOSYM &&
			    func_at(&ob, ob.span[j].sym, &s, &end) == UNSIZED;
		same = same && compare(&ob, 400, &asked);
		ml__raw_free(ob.span, ob.span_bytes);
	}
	tap_ok(same && two > tables / 4 && by_unsized > tables / 10,
	       "%u random objects (%zu of two tables, %zu functions of size "
	       "0 that may name, %zu spans named by them): the sorted lookup "
	       "names what the scan names at %zu addresses (%zu spans)",
	       tables, two, unsized, by_unsized, asked, spans);
}

/* No memory for the index: lookups scan, and still answer. */
static void test_no_memory(void)
{
	static Elf64_Sym sym[NSYM];
	static char str[STRSZ];
	random_table(sym, NSYM, str);
	struct obj ob = {.ntab = 1, .nsym = NSYM};
	ob.tab[0] = table(sym, NSYM, str, STRSZ);
	ob.elf[0] = random_sections();
	ml__fault_pool = true;
	index_symtab(&ob);
	ml__fault_pool = false;
	size_t asked = 0;
	bool named = false;
	for (size_t i = 0; i < NSYM && !named; i++) {
		uintptr_t start;
		named = symtab_lookup(&ob, (uintptr_t)sym[i].st_value, &start);
	}
	tap_ok(ob.span == NULL && compare(&ob, 100, &asked) && named,
	       "without memory for the index the scan answers");
}

/* The rule for functions of size 0, on a table made to show each case:
 * a size-0 function names addresses up to the next start or end of a
 * function, inside its (executable) section; a sized function's end
 * stops it; the first of aliases wins; a function inside a sized one
 * does not name; outside its section or in a section that is not
 * executable it names nothing. */
static void test_size_zero(void)
{
	static const char str[] = "\0Z\0F\0Y\0Y2\0G\0H\0W\0N\0E";
	enum {
		Z = 1,
		F = 3,
		Y = 5,
		Y2 = 7,
		G = 10,
		H = 12,
		W = 14,
		N = 16,
		E = 18
	};
	const Elf64_Shdr sh[4] = {
	    {0},
	    {.sh_flags = SHF_ALLOC | SHF_EXECINSTR,
	     .sh_addr = 0x1000,
	     .sh_size = 0x1000},
	    {.sh_flags = SHF_ALLOC | SHF_EXECINSTR,
	     .sh_addr = 0x3000,
	     .sh_size = 0x100},
	    {.sh_flags = SHF_ALLOC, .sh_addr = 0x2400, .sh_size = 0x100}};
	const struct {
		unsigned name;
		uint64_t value, size;
		unsigned sec;
	} def[] = {
	    {Z, 0x1000, 0, 1},  {F, 0x1100, 0x100, 1}, {Y, 0x1400, 0, 1},
	    {Y2, 0x1400, 0, 1}, {G, 0x1800, 16, 1},    {H, 0x1808, 0, 1},
	    {W, 0x3000, 0, 2},  {N, 0x2800, 0, 1},     {E, 0x2400, 0, 3}};
	enum { NDEF = sizeof def / sizeof def[0] };
	Elf64_Sym sym[NDEF];
	memset(sym, 0, sizeof sym);
	for (unsigned i = 0; i < NDEF; i++) {
		sym[i].st_name = def[i].name;
		sym[i].st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
		sym[i].st_shndx = (Elf64_Section)def[i].sec;
		sym[i].st_value = def[i].value;
		sym[i].st_size = def[i].size;
	}
	struct obj ob = {.ntab = 1, .nsym = NDEF};
	ob.tab[0] = table(sym, NDEF, str, sizeof str);
	ob.elf[0] = section_image(sh, 4);
	index_symtab(&ob);
	const struct {
		uint64_t addr;
		const char *name;
	} want[] = {{0x0fff, NULL}, {0x1000, "Z"},  {0x10ff, "Z"},
	            {0x1100, "F"},  {0x11ff, "F"},  {0x1200, NULL},
	            {0x13ff, NULL}, {0x1400, "Y"},  {0x17ff, "Y"},
	            {0x1800, "G"},  {0x180f, "G"},  {0x1810, NULL},
	            {0x2400, NULL}, {0x2800, NULL}, {0x2fff, NULL},
	            {0x3000, "W"},  {0x30ff, "W"},  {0x3100, NULL}};
	unsigned right = 0, n = sizeof want / sizeof want[0];
	size_t asked = 0;
	for (unsigned i = 0; i < n; i++) {
		uintptr_t start = 0;
		const char *got = symtab_lookup(&ob, want[i].addr, &start);
		bool ok =
		    want[i].name ? got && !strcmp(got, want[i].name) : !got;
		right += ok;
		if (!ok)
			tap_diag("0x%llx: %s, not %s",
			         (unsigned long long)want[i].addr,
			         got ? got : "no name",
			         want[i].name ? want[i].name : "no name");
	}
	bool same = compare(&ob, 2000, &asked);
	tap_ok(ob.span && right == n && same,
	       "functions of size 0: %u of %u addresses named as the rule "
	       "says, %zu addresses the same in both lookups",
	       right, n, asked);
	ml__raw_free(ob.span, ob.span_bytes);
}

/* The main program's load bias: the first object dl_iterate_phdr lists. */
static int first_object(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	*(uintptr_t *)arg = info->dlpi_addr;
	return 1;
}

/* This program's .symtab, mapped from its file as a report does. */
static void test_own_symtab(void)
{
	static char buf[ML__PATH_MAX];
	struct obj ob;
	memset(&ob, 0, sizeof ob);
	dl_iterate_phdr(first_object, &ob.bias);
	load_symtab(&ob, "/proc/self/exe", NULL, buf);
	if (!ob.nsym) {
		tap_skip(1, "this program has no .symtab (stripped)");
		return;
	}
	size_t asked = 0;
	bool same = ob.span && ob.ntab == 2 && compare(&ob, 20000, &asked);
	uintptr_t start = 0;
	const char *name = symtab_lookup(
	    &ob, (uintptr_t)&test_own_symtab - ob.bias + 1, &start);
	tap_ok(same && name && !strcmp(name, "test_own_symtab") &&
	           start == (uintptr_t)&test_own_symtab,
	       "this program's .dynsym and .symtab: %zu symbols, %zu spans, "
	       "%zu addresses the same, test_own_symtab found by its address",
	       ob.nsym, ob.nspan, asked);
	obj_free(&ob);
}

/* A stripped object keeps .dynsym: the library stripped of its .symtab
 * at test time names every function it exports as the library itself
 * does, from .dynsym alone, and its sorted lookup agrees with the scan. */
static void test_stripped(void)
{
	const char *lib = getenv("MEMLIMITS_LIB");
	char dir[] = "/tmp/ml-symtab.XXXXXX", cmd[8192], copy[64];
	if (!lib || access(lib, R_OK) != 0 || !mkdtemp(dir)) {
		tap_skip(1, "no library built (MEMLIMITS_LIB)");
		return;
	}
	snprintf(copy, sizeof copy, "%s/stripped.so", dir);
	snprintf(cmd, sizeof cmd, "objcopy --strip-all '%s' '%s'", lib, copy);
	if (system(cmd) != 0) {
		tap_skip(1, "objcopy --strip-all failed");
		rmdir(dir);
		return;
	}
	static char buf[ML__PATH_MAX];
	struct obj full, bare;
	memset(&full, 0, sizeof full);
	memset(&bare, 0, sizeof bare);
	load_symtab(&full, lib, NULL, buf);
	load_symtab(&bare, copy, NULL, buf);
	unlink(copy);
	rmdir(dir);
	size_t asked = 0, exported = 0, named = 0;
	bool same = full.ntab == 2 && bare.ntab == 1 && bare.span &&
	            compare(&bare, 2000, &asked);
	Elf64_Sym s;
	for (size_t i = 0; same && i < full.tab[0].n; i++) {
		if (!sized_func(&full, i, &s))
			continue;
		exported++;
		uintptr_t a = 0, b = 0;
		const char *x = symtab_lookup(&full, s.st_value, &a);
		const char *y = symtab_lookup(&bare, s.st_value, &b);
		named += x && y && !strcmp(x, y) && a == b && a == s.st_value;
	}
	tap_ok(same && exported > 20 && named == exported,
	       "a stripped copy of the library (.dynsym only: %zu symbols, "
	       "%zu spans, %zu addresses the same): %zu of %zu exported "
	       "functions named as in the library",
	       bare.nsym, bare.nspan, asked, named, exported);
	obj_free(&full);
	obj_free(&bare);
}

/* What load_symtab names at this program's function fn in the file at
 * path, with debug files under root (NULL: none); *debug: whether it read
 * a debug file. */
static const char *name_in(const char *path, const char *root, void *fn,
                           bool *debug)
{
	static char buf[ML__PATH_MAX], name[256];
	struct obj ob;
	memset(&ob, 0, sizeof ob);
	dl_iterate_phdr(first_object, &ob.bias);
	load_symtab(&ob, path, root, buf);
	uintptr_t start = 0;
	const char *n =
	    ob.nsym ? symtab_lookup(&ob, (uintptr_t)fn - ob.bias + 1, &start)
	            : NULL;
	snprintf(name, sizeof name, "%s", n && start == (uintptr_t)fn ? n : "");
	*debug = ob.debug.m != NULL;
	obj_free(&ob);
	return name;
}

static bool sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static bool sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof cmd || system(cmd) != 0) {
		tap_diag("failed: %s", cmd);
		return false;
	}
	return true;
}

/* Stripped copies of this program (objcopy --strip-all: no .symtab, and
 * its static functions are not in .dynsym) name test_size_zero from a
 * separate debug file (objcopy --only-keep-debug): found by build id in
 * a temporary debug root, and by .gnu_debuglink next to the copy, in
 * .debug/ beside it and under the root; one without a build id by the
 * link's CRC.  The library's debug file put in those places, and a debug
 * file changed after the link was made, are refused. */
static void test_debug_file(void)
{
	const char *lib = getenv("MEMLIMITS_LIB");
	char self[ML__PATH_MAX], dir[] = "/tmp/ml-debug.XXXXXX";
	static char id_path[ML__PATH_MAX];
	char root[128], p[512], q[512];
	void *fn = (void *)&test_size_zero;
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	struct image im = {0};
	struct ml__elf e;
	const unsigned char *id = NULL;
	size_t id_len = 0;
	bool have = len > 0 && lib && access(lib, R_OK) == 0;
	if (have) {
		self[len] = 0;
		have = map_file(self, &im) &&
		       ml__elf_open(&e, im.m, im.len, 0) == ML__ELF_OK &&
		       ml__elf_symbols(&e, SHT_SYMTAB,
		                       &(struct ml__elf_table){0}) &&
		       ml__elf_build_id(&e, &id, &id_len) && id_len >= 2;
	}
	if (!have || !mkdtemp(dir)) {
		tap_skip(9, "no library built, or this program has no .symtab "
		            "or no build id");
		unmap(&im);
		return;
	}
	snprintf(root, sizeof root, "%s/root", dir);
	size_t n = 0;
	id_path[0] = 0;
	bool made =
	    path_add(id_path, &n, root, strlen(root)) &&
	    path_add(id_path, &n, "/.build-id/", 11) &&
	    path_hex(id_path, &n, id, 1) &&
	    sh("mkdir -p '%s' '%s/.debug' '%s%s'", id_path, dir, root, dir) &&
	    path_add(id_path, &n, "/", 1) &&
	    path_hex(id_path, &n, id + 1, id_len - 1) &&
	    path_add(id_path, &n, ".debug", 6);
	unmap(&im);
	made = made &&
	       sh("cd '%s' && objcopy --only-keep-debug '%s' self.debug && "
	          "objcopy --only-keep-debug '%s' lib.debug && "
	          "objcopy --strip-all '%s' bare && "
	          "objcopy --strip-all --add-gnu-debuglink=self.debug '%s' "
	          "linked && cp self.debug nobid.debug && "
	          "objcopy --strip-all --remove-section=.note.gnu.build-id "
	          "--add-gnu-debuglink=nobid.debug '%s' nobid",
	          dir, self, lib, self, self, self);
	if (!made) {
		tap_skip(9, "objcopy could not make the files");
		sh("rm -rf '%s'", dir);
		return;
	}
	bool debug;
	const char *got;
#define AT(f) (snprintf(p, sizeof p, "%s/%s", dir, f), p)
#define AT2(f) (snprintf(q, sizeof q, "%s/%s", dir, f), q)
	got = name_in(AT("bare"), root, fn, &debug);
	tap_ok(!*got && !debug, "stripped, no debug file: not named (\"%s\")",
	       got);
	sh("cp '%s' '%s'", AT("self.debug"), id_path);
	got = name_in(AT("bare"), root, fn, &debug);
	tap_ok(!strcmp(got, "test_size_zero") && debug,
	       "by build id under the debug root: \"%s\"", got);
	sh("cp '%s' '%s'", AT("lib.debug"), id_path);
	got = name_in(AT("bare"), root, fn, &debug);
	tap_ok(!*got && !debug,
	       "another object's debug file at the build-id path is refused "
	       "(\"%s\")",
	       got);
	unlink(id_path);
	got = name_in(AT("linked"), root, fn, &debug);
	tap_ok(!strcmp(got, "test_size_zero") && debug,
	       ".gnu_debuglink, next to the object: \"%s\"", got);
	rename(AT("self.debug"), AT2(".debug/self.debug"));
	got = name_in(AT("linked"), root, fn, &debug);
	tap_ok(!strcmp(got, "test_size_zero") && debug,
	       ".gnu_debuglink, in .debug/ beside it: \"%s\"", got);
	snprintf(p, sizeof p, "%s%s/self.debug", root, dir);
	rename(AT2(".debug/self.debug"), p);
	got = name_in(AT("linked"), root, fn, &debug);
	tap_ok(!strcmp(got, "test_size_zero") && debug,
	       ".gnu_debuglink, under the debug root: \"%s\"", got);
	unlink(p);
	rename(AT("lib.debug"), AT2("self.debug"));
	got = name_in(AT("linked"), root, fn, &debug);
	tap_ok(!*got && !debug,
	       "another object's debug file by the link's name is refused "
	       "(\"%s\")",
	       got);
	got = name_in(AT("nobid"), root, fn, &debug);
	tap_ok(!strcmp(got, "test_size_zero") && debug,
	       "no build id: found by the link, its CRC right: \"%s\"", got);
	sh("printf x >>'%s'", AT("nobid.debug"));
	got = name_in(AT("nobid"), root, fn, &debug);
	tap_ok(!*got && !debug,
	       "no build id: a debug file changed since the link is refused "
	       "(\"%s\")",
	       got);
#undef AT
#undef AT2
	sh("rm -rf '%s'", dir);
}

/* The reader on tests/cli/make-elf.c's crafted files (fuzz/corpus/elf,
 * every piece at an odd offset): the build id from a SHT_NOTE section
 * and, without section headers, from a PT_NOTE segment; the debug link;
 * the size-0 function named up to its section's end. */
static void test_crafted(void)
{
	const char *src = getenv("top_srcdir");
	char path[ML__PATH_MAX];
	struct image im = {0}, ph = {0};
	if (!src) {
		tap_skip(1, "top_srcdir not set");
		return;
	}
	snprintf(path, sizeof path, "%s/fuzz/corpus/elf/seed-debug", src);
	bool ok = map_file(path, &im);
	snprintf(path, sizeof path, "%s/fuzz/corpus/elf/seed-debug-phdr", src);
	ok = map_file(path, &ph) && ok;
	struct ml__elf e, f;
	const unsigned char *id = NULL, *id2 = NULL;
	size_t n = 0, n2 = 0;
	const char *link = NULL;
	uint32_t crc = 0;
	ok = ok && ml__elf_open(&e, im.m, im.len, 0) == ML__ELF_OK &&
	     ml__elf_open(&f, ph.m, ph.len, 0) == ML__ELF_OK &&
	     ml__elf_build_id(&e, &id, &n) && n == 20 && id[0] == 0xc5 &&
	     id[19] == (unsigned char)(0xc5 + 7 * 19) && f.shnum == 0 &&
	     ml__elf_build_id(&f, &id2, &n2) && n2 == 20 &&
	     !memcmp(id, id2, 20) &&
	     ml__elf_section_named(&e, ".gnu_debuglink") == 3 &&
	     ml__elf_section_named(&e, ".debug_info") == -1 &&
	     ml__elf_debuglink(&e, &link, &crc) &&
	     !strcmp(link, "prog.debug") && crc == 0x0c35e0b7 &&
	     !ml__elf_debuglink(&f, &link, &crc);
	struct obj ob;
	memset(&ob, 0, sizeof ob);
	if (ok) {
		add_table(&ob, &e, SHT_SYMTAB);
		index_symtab(&ob);
	}
	uintptr_t start;
	const char *a = ok ? symtab_lookup(&ob, 0x1008, &start) : NULL;
	const char *b = ok ? symtab_lookup(&ob, 0x103f, &start) : NULL;
	const char *c = ok ? symtab_lookup(&ob, 0x1040, &start) : NULL;
	tap_ok(ok && a && !strcmp(a, "exported") && b &&
	           !strcmp(b, "asm_size0") && !c,
	       "crafted files: build id (section and segment), debug link "
	       "\"%s\", %s and %s named, nothing past the section",
	       link ? link : "?", a ? a : "?", b ? b : "?");
	ml__raw_free(ob.span, ob.span_bytes);
	unmap(&im);
	unmap(&ph);
}

/* A report's stack cut after max frames says how many more, in the
 * singular for one ("1 more frames" before). */
static void test_more_frames(void)
{
	const uintptr_t ip[5] = {0x11, 0x12, 0x13, 0x14, 0x15};
	struct ml__symbols *sy = ml__symbols_open(false);
	char one[512], two[512];
	struct ml__out o = {.buf = one, .cap = sizeof one - 1, .fd = -1};
	if (sy)
		ml__put_stack(&o, sy, ip, 5, 4);
	one[o.len] = 0;
	o = (struct ml__out){.buf = two, .cap = sizeof two - 1, .fd = -1};
	if (sy)
		ml__put_stack(&o, sy, ip, 5, 3);
	two[o.len] = 0;
	bool ok = strstr(one, "    ... 1 more frame (in the profile)\n") &&
	          !strstr(one, "frames") &&
	          strstr(two, "    ... 2 more frames (all of them in the "
	                      "profile)\n");
	tap_ok(sy && ok, "one frame left out: \"1 more frame\"; two: \"2 more "
	                 "frames\"");
	if (!ok)
		tap_diag("%s%s", one, two);
	ml__symbols_close(sy);
}

/* A frame in libc, as a report names it: the object found without
 * dladdr, its symbols read from its file (Debian's is stripped: .dynsym
 * only), the name one that libc binds at that address. */
static void test_libc_frame(void)
{
	void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *f = h ? dlsym(h, "qsort") : NULL;
	struct ml__symbols *sy = ml__symbols_open(false);
	char buf[256];
	struct ml__out o = {.buf = buf, .cap = sizeof buf - 1, .fd = -1};
	if (f && sy)
		ml__put_frame(&o, sy, (uintptr_t)f + 1);
	buf[o.len] = 0;
	tap_ok(f && sy && o.len && dlsym(h, buf) == f,
	       "a frame in libc's qsort is named \"%s\"", buf);
	ml__symbols_close(sy);
	if (h)
		dlclose(h);
}

int main(void)
{
	TAP_RUN(test_random_tables);
	TAP_RUN(test_no_memory);
	TAP_RUN(test_size_zero);
	TAP_RUN(test_crafted);
	TAP_RUN(test_own_symtab);
	TAP_RUN(test_stripped);
	TAP_RUN(test_debug_file);
	TAP_RUN(test_libc_frame);
	TAP_RUN(test_more_frames);
	return tap_done();
}
