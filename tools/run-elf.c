/* memlimits run: the checks on the program file.  Owns everything that
 * would make the limits silently not apply and is refused before anything
 * runs: a file that is not a regular executable, a set-user-ID program
 * (the loader ignores LD_PRELOAD paths there), and in the ELF file itself
 * a static program, another ELF class or machine, its own malloc or a
 * sanitizer runtime; also which allocator the program links.  #! scripts
 * go to run-script.c. */
#include "config.h"

#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "run.h"
#include "tool.h"

struct elf {
	const unsigned char *m;
	size_t len;
};

static bool in(const struct elf *e, uint64_t off, uint64_t size)
{
	return off <= e->len && size <= e->len - off;
}

/* Headers and table entries are copied out, never read in place: a
 * crafted file puts them at any offset, and a misaligned load is
 * undefined behaviour (a UBSan build aborts on it). */
static bool get(const struct elf *e, uint64_t off, void *to, size_t size)
{
	if (!in(e, off, size))
		return false;
	memcpy(to, e->m + off, size);
	return true;
}

/* Section i and the section it links to (its string table), both whole
 * in the file. */
static bool section(const struct elf *e, const Elf64_Ehdr *eh, unsigned i,
                    Elf64_Shdr *sh, Elf64_Shdr *str)
{
	return get(e, eh->e_shoff + (uint64_t)i * sizeof *sh, sh, sizeof *sh) &&
	       sh->sh_link < eh->e_shnum &&
	       get(e, eh->e_shoff + (uint64_t)sh->sh_link * sizeof *str, str,
	           sizeof *str) &&
	       in(e, sh->sh_offset, sh->sh_size) &&
	       in(e, str->sh_offset, str->sh_size);
}

/* The library is built for this command's own class and machine. */
void ml__run_host_ident(unsigned char *cls, uint16_t *machine)
{
	*cls = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
	*machine = 0;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	Elf64_Ehdr h;
	if (fd >= 0 && read(fd, &h, sizeof h) == (ssize_t)sizeof h)
		*machine = h.e_machine; /* same offset in both classes */
	if (fd >= 0)
		close(fd);
}

/* A defined function "malloc" in a symbol table section. */
static bool defines_malloc(const struct elf *e, const Elf64_Ehdr *eh,
                           unsigned type)
{
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		Elf64_Shdr sh, str;
		if (!section(e, eh, i, &sh, &str) || sh.sh_type != type)
			continue;
		const char *s = (const char *)e->m + str.sh_offset;
		for (uint64_t j = 0; j < sh.sh_size / sizeof(Elf64_Sym); j++) {
			Elf64_Sym sym;
			memcpy(&sym, e->m + sh.sh_offset + j * sizeof sym,
			       sizeof sym);
			if (sym.st_shndx != SHN_UNDEF &&
			    ELF64_ST_TYPE(sym.st_info) == STT_FUNC &&
			    sym.st_name < str.sh_size &&
			    str.sh_size - sym.st_name >= sizeof "malloc" &&
			    !memcmp(s + sym.st_name, "malloc", sizeof "malloc"))
				return true;
		}
	}
	return false;
}

/* A DT_NEEDED library whose name starts with one of `names`. */
static const char *needs_one_of(const struct elf *e, const Elf64_Ehdr *eh,
                                const char *const *names, size_t nnames)
{
	for (unsigned i = 0; i < eh->e_shnum; i++) {
		Elf64_Shdr sh, str;
		if (!section(e, eh, i, &sh, &str) || sh.sh_type != SHT_DYNAMIC)
			continue;
		const char *s = (const char *)e->m + str.sh_offset;
		for (uint64_t j = 0; j < sh.sh_size / sizeof(Elf64_Dyn); j++) {
			Elf64_Dyn d;
			memcpy(&d, e->m + sh.sh_offset + j * sizeof d,
			       sizeof d);
			if (d.d_tag == DT_NULL)
				break;
			if (d.d_tag != DT_NEEDED ||
			    d.d_un.d_val >= str.sh_size ||
			    !memchr(s + d.d_un.d_val, 0,
			            str.sh_size - d.d_un.d_val))
				continue;
			for (size_t k = 0; k < nnames; k++)
				if (!strncmp(s + d.d_un.d_val, names[k],
				             strlen(names[k])))
					return s + d.d_un.d_val;
		}
	}
	return NULL;
}

