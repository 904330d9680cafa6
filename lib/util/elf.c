/* The one ELF reader (declarations and what it checks: elf.h): file
 * images for the symbolizer (run/symbols.c) and `memlimits run`, loaded
 * objects for finding the allocator (alloc/underlying.c) and the object
 * that holds an address (objects.c). */
#define _GNU_SOURCE
#include "util/elf.h"

#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef ElfW /* for analysers that read no system header (cppcheck) */
#define ElfW(type) Elf64_##type
#endif

/* ---- File images -------------------------------------------------------- */

static bool in(const struct ml__elf *e, uint64_t off, uint64_t size)
{
	return off <= e->len && size <= e->len - off;
}

/* Copied out, never read in place: a misaligned load is undefined
 * behaviour (a UBSan build aborts on it). */
static bool get(const struct ml__elf *e, uint64_t off, void *to, size_t size)
{
	if (!in(e, off, size))
		return false;
	memcpy(to, e->m + off, size);
	return true;
}

static bool little_endian(void)
{
	const uint16_t one = 1;
	return *(const unsigned char *)&one == 1;
}

enum ml__elf_status ml__elf_open(struct ml__elf *e, const unsigned char *m,
                                 size_t len, uint16_t machine)
{
	memset(e, 0, sizeof *e);
	e->m = m;
	e->len = len;
	if (len < SELFMAG || memcmp(m, ELFMAG, SELFMAG) != 0)
		return ML__ELF_NOT_ELF;
	if (len < EI_NIDENT || m[EI_CLASS] == ELFCLASSNONE ||
	    m[EI_CLASS] >= ELFCLASSNUM)
		return ML__ELF_INVALID;
	if (m[EI_CLASS] != ELFCLASS64)
		return ML__ELF_OTHER_CLASS;
	if (!get(e, 0, &e->eh, sizeof e->eh))
		return ML__ELF_INVALID;
	if (m[EI_DATA] != (little_endian() ? ELFDATA2LSB : ELFDATA2MSB) ||
	    (machine && e->eh.e_machine != machine))
		return ML__ELF_OTHER_MACHINE;
	const Elf64_Ehdr *eh = &e->eh;
	e->phdrs_ok =
	    eh->e_phentsize == sizeof(Elf64_Phdr) &&
	    in(e, eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(Elf64_Phdr));
	e->phnum = e->phdrs_ok ? eh->e_phnum : 0;
	if (eh->e_shentsize == sizeof(Elf64_Shdr) &&
	    in(e, eh->e_shoff, (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr)))
		e->shnum = eh->e_shnum;
	return ML__ELF_OK;
}

bool ml__elf_phdr(const struct ml__elf *e, unsigned i, Elf64_Phdr *ph)
{
	return i < e->phnum &&
	       get(e, e->eh.e_phoff + (uint64_t)i * sizeof *ph, ph, sizeof *ph);
}

bool ml__elf_has_segment(const struct ml__elf *e, uint32_t type)
{
	Elf64_Phdr ph;
	for (unsigned i = 0; i < e->phnum; i++)
		if (ml__elf_phdr(e, i, &ph) && ph.p_type == type)
			return true;
	return false;
}

bool ml__elf_shdr(const struct ml__elf *e, unsigned i, Elf64_Shdr *sh)
{
	return i < e->shnum &&
	       get(e, e->eh.e_shoff + (uint64_t)i * sizeof *sh, sh, sizeof *sh);
}

int ml__elf_section(const struct ml__elf *e, uint32_t type, unsigned from)
{
	Elf64_Shdr sh;
	for (unsigned i = from; i < e->shnum; i++)
		if (ml__elf_shdr(e, i, &sh) && sh.sh_type == type)
			return (int)i;
	return -1;
}

bool ml__elf_table(const struct ml__elf *e, unsigned i, size_t ent,
                   struct ml__elf_table *t)
{
	Elf64_Shdr sh, str;
	memset(t, 0, sizeof *t);
	/* A compressed section (SHF_COMPRESSED: objcopy
	 * --compress-debug-sections) holds no entries readable in place. */
	if (!ent || !ml__elf_shdr(e, i, &sh) || sh.sh_type == SHT_NOBITS ||
	    (sh.sh_flags & SHF_COMPRESSED) ||
	    !in(e, sh.sh_offset, sh.sh_size) ||
	    !ml__elf_shdr(e, sh.sh_link, &str) || str.sh_type == SHT_NOBITS ||
	    (str.sh_flags & SHF_COMPRESSED) ||
	    !in(e, str.sh_offset, str.sh_size))
		return false;
	t->at = e->m + sh.sh_offset;
	t->n = sh.sh_size / ent;
	t->ent = ent;
	t->str = (const char *)e->m + str.sh_offset;
	t->strsz = str.sh_size;
	return true;
}

