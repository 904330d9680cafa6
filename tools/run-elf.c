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

#include "../lib/util/elf.h"
#include "run.h"
#include "tool.h"

/* The library is 64-bit, as this command is (the reader reads only that
 * class), and for this command's machine: from our own ELF header. */
uint16_t ml__run_host_machine(void)
{
	struct ml__elf e;
	unsigned char h[sizeof e.eh];
	uint16_t machine = 0;
	int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && read(fd, h, sizeof h) == (ssize_t)sizeof h &&
	    ml__elf_open(&e, h, sizeof h, 0) == ML__ELF_OK)
		machine = e.eh.e_machine;
	if (fd >= 0)
		close(fd);
	return machine;
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
 * library can be preloaded into it, else refuse.  The file is read by the
 * one ELF reader (lib/util/elf.c), which checks every offset and size
 * against len; here only what it found is judged, with messages that say
 * what is wrong (tested by fuzz/fuzz-elf.c). */
void ml__run_check_elf(const char *path, const unsigned char *m, size_t len,
                       uint16_t machine)
{
	struct ml__elf e;
	switch (ml__elf_open(&e, m, len, machine)) {
	case ML__ELF_OK:
		break;
	case ML__ELF_NOT_ELF:
		ml__tool_usage_error(CMD,
		                     "'%s' is neither an ELF executable nor a "
		                     "#! script",
		                     path);
	case ML__ELF_INVALID:
		/* The identification is all that can be read: say which part
		 * is wrong, not "another class" (0.2 called a truncated
		 * 64-bit file 64-bit). */
		if (len < EI_NIDENT)
			ml__tool_usage_error(
			    CMD,
			    "'%s' is truncated: %zu bytes, less "
			    "than an ELF identification (%d)",
			    path, len, EI_NIDENT);
		if (m[EI_CLASS] != ELFCLASS64)
			ml__tool_usage_error(CMD,
			                     "'%s' is not a valid ELF file: "
			                     "unknown class %u",
			                     path, m[EI_CLASS]);
		ml__tool_usage_error(CMD,
		                     "'%s' is truncated: %zu bytes, less than "
		                     "its ELF header (%zu)",
		                     path, len, sizeof e.eh);
	case ML__ELF_OTHER_CLASS: /* the reader reads 64-bit files only */
		ml__tool_usage_error(CMD,
		                     "'%s' is a 32-bit program: the library "
		                     "(64-bit) cannot be preloaded into it",
		                     path);
	case ML__ELF_OTHER_MACHINE:
		ml__tool_usage_error(CMD,
		                     "'%s' is for another machine: the library "
		                     "cannot be preloaded into it",
		                     path);
	}
	if (!e.phdrs_ok && e.eh.e_phentsize != sizeof(Elf64_Phdr))
		ml__tool_usage_error(
		    CMD,
		    "'%s' is not a valid ELF file: program "
		    "header entries of %u bytes (expected %zu)",
		    path, e.eh.e_phentsize, sizeof(Elf64_Phdr));
	if (!e.phdrs_ok)
		ml__tool_usage_error(
		    CMD,
		    "'%s' is truncated or invalid: its program "
		    "headers (%u at offset %" PRIu64 ") end "
		    "past its %zu bytes",
		    path, e.eh.e_phnum, (uint64_t)e.eh.e_phoff, len);
	/* No PT_INTERP: nothing runs the loader, so nothing preloads (a
	 * static-pie binary has PT_DYNAMIC but relocates itself). */
	if (!ml__elf_has_segment(&e, PT_INTERP) ||
	    !ml__elf_has_segment(&e, PT_DYNAMIC))
		ml__tool_usage_error(
		    CMD,
		    "'%s' is statically linked: the library cannot be "
		    "preloaded into it (limits would not apply)",
		    path);
	/* Without whole section headers the reader finds no tables: the
	 * checks below pass, as the loader needs none of them. */
	/* Go's runtime takes its heap from the kernel by raw system calls,
	 * never through mmap or malloc: linked dynamically (cgo) the
	 * library loads, counts only the C side, and Go's heap runs
	 * unlimited (issue 41: 1.8 x a heap limit).  A static Go program
	 * is refused above; this one is refused as clearly.  Go's linker
	 * writes .go.buildinfo into every program, stripped or not. */
	if (ml__elf_section_named(&e, ".go.buildinfo") >= 0 ||
	    ml__elf_section_named(&e, ".note.go.buildid") >= 0)
		ml__tool_usage_error(
		    CMD,
		    "'%s' is a Go program: Go's runtime maps its heap "
		    "with raw system calls, which the library cannot "
		    "see (limits would not apply to it)",
		    path);
	const char *san = ml__elf_needs(
	    &e, sanitizers, sizeof sanitizers / sizeof sanitizers[0]);
	if (san)
		ml__tool_usage_error(
		    CMD,
		    "'%s' is linked with %s, which replaces malloc: "
		    "the library would be bypassed",
		    path, san);
	const char *a = ml__elf_needs(&e, allocators,
	                              sizeof allocators / sizeof allocators[0]);
	free(linked_allocator);
	linked_allocator = a ? strdup(a) : NULL;
	if (ml__elf_defines(&e, "malloc"))
		ml__tool_usage_error(CMD,
		                     "'%s' has its own malloc: its allocations "
		                     "would bypass the library",
		                     path);
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
	ml__run_check_elf(path, m, got, ml__run_host_machine());
	munmap(m, got);
}