/* A sanitizer runtime replaces malloc and insists on coming first, before
 * any preloaded library. */
static const char *const sanitizers[] = {"libasan", "libtsan", "libmsan",
                                         "libhwasan", "liblsan"};

/* Allocators a program may link (DT_NEEDED), as --allocator names them
 * (ml__run_allocator_name); the one the checked program links, or NULL. */
static const char *const allocators[] = {"libjemalloc", "libtcmalloc",
                                         "libmimalloc"};
static char *linked_allocator;

const char *ml__run_linked_allocator(void)
{
	return linked_allocator;
}

const char *ml__run_allocator_name(const char *soname)
{
	return !strncmp(soname, "libjemalloc", 11)   ? "jemalloc"
	       : !strncmp(soname, "libtcmalloc", 11) ? "tcmalloc"
	                                             : "mimalloc";
}

/* The loader runs set-user-ID, set-group-ID and file-capability programs
 * in secure mode, where LD_PRELOAD paths are ignored. */
static bool secure_exec(const char *path, const struct stat *st)
{
	struct statvfs vfs;
	if (statvfs(path, &vfs) == 0 && (vfs.f_flag & ST_NOSUID))
		return false;
	if ((st->st_mode & S_ISUID) && st->st_uid != getuid())
		return true;
	if ((st->st_mode & S_ISGID) && st->st_gid != getgid())
		return true;
	return getxattr(path, "security.capability", NULL, 0) > 0;
}

/* The checks on an ELF file's contents, m[0..len): return when the
 * library can be preloaded into it, else refuse.  Every offset and size in
 * the file is checked against len (tested by fuzz/fuzz-elf.c). */