bool ml__elf_symbols(const struct ml__elf *e, uint32_t type,
                     struct ml__elf_table *t)
{
	for (int i = ml__elf_section(e, type, 0); i >= 0;
	     i = ml__elf_section(e, type, (unsigned)i + 1))
		if (ml__elf_table(e, (unsigned)i, sizeof(Elf64_Sym), t))
			return true;
	return false;
}

bool ml__elf_sym(const struct ml__elf_table *t, size_t i, Elf64_Sym *s)
{
	if (i >= t->n || t->ent < sizeof *s)
		return false;
	memcpy(s, t->at + i * t->ent, sizeof *s);
	return true;
}

bool ml__elf_dyn(const struct ml__elf_table *t, size_t i, Elf64_Dyn *d)
{
	if (i >= t->n || t->ent < sizeof *d)
		return false;
	memcpy(d, t->at + i * t->ent, sizeof *d);
	return true;
}

const char *ml__elf_str(const struct ml__elf_table *t, uint64_t off)
{
	if (off >= t->strsz || !memchr(t->str + off, 0, t->strsz - off))
		return NULL;
	return t->str + off;
}

static bool has_prefix(const char *s, const char *const *prefixes, size_t n)
{
	if (n == 0)
		return true;
	for (size_t k = 0; k < n; k++)
		if (!strncmp(s, prefixes[k], strlen(prefixes[k])))
			return true;
	return false;
}

const char *ml__elf_needs(const struct ml__elf *e, const char *const *prefixes,
                          size_t n)
{
	struct ml__elf_table t;
	Elf64_Dyn d;
	for (int i = ml__elf_section(e, SHT_DYNAMIC, 0); i >= 0;
	     i = ml__elf_section(e, SHT_DYNAMIC, (unsigned)i + 1)) {
		if (!ml__elf_table(e, (unsigned)i, sizeof d, &t))
			continue;
		for (size_t j = 0; ml__elf_dyn(&t, j, &d) && d.d_tag != DT_NULL;
		     j++) {
			const char *s = d.d_tag == DT_NEEDED
			                    ? ml__elf_str(&t, d.d_un.d_val)
			                    : NULL;
			if (s && has_prefix(s, prefixes, n))
				return s;
		}
	}
	return NULL;
}

static bool defines_in(const struct ml__elf *e, uint32_t type, const char *name)
{
	struct ml__elf_table t;
	Elf64_Sym s;
	for (int i = ml__elf_section(e, type, 0); i >= 0;
	     i = ml__elf_section(e, type, (unsigned)i + 1)) {
		if (!ml__elf_table(e, (unsigned)i, sizeof s, &t))
			continue;
		for (size_t j = 0; ml__elf_sym(&t, j, &s); j++) {
			unsigned st = ELF64_ST_TYPE(s.st_info);
			const char *n;
			if (s.st_shndx != SHN_UNDEF &&
			    (st == STT_FUNC || st == STT_GNU_IFUNC) &&
			    (n = ml__elf_str(&t, s.st_name)) &&
			    !strcmp(n, name))
				return true;
		}
	}
	return false;
}

bool ml__elf_defines(const struct ml__elf *e, const char *name)
{
	return defines_in(e, SHT_DYNSYM, name) ||
	       defines_in(e, SHT_SYMTAB, name);
}

bool ml__elf_code_span(const struct ml__elf *e, unsigned i, uint64_t *lo,
                       uint64_t *hi)
{
	Elf64_Shdr sh;
	if (!ml__elf_shdr(e, i, &sh) || !(sh.sh_flags & SHF_EXECINSTR) ||
	    !sh.sh_size || sh.sh_addr + sh.sh_size < sh.sh_addr)
		return false;
	*lo = sh.sh_addr;
	*hi = sh.sh_addr + sh.sh_size;
	return true;
}

