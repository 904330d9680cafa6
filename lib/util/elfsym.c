/* A symbol's address in one loaded object, read from the object's own
 * dynamic symbol table: what dlsym does for one object, without dlsym.
 * dlsym may allocate (its error state), and the allocator below the
 * library must be found before any allocation is forwarded (alloc/next.c);
 * this allocates nothing and takes no lock. */
#define _GNU_SOURCE
#include "util/util.h"

#include <link.h>
#include <string.h>

#ifndef ElfW /* for analysers that read no system header (cppcheck) */
#define ElfW(type) Elf64_##type
#endif

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
