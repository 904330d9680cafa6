/* The one ELF reader (elf.c): the only code of the project that parses
 * ELF headers and symbol tables.  Two sides:
 *
 * - a file image m[0, len), untrusted (a program named on the command
 *   line, an object mapped for its .symtab): every offset, size, index
 *   and string is checked against the image here, once, and table entries
 *   are copied out (a crafted file puts them at odd offsets, where a load
 *   in place would be misaligned).  Nothing here allocates; fuzzed by
 *   fuzz/fuzz-elf.c.
 * - a loaded object, as dl_iterate_phdr describes it: its loaded span and
 *   a symbol's address through its own hash table, without dlsym, without
 *   allocating or locking (usable before the allocator is known).
 *
 * Only 64-bit objects are read (the library is built for x86-64 and
 * other 64-bit targets).  Never installed. */
#ifndef ML_UTIL_ELF_H
#define ML_UTIL_ELF_H

#include "util/util.h"

#include <elf.h>

#pragma GCC visibility push(hidden)

/* ---- File images -------------------------------------------------------- */

struct ml__elf {
	const unsigned char *m;
	size_t len;
	Elf64_Ehdr eh;
	/* Headers whole in the image: their count, else 0.  phdrs_ok is
	 * false where the program header table is malformed (wrong entry
	 * size, or past the end). */
	unsigned phnum, shnum;
	bool phdrs_ok;
};

enum ml__elf_status {
	ML__ELF_OK,
	ML__ELF_NOT_ELF,       /* no ELF magic */
	ML__ELF_INVALID,       /* truncated header, or a class byte of none */
	ML__ELF_OTHER_CLASS,   /* 32-bit */
	ML__ELF_OTHER_MACHINE, /* another e_machine or byte order */
};

/* Check the ELF header of m[0, len) and set e up for the calls below
 * (only after ML__ELF_OK).  machine: the e_machine required, 0 for any. */
enum ml__elf_status ml__elf_open(struct ml__elf *e, const unsigned char *m,
                                 size_t len, uint16_t machine);
/* Program header i (i < e->phnum). */
bool ml__elf_phdr(const struct ml__elf *e, unsigned i, Elf64_Phdr *ph);
/* Is there a program header of this type (PT_INTERP, PT_DYNAMIC)? */
bool ml__elf_has_segment(const struct ml__elf *e, uint32_t type);
/* Section header i (i < e->shnum). */
bool ml__elf_shdr(const struct ml__elf *e, unsigned i, Elf64_Shdr *sh);
/* The index of the first section of this type at index from or later,
 * or -1. */
int ml__elf_section(const struct ml__elf *e, uint32_t type, unsigned from);

/* A table section (symbols, dynamic entries) and the string table it
 * links to, both whole in the image: n entries of ent bytes. */
struct ml__elf_table {
	const unsigned char *at;
	size_t n, ent;
	const char *str;
	size_t strsz;
};
/* Section i as a table of entries of ent bytes; false where it or its
 * string table is not whole in the image (or sh_link is out of range). */
bool ml__elf_table(const struct ml__elf *e, unsigned i, size_t ent,
                   struct ml__elf_table *t);
/* The first section of this type (SHT_SYMTAB, SHT_DYNSYM) that is a
 * whole symbol table; false if none. */
bool ml__elf_symbols(const struct ml__elf *e, uint32_t type,
                     struct ml__elf_table *t);
/* Entry i (i < t->n), copied out. */
bool ml__elf_sym(const struct ml__elf_table *t, size_t i, Elf64_Sym *s);
bool ml__elf_dyn(const struct ml__elf_table *t, size_t i, Elf64_Dyn *d);
/* The string at off in t's string table, NULL where it does not end
 * inside the table. */
const char *ml__elf_str(const struct ml__elf_table *t, uint64_t off);
/* The first DT_NEEDED name of the dynamic section(s) that starts with one
 * of the n prefixes (n = 0: any), or NULL.  One pass over the entries. */
const char *ml__elf_needs(const struct ml__elf *e, const char *const *prefixes,
                          size_t n);