int ml__elf_section_named(const struct ml__elf *e, const char *name)
{
	Elf64_Shdr sh, str;
	unsigned si = e->eh.e_shstrndx;
	if (si == SHN_XINDEX) {
		if (!ml__elf_shdr(e, 0, &sh))
			return -1;
		si = sh.sh_link;
	}
	if (si == SHN_UNDEF || !ml__elf_shdr(e, si, &str) ||
	    str.sh_type == SHT_NOBITS || !in(e, str.sh_offset, str.sh_size))
		return -1;
	struct ml__elf_table names = {.str = (const char *)e->m + str.sh_offset,
	                              .strsz = str.sh_size};
	for (unsigned i = 1; i < e->shnum; i++) {
		const char *n;
		if (ml__elf_shdr(e, i, &sh) &&
		    (n = ml__elf_str(&names, sh.sh_name)) && !strcmp(n, name))
			return (int)i;
	}
	return -1;
}

/* Notes in m[off, off + size): the descriptor of the first one named
 * "GNU" of this type.  Entries are padded to align (4, or 8 for notes in
 * 8-aligned sections, as binutils reads them); each step moves on by at
 * least 12 bytes. */
static bool note(const struct ml__elf *e, uint64_t off, uint64_t size,
                 uint64_t align, uint32_t type, const unsigned char **desc,
                 size_t *len)
{
	if (!in(e, off, size))
		return false;
	align = align == 8 ? 8 : 4;
	uint64_t end = off + size;
	while (end - off >= sizeof(Elf64_Nhdr)) {
		Elf64_Nhdr nh;
		get(e, off, &nh, sizeof nh);
		uint64_t name = off + sizeof nh;
		uint64_t name_pad =
		    ((uint64_t)nh.n_namesz + align - 1) & ~(align - 1);
		if (name_pad > end - name)
			return false;
		uint64_t d = name + name_pad;
		uint64_t desc_pad =
		    ((uint64_t)nh.n_descsz + align - 1) & ~(align - 1);
		if (nh.n_descsz > end - d)
			return false;
		if (nh.n_type == type && nh.n_namesz == 4 &&
		    !memcmp(e->m + name, "GNU", 4)) {
			*desc = e->m + d;
			*len = nh.n_descsz;
			return true;
		}
		if (desc_pad > end - d)
			return false;
		off = d + desc_pad;
	}
	return false;
}

bool ml__elf_build_id(const struct ml__elf *e, const unsigned char **id,
                      size_t *len)
{
	const unsigned char *d = NULL;
	size_t n = 0;
	bool found = false;
	Elf64_Shdr sh;
	Elf64_Phdr ph;
	for (int i = ml__elf_section(e, SHT_NOTE, 0); i >= 0 && !found;
	     i = ml__elf_section(e, SHT_NOTE, (unsigned)i + 1))
		found = ml__elf_shdr(e, (unsigned)i, &sh) &&
		        note(e, sh.sh_offset, sh.sh_size, sh.sh_addralign,
		             NT_GNU_BUILD_ID, &d, &n);
	for (unsigned i = 0; !e->shnum && i < e->phnum && !found; i++)
		found = ml__elf_phdr(e, i, &ph) && ph.p_type == PT_NOTE &&
		        note(e, ph.p_offset, ph.p_filesz, ph.p_align,
		             NT_GNU_BUILD_ID, &d, &n);
	if (!found || n == 0 || n > ML__ELF_BUILD_ID_MAX)
		return false;
	*id = d;
	*len = n;
	return true;
}

bool ml__elf_debuglink(const struct ml__elf *e, const char **name,
                       uint32_t *crc)
{
	Elf64_Shdr sh;
	int i = ml__elf_section_named(e, ".gnu_debuglink");
	if (i < 0 || !ml__elf_shdr(e, (unsigned)i, &sh) ||
	    sh.sh_type == SHT_NOBITS || !in(e, sh.sh_offset, sh.sh_size))
		return false;
	const char *s = (const char *)e->m + sh.sh_offset;
	const char *nul = memchr(s, 0, sh.sh_size);
	if (!nul || nul == s || memchr(s, '/', (size_t)(nul - s)) ||
	    !strcmp(s, ".") || !strcmp(s, ".."))
		return false;
	uint64_t at = ((uint64_t)(nul - s) + 1 + 3) & ~(uint64_t)3;
	if (at > sh.sh_size || sh.sh_size - at < 4)
		return false;
	memcpy(crc, s + at, 4);
	*name = s;
	return true;
}

