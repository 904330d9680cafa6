/* libFuzzer target: the one ELF reader (lib/util/elf.c, which the
 * symbolizer and the allocator search use too) and the ELF checks of
 * `memlimits run` (tools/run-elf.c, ml__run_check_elf) on the bytes of
 * one file, in a buffer of exactly its size: ASan catches a read past its
 * end, UBSan a misaligned load (a table at an odd offset).  A refused
 * file calls ml__tool_usage_error, which here checks that there is one
 * and jumps back (the real one escapes what the file put in it).  Nothing
 * is executed.  Seeds: tests/cli/make-elf.c's files (tables at odd
 * offsets; seed-debug and seed-debug-phdr: a build id, a debug link, a
 * function of size 0). */
#define _GNU_SOURCE
#include <elf.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "run.h"
#include "tool.h"
#include "usage-jump.h"
#include "util/elf.h"

static bool inside(const unsigned char *m, size_t len, const void *p, size_t n)
{
	const unsigned char *q = p;
	return q >= m && q <= m + len && n <= (size_t)(m + len - q);
}

/* Every call of the reader on the image: what it counts it can read, and
 * every table and string it hands out lies inside the image. */
static enum ml__elf_status read_all(const unsigned char *m, size_t len)
{
	struct ml__elf e;
	enum ml__elf_status st = ml__elf_open(&e, m, len, 0);
	if (st != ML__ELF_OK)
		return st;
	Elf64_Phdr ph;
	for (unsigned i = 0; i < e.phnum; i++)
		if (!ml__elf_phdr(&e, i, &ph))
			abort();
	if (ml__elf_phdr(&e, e.phnum, &ph) || (e.phnum && !e.phdrs_ok))
		abort();
	Elf64_Shdr sh;
	for (unsigned i = 0; i < e.shnum; i++) {
		struct ml__elf_table t;
		if (!ml__elf_shdr(&e, i, &sh))
			abort();
		if (!ml__elf_table(&e, i, sizeof(Elf64_Sym), &t))
			continue;
		if (!inside(m, len, t.at, t.n * t.ent) ||
		    !inside(m, len, t.str, t.strsz))
			abort();
		Elf64_Sym s;
		for (size_t j = 0; j < t.n && j < 4096; j++) {
			if (!ml__elf_sym(&t, j, &s))
				abort();
			const char *name = ml__elf_str(&t, s.st_name);
			if (name && !inside(m, len, name, strlen(name) + 1))
				abort();
		}
		if (ml__elf_sym(&t, t.n, &s))
			abort();
	}
	if (ml__elf_shdr(&e, e.shnum, &sh))
		abort();
	static const char *const any_lib[] = {"lib"};
	const char *n = ml__elf_needs(&e, NULL, 0);
	if (n && !inside(m, len, n, strlen(n) + 1))
		abort();
	n = ml__elf_needs(&e, any_lib, 1);
	if (n && (!inside(m, len, n, strlen(n) + 1) || strncmp(n, "lib", 3)))
		abort();
	struct ml__elf_table t;
	if (ml__elf_symbols(&e, SHT_DYNSYM, &t) &&
	    !inside(m, len, t.at, t.n * t.ent))
		abort();
	(void)ml__elf_defines(&e, "malloc");
	(void)ml__elf_section(&e, SHT_SYMTAB, 0);
	/* What the symbolizer reads of a stripped object (issue 36): the
	 * build id, the debug link, a section by name. */
	const unsigned char *id;
	size_t id_len;
	if (ml__elf_build_id(&e, &id, &id_len) &&
	    (!id_len || id_len > ML__ELF_BUILD_ID_MAX ||
	     !inside(m, len, id, id_len)))
		abort();
	int k = ml__elf_section_named(&e, ".gnu_debuglink");
	if (k >= 0 && (k == 0 || (unsigned)k >= e.shnum))
		abort();
	const char *link;
	uint32_t crc;
	if (ml__elf_debuglink(&e, &link, &crc) &&
	    (k < 0 || !inside(m, len, link, strlen(link) + 1) || !*link ||
	     strchr(link, '/') || !strcmp(link, ".") || !strcmp(link, "..")))
		abort();
	(void)ml__elf_crc32(0, m, len < 4096 ? len : 4096);
	uint64_t lo, hi;
	for (unsigned i = 0; i <= e.shnum; i++)
		if (ml__elf_code_span(&e, i, &lo, &hi) &&
		    (i == e.shnum || lo >= hi))
			abort();
	return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static bool known;
	static uint16_t machine;
	if (!known) {
		machine = ml__run_host_machine();
		known = true;
	}
	unsigned char *buf = malloc(size ? size : 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	enum ml__elf_status st = read_all(buf, size);
	if (setjmp(back) == 0) {
		ml__run_check_elf("fuzz", buf, size, machine);
		/* Accepted: a 64-bit ELF file with its header, which the
		 * reader opens for this machine, with the segments the loader
		 * needs. */
		if (size < sizeof(Elf64_Ehdr) || memcmp(buf, ELFMAG, SELFMAG) ||
		    buf[EI_CLASS] != ELFCLASS64 || st != ML__ELF_OK)
			abort();
		struct ml__elf e;
		if (ml__elf_open(&e, buf, size, machine) != ML__ELF_OK ||
		    !ml__elf_has_segment(&e, PT_INTERP) ||
		    !ml__elf_has_segment(&e, PT_DYNAMIC))
			abort();
	}
	free(buf);
	return 0;
}