/* A defined function (STT_FUNC or STT_GNU_IFUNC) of this name in .dynsym
 * or .symtab: "does this object define malloc". */
bool ml__elf_defines(const struct ml__elf *e, const char *name);

/* The address span [*lo, *hi) of section i, where it is executable
 * (SHF_EXECINSTR), not empty and does not wrap; false otherwise.  Its
 * bytes need not be in the image (a debug file's .text is SHT_NOBITS):
 * what bounds a function of size 0. */
bool ml__elf_code_span(const struct ml__elf *e, unsigned i, uint64_t *lo,
                       uint64_t *hi);
/* The index of the section of this name (".gnu_debuglink"), through the
 * section-name table (e_shstrndx, or section 0's sh_link for
 * SHN_XINDEX), or -1. */
int ml__elf_section_named(const struct ml__elf *e, const char *name);
/* The longest build id accepted: GNU ld writes 20 bytes (sha1), 16 (md5
 * or uuid); 64 leaves room for any digest and bounds the path made of
 * it. */
#define ML__ELF_BUILD_ID_MAX 64
/* The build id: the descriptor of the first NT_GNU_BUILD_ID note named
 * "GNU" in a SHT_NOTE section, else (no section headers) in a PT_NOTE
 * segment; 1 to ML__ELF_BUILD_ID_MAX bytes whole in the image.  false if
 * none. */
bool ml__elf_build_id(const struct ml__elf *e, const unsigned char **id,
                      size_t *len);
/* .gnu_debuglink: the separate debug file's name, a file name (not
 * empty, no '/', "." or "..") ending inside the section, and the CRC-32
 * of that file's bytes stored after it (at the next multiple of 4).
 * false if none or malformed. */
bool ml__elf_debuglink(const struct ml__elf *e, const char **name,
                       uint32_t *crc);
/* CRC-32 as .gnu_debuglink stores it (zlib's crc32: polynomial
 * 0xedb88320, reflected, inverted), continued from crc (0 to begin). */
uint32_t ml__elf_crc32(uint32_t crc, const unsigned char *p, size_t n);

/* ---- Loaded objects ----------------------------------------------------- */

struct dl_phdr_info;
/* The span [*lo, *hi) of the object's PT_LOAD segments; true if addr
 * lies in one of them. */
bool ml__elf_span(const struct dl_phdr_info *info, uintptr_t addr,
                  uintptr_t *lo, uintptr_t *hi);
/* The address of the global definition `name` in one object, from its
 * own dynamic symbol table (GNU or SysV hash), as the loader would bind
 * it (no hidden version, no IFUNC); NULL if it has none. */
void *ml__elf_symbol(const struct dl_phdr_info *info, const char *name);
/* The same in glibc's libc itself (the object that defines
 * gnu_get_libc_version), wherever it lies in the lookup order: the
 * genuine entry point behind a name the library, or an allocator, also
 * exports (__libc_malloc, __sbrk).  NULL if none. */
void *ml__elf_libc_symbol(const char *name);

/* A reference to route: the GOT slots of an object's references to name
 * that hold from (the definition they were bound to, glibc's) are
 * rewritten to hold to. */
struct ml__elf_route {
	const char *name;
	const void *from, *to;
};
/* Rewrite, in one loaded object, the slots of its R_X86_64_JUMP_SLOT and
 * R_X86_64_GLOB_DAT relocations (R_AARCH64_ on aarch64), from DT_JMPREL
 * and DT_RELA, that refer to a symbol it does not define, named in
 * routes[0, n), and hold that route's from or a lazy binding's stub (an
 * address inside the object).  The object's RELRO pages are made
 * writable for it and read-only again.  Allocates nothing, takes no lock:
 * the caller serialises its calls.  The number of its slots that hold a
 * route's to afterwards (rewritten now or before), or -1 where the RELRO
 * pages could not be made writable, or on another target. */
int ml__elf_rebind(const struct dl_phdr_info *info,
                   const struct ml__elf_route *routes, size_t n);

#pragma GCC visibility pop

#endif