/* A byte at a time through a table made at each call (1 KiB of stack,
 * 2 048 steps): eight times faster than bit by bit over a debug file of
 * 100 MiB, and no state shared between threads. */
uint32_t ml__elf_crc32(uint32_t crc, const unsigned char *p, size_t n)
{
	uint32_t table[256];
	for (uint32_t b = 0; b < 256; b++) {
		uint32_t c = b;
		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
		table[b] = c;
	}
	crc = ~crc;
	while (n--)
		crc = (crc >> 8) ^ table[(crc ^ *p++) & 0xff];
	return ~crc;
}

/* ---- Loaded objects -----------------------------------------------------
 *
 * What the loader has mapped and relocated is read in place: the loader
 * itself has used these tables. */

bool ml__elf_span(const struct dl_phdr_info *info, uintptr_t addr,
                  uintptr_t *lo, uintptr_t *hi)
{
	bool in_it = false;
	*lo = UINTPTR_MAX;
	*hi = 0;
	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD)
			continue;
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;
		in_it |= addr - s < ph->p_memsz;
		if (s < *lo)
			*lo = s;
		if (s + ph->p_memsz > *hi)
			*hi = s + ph->p_memsz;
	}
	return in_it;
}

/* A symbol's address in one loaded object, read from the object's own
 * dynamic symbol table: what dlsym does for one object, without dlsym.
 * dlsym may allocate (its error state), and the allocator below the
 * library must be found before any allocation is forwarded
 * (alloc/underlying.c). */
struct dyn {
	const ElfW(Sym) * sym;
	const char *str;
	const ElfW(Half) * versym;
	const uint32_t *gnu_hash;
	const uint32_t *hash;
};

/* glibc relocates the pointers of _DYNAMIC in place on most targets, not
 * on all (and not the vDSO's): an address below the load base is an
 * unrelocated offset. */
static const void *at(const struct dl_phdr_info *info, ElfW(Addr) p)
{
	if (info->dlpi_addr && p < info->dlpi_addr)
		p += info->dlpi_addr;
	return (const void *)p;
}

static bool read_dynamic(const struct dl_phdr_info *info, struct dyn *d)
{
	const ElfW(Dyn) *dyn = NULL;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr +
			                          info->dlpi_phdr[i].p_vaddr);
	if (!dyn)
		return false;
	memset(d, 0, sizeof *d);
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB:
			d->sym = at(info, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			d->str = at(info, dyn->d_un.d_ptr);
			break;
		case DT_VERSYM:
			d->versym = at(info, dyn->d_un.d_ptr);
			break;
		case DT_GNU_HASH:
			d->gnu_hash = at(info, dyn->d_un.d_ptr);
			break;
		case DT_HASH:
			d->hash = at(info, dyn->d_un.d_ptr);
			break;
		}
	}
	return d->sym && d->str && (d->gnu_hash || d->hash);
}

/* A definition the loader would bind to: defined, a function or object,
 * global or weak, and not a hidden (non-default) version. */
static bool usable(const struct dyn *d, uint32_t i, const char *name)
{
	const ElfW(Sym) *s = &d->sym[i];
	unsigned type = ELF64_ST_TYPE(s->st_info);
	unsigned bind = ELF64_ST_BIND(s->st_info);
	if (s->st_shndx == SHN_UNDEF || !s->st_value ||
	    (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_OBJECT) ||
	    (bind != STB_GLOBAL && bind != STB_WEAK) ||
	    (d->versym && (d->versym[i] & 0x8000)))
		return false;
	return strcmp(d->str + s->st_name, name) == 0;
}

static uint32_t gnu_hash(const char *s)
{
	uint32_t h = 5381;
	for (; *s; s++)
		h = h * 33 + (unsigned char)*s;
	return h;
}

static uint32_t sysv_hash(const char *s)
{
	uint32_t h = 0;
	for (; *s; s++) {
		h = (h << 4) + (unsigned char)*s;
		h ^= (h >> 24) & 0xf0;
	}
	return h & 0x0fffffff;
}