void ml__run_check_elf(const char *path, const unsigned char *m, size_t len,
                       unsigned char cls, uint16_t machine)
{
	struct elf e = {m, len};
	if (len < SELFMAG || memcmp(m, ELFMAG, SELFMAG) != 0)
		ml__tool_usage_error(CMD,
		                     "'%s' is neither an ELF executable nor a "
		                     "#! script",
		                     path);
	if (len < EI_NIDENT)
		ml__tool_usage_error(CMD,
		                     "'%s' is truncated: %zu bytes, less than "
		                     "an ELF identification (%d)",
		                     path, len, EI_NIDENT);
	Elf64_Ehdr eh;
	if (m[EI_CLASS] != ELFCLASS32 && m[EI_CLASS] != ELFCLASS64)
		ml__tool_usage_error(CMD,
		                     "'%s' is not a valid ELF file: unknown "
		                     "class %u",
		                     path, m[EI_CLASS]);
	/* Cut short, the class is all that can be read: say so, not
	 * "another class" (0.2 called a truncated 64-bit file 64-bit). */
	if (m[EI_CLASS] == cls && !get(&e, 0, &eh, sizeof eh))
		ml__tool_usage_error(CMD,
		                     "'%s' is truncated: %zu bytes, less than "
		                     "its ELF header (%zu)",
		                     path, len, sizeof eh);
	if (m[EI_CLASS] != cls)
		ml__tool_usage_error(
		    CMD,
		    "'%s' is a %s-bit program: the library (%s-bit) cannot be "
		    "preloaded into it",
		    path, m[EI_CLASS] == ELFCLASS32 ? "32" : "64",
		    cls == ELFCLASS32 ? "32" : "64");
	if (machine && eh.e_machine != machine)
		ml__tool_usage_error(CMD,
		                     "'%s' is for another machine: the library "
		                     "cannot be preloaded into it",
		                     path);
	if (eh.e_phentsize != sizeof(Elf64_Phdr))
		ml__tool_usage_error(
		    CMD,
		    "'%s' is not a valid ELF file: program "
		    "header entries of %u bytes (expected %zu)",
		    path, eh.e_phentsize, sizeof(Elf64_Phdr));
	if (!in(&e, eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr)))
		ml__tool_usage_error(
		    CMD,
		    "'%s' is truncated or invalid: its program "
		    "headers (%u at offset %" PRIu64 ") end "
		    "past its %zu bytes",
		    path, eh.e_phnum, (uint64_t)eh.e_phoff, len);
	bool interp = false, dynamic = false;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		get(&e, eh.e_phoff + (uint64_t)i * sizeof ph, &ph, sizeof ph);
		interp |= ph.p_type == PT_INTERP;
		dynamic |= ph.p_type == PT_DYNAMIC;
	}
	/* No PT_INTERP: nothing runs the loader, so nothing preloads (a
	 * static-pie binary has PT_DYNAMIC but relocates itself). */
	if (!interp || !dynamic)
		ml__tool_usage_error(
		    CMD,
		    "'%s' is statically linked: the library cannot be "
		    "preloaded into it (limits would not apply)",
		    path);
	if (eh.e_shentsize == sizeof(Elf64_Shdr) &&
	    in(&e, eh.e_shoff, (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr))) {
		const char *san =
		    needs_one_of(&e, &eh, sanitizers,
		                 sizeof sanitizers / sizeof sanitizers[0]);
		if (san)
			ml__tool_usage_error(
			    CMD,
			    "'%s' is linked with %s, which replaces malloc: "
			    "the library would be bypassed",
			    path, san);
		const char *a =
		    needs_one_of(&e, &eh, allocators,
		                 sizeof allocators / sizeof allocators[0]);
		free(linked_allocator);
		linked_allocator = a ? strdup(a) : NULL;
		if (defines_malloc(&e, &eh, SHT_DYNSYM) ||
		    defines_malloc(&e, &eh, SHT_SYMTAB))
			ml__tool_usage_error(
			    CMD,
			    "'%s' has its own malloc: its allocations would "
			    "bypass the library",
			    path);
	}
}

void ml__run_check_program(const char *shown, const char *path, int depth)
{
	/* O_NONBLOCK: opening a FIFO (even one with the execute bit) must
	 * not wait for a writer; its type is refused just below. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		ml__tool_usage_error(CMD, "cannot run '%s': %s", path,
		                     strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		ml__tool_usage_error(CMD, "cannot run '%s': not a regular file",
		                     path);
	if (access(path, X_OK) != 0)
		ml__tool_usage_error(CMD, "cannot run '%s': %s", path,
		                     strerror(errno));
	if (secure_exec(path, &st))
		ml__tool_usage_error(
		    CMD,
		    "'%s' runs set-user-ID, set-group-ID or with file "
		    "capabilities: the loader would ignore the library",
		    path);
	/* Mapped, not read: only the pages of the headers and symbol
	 * tables are touched, whatever the size of the program. */
	size_t got = (size_t)st.st_size;
	unsigned char *m =
	    got ? mmap(NULL, got, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
	close(fd);
	if (m == MAP_FAILED)
		ml__tool_usage_error(CMD, "cannot read '%s': %s", path,
		                     got ? strerror(errno) : "empty file");
	if (got >= 2 && m[0] == '#' && m[1] == '!') {
		ml__run_check_script(shown, path, m, got, depth);
		munmap(m, got);
		return;
	}
	unsigned char cls;
	uint16_t machine;
	ml__run_host_ident(&cls, &machine);
	ml__run_check_elf(path, m, got, cls, machine);
	munmap(m, got);
}
