/* The symbolizer's sorted lookup (lib/run/symbols.c, issue 17) against the
 * linear scan it replaced, which stays as its fallback: for every address
 * both must name the same symbol (the first function in table order,
 * .dynsym then .symtab, whose [value, value + size) holds it) with the
 * same start.
 *
 * Random tables stress what a real .symtab rarely shows: aliases at one
 * address, functions inside functions, size 0, undefined and non-function
 * symbols, names out of the string table or unterminated, values near the
 * top of the address space; one table, and two (.dynsym and .symtab, each
 * with its own strings).  Then this program's own tables, read from its
 * file as reports read it; a stripped copy of the library (objcopy
 * --strip-all: .dynsym only), whose exported functions must keep their
 * names; and a frame in libc (stripped on Debian) named without
 * dladdr.  symbols.c is compiled in: its lookups are
 * static.  Fixed seed: the outcome is the same at every run. */
#include "run/symbols.c"

#include "../tap/tap.h"

#include <link.h>

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
		uint64_t v = sym.st_value, z = sym.st_size;
		uint64_t at[] = {v - 1,     v,     v + 1,    v + z / 2,
		                 v + z - 1, v + z, v + z + 1};
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

enum { NSYM = 160, STRSZ = 512 };

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
		s->st_shndx = below(25) == 0 ? SHN_UNDEF : 1;
		s->st_name = (Elf64_Word)(below(30) == 0 ? STRSZ + below(9)
		                                         : below(STRSZ));
		if (below(12) == 0 && i > 0) /* an alias of an earlier one */
			s->st_value = sym[below(i)].st_value;
		else if (below(40) == 0) /* near the top: ends may wrap */
			s->st_value = UINT64_MAX - below(1 << 10);
		else
			s->st_value = below(1 << 13);
		s->st_size = below(10) == 0   ? 0
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
	size_t asked = 0, spans = 0, two = 0;
	bool same = true;
	for (unsigned t = 0; t < tables && same; t++) {
		struct obj ob = random_obj(sym, str, str2);
		two += ob.ntab == 2;
		index_symtab(&ob);
		/* An index is made whenever some function has a size. */
		size_t sized = 0;
		Elf64_Sym s;
		for (size_t i = 0; i < ob.nsym; i++)
			sized += sized_func(&ob, i, &s);
		same = (ob.span != NULL) == (sized != 0);
		if (!same)
			tap_diag("table %u: index %p with %zu sized functions",
			         t, (void *)ob.span, sized);
		spans += ob.nspan;
		same = same && compare(&ob, 400, &asked);
		ml__raw_free(ob.span, ob.span_bytes);
	}
	tap_ok(same && two > tables / 4,
	       "%u random objects (%zu of two tables): the sorted lookup "
	       "names what the scan names at %zu addresses (%zu spans)",
	       tables, two, asked, spans);
}

/* No memory for the index: lookups scan, and still answer. */
static void test_no_memory(void)
{
	static Elf64_Sym sym[NSYM];
	static char str[STRSZ];
	random_table(sym, NSYM, str);
	struct obj ob = {.ntab = 1, .nsym = NSYM};
	ob.tab[0] = table(sym, NSYM, str, STRSZ);
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
	struct obj ob;
	memset(&ob, 0, sizeof ob);
	dl_iterate_phdr(first_object, &ob.bias);
	load_symtab(&ob, "/proc/self/exe");
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
	ml__raw_free(ob.span, ob.span_bytes);
	munmap((void *)ob.map, ob.map_len);
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
	struct obj full, bare;
	memset(&full, 0, sizeof full);
	memset(&bare, 0, sizeof bare);
	load_symtab(&full, lib);
	load_symtab(&bare, copy);
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
	ml__raw_free(full.span, full.span_bytes);
	ml__raw_free(bare.span, bare.span_bytes);
	if (full.map)
		munmap((void *)full.map, full.map_len);
	if (bare.map)
		munmap((void *)bare.map, bare.map_len);
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
	TAP_RUN(test_own_symtab);
	TAP_RUN(test_stripped);
	TAP_RUN(test_libc_frame);
	return tap_done();
}