static const ElfW(Sym) * find(const struct dyn *d, const char *name)
{
	if (d->gnu_hash) {
		const uint32_t *g = d->gnu_hash;
		uint32_t nbuckets = g[0], symoffset = g[1], bloom_size = g[2];
		const ElfW(Addr) *bloom = (const ElfW(Addr) *)(g + 4);
		const uint32_t *buckets =
		    (const uint32_t *)(bloom + bloom_size);
		const uint32_t *chain = buckets + nbuckets;
		uint32_t h = gnu_hash(name);
		if (!nbuckets)
			return NULL;
		uint32_t i = buckets[h % nbuckets];
		if (i < symoffset)
			return NULL;
		for (;; i++) {
			uint32_t ch = chain[i - symoffset];
			if ((ch | 1) == (h | 1) && usable(d, i, name))
				return &d->sym[i];
			if (ch & 1)
				return NULL;
		}
	}
	const uint32_t *hs = d->hash;
	uint32_t nbucket = hs[0];
	const uint32_t *bucket = hs + 2, *chain = bucket + nbucket;
	if (!nbucket)
		return NULL;
	for (uint32_t i = bucket[sysv_hash(name) % nbucket]; i; i = chain[i])
		if (usable(d, i, name))
			return &d->sym[i];
	return NULL;
}

void *ml__elf_symbol(const struct dl_phdr_info *info, const char *name)
{
	struct dyn d;
	if (!read_dynamic(info, &d))
		return NULL;
	const ElfW(Sym) *s = find(&d, name);
	if (!s)
		return NULL;
	/* An IFUNC's address is its resolver's: the allocators resolve
	 * none of theirs this way; leave such a symbol alone. */
	if (ELF64_ST_TYPE(s->st_info) == STT_GNU_IFUNC)
		return NULL;
	return (void *)(info->dlpi_addr + s->st_value);
}

struct libc_search {
	const char *name;
	void *found;
};

static int visit_libc(struct dl_phdr_info *info, size_t size, void *data)
{
	struct libc_search *s = data;
	(void)size;
	if (!ml__elf_symbol(info, "gnu_get_libc_version"))
		return 0;
	s->found = ml__elf_symbol(info, s->name);
	return 1;
}

void *ml__elf_libc_symbol(const char *name)
{
	struct libc_search s = {.name = name, .found = NULL};
	dl_iterate_phdr(visit_libc, &s);
	return s.found;
}

/* ---- Rebinding a loaded object's references -----------------------------
 *
 * The GOT slots the loader filled for an object's references to another
 * object's functions, rewritten in place: how the Python module routes an
 * extension's malloc to the library without the preload (api/patch.c).
 * The tables are the loader's own, already used by it, so they are read
 * in place as ml__elf_symbol reads them. */

#if defined(__x86_64__)
#define ML__R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define ML__R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define ML__R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define ML__R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

#ifdef ML__R_JUMP_SLOT
/* The system call itself: the library defines an mprotect of its own,
 * and the command links this file without the library's system-call
 * helpers. */
static int protect(uintptr_t a, uintptr_t len, int prot)
{
	return (int)syscall(SYS_mprotect, (void *)a, (size_t)len, prot);
}

struct relocs {
	const ElfW(Sym) * sym;
	const char *str;
	size_t strsz;
	const ElfW(Rela) * rela, *jmprel;
	size_t relasz, jmprelsz;
	bool jmprel_is_rela;
};

static bool read_relocs(const struct dl_phdr_info *info, struct relocs *r)
{
	const ElfW(Dyn) *dyn = NULL;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr +
			                          info->dlpi_phdr[i].p_vaddr);
	if (!dyn)
		return false;
	memset(r, 0, sizeof *r);
	/* Both targets use RELA only; an object that says otherwise for
	 * its PLT is left alone. */
	r->jmprel_is_rela = true;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB:
			r->sym = at(info, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			r->str = at(info, dyn->d_un.d_ptr);
			break;
		case DT_STRSZ:
			r->strsz = dyn->d_un.d_val;
			break;
		case DT_RELA:
			r->rela = at(info, dyn->d_un.d_ptr);
			break;
		case DT_RELASZ:
			r->relasz = dyn->d_un.d_val;
			break;
		case DT_JMPREL:
			r->jmprel = at(info, dyn->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			r->jmprelsz = dyn->d_un.d_val;
			break;
		case DT_PLTREL:
			r->jmprel_is_rela = dyn->d_un.d_val == DT_RELA;
			break;
		}
	}
	if (!r->jmprel_is_rela)
		r->jmprel = NULL;
	return r->sym && r->str && r->strsz;
}

/* The route for relocation x, or NULL: a slot of the two kinds the loader
 * fills with a function's address, for a symbol the object does not
 * define itself (an allocator linked into it keeps its own calls). */
