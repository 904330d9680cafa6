/* The one ELF reader (declarations and what it checks: elf.h): file
 * images for the symbolizer (run/symbols.c) and `memlimits run`, loaded
 * objects for finding the allocator (alloc/underlying.c) and the object
 * that holds an address (objects.c). */
#define _GNU_SOURCE
#include "util/elf.h"

#include <link.h>
#include <string.h>

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