static const struct ml__elf_route *route_of(const struct relocs *r,
                                            const ElfW(Rela) * x,
                                            const struct ml__elf_route *routes,
                                            size_t n)
{
	uint32_t type = (uint32_t)ELF64_R_TYPE(x->r_info);
	uint32_t si = (uint32_t)ELF64_R_SYM(x->r_info);
	if ((type != ML__R_JUMP_SLOT && type != ML__R_GLOB_DAT) || si == 0)
		return NULL;
	const ElfW(Sym) *s = &r->sym[si];
	if (s->st_shndx != SHN_UNDEF || s->st_name >= r->strsz)
		return NULL;
	const char *name = r->str + s->st_name;
	for (size_t i = 0; i < n; i++)
		if (strcmp(name, routes[i].name) == 0)
			return &routes[i];
	return NULL;
}

/* May this slot be rewritten: it holds the function it is to be taken
 * from, or (bound lazily, not called yet) an address inside the object
 * itself, its PLT's stub.  A slot bound to any other definition (an
 * allocator of the object's own scope, RTLD_DEEPBIND) is left to it. */
static bool takes(const struct ml__elf_route *rt, uintptr_t v, uintptr_t lo,
                  uintptr_t hi)
{
	return v == (uintptr_t)rt->from || (v >= lo && v < hi);
}

/* One pass over a table: count (write false) or rewrite the slots. */
static size_t rebind_table(const struct dl_phdr_info *info,
                           const struct relocs *r, const ElfW(Rela) * t,
                           size_t sz, const struct ml__elf_route *routes,
                           size_t n, bool write, size_t *routed)
{
	size_t changed = 0;
	uintptr_t lo, hi;
	ml__elf_span(info, 0, &lo, &hi);
	for (size_t i = 0; t && i < sz / sizeof *t; i++) {
		const struct ml__elf_route *rt = route_of(r, &t[i], routes, n);
		if (!rt)
			continue;
		uintptr_t *slot =
		    (uintptr_t *)(info->dlpi_addr + t[i].r_offset);
		uintptr_t v = __atomic_load_n(slot, __ATOMIC_RELAXED);
		if (v == (uintptr_t)rt->to) {
			*routed += 1;
			continue;
		}
		if (!takes(rt, v, lo, hi))
			continue;
		/* One aligned store: a thread calling through the slot
		 * meanwhile reaches one function or the other; release, so
		 * that what the new function reads (the caller's tables) is
		 * seen by a thread that calls it through the slot. */
		if (write)
			__atomic_store_n(slot, (uintptr_t)rt->to,
			                 __ATOMIC_RELEASE);
		changed++;
	}
	return changed;
}

int ml__elf_rebind(const struct dl_phdr_info *info,
                   const struct ml__elf_route *routes, size_t n)
{
	struct relocs r;
	if (!read_relocs(info, &r))
		return 0;
	size_t routed = 0, ignored = 0;
	size_t want =
	    rebind_table(info, &r, r.jmprel, r.jmprelsz, routes, n, false,
	                 &routed) +
	    rebind_table(info, &r, r.rela, r.relasz, routes, n, false, &routed);
	if (!want)
		return (int)routed;
	/* After relocation the loader made the object's RELRO pages read
	 * only: the whole pages of PT_GNU_RELRO (glibc's _dl_protect_relro
	 * rounds both ends down).  They are made writable for the rewrite
	 * and read-only again after it, which is what they were: nothing
	 * else of the process writes them. */
	uintptr_t pg = (uintptr_t)getpagesize(), rs = 0, re = 0;
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
			uintptr_t s =
			    info->dlpi_addr + info->dlpi_phdr[i].p_vaddr;
			rs = s & ~(pg - 1);
			re = (s + info->dlpi_phdr[i].p_memsz) & ~(pg - 1);
		}
	if (re > rs && protect(rs, re - rs, PROT_READ | PROT_WRITE) != 0)
		return -1;
	size_t done =
	    rebind_table(info, &r, r.jmprel, r.jmprelsz, routes, n, true,
	                 &ignored) +
	    rebind_table(info, &r, r.rela, r.relasz, routes, n, true, &ignored);
	if (re > rs)
		protect(rs, re - rs, PROT_READ);
	return (int)(routed + done);
}
#else
int ml__elf_rebind(const struct dl_phdr_info *info,
                   const struct ml__elf_route *routes, size_t n)
{
	(void)info, (void)routes, (void)n;
	return -1;
}
#endif
