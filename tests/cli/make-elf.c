/* make-elf KIND FILE: write a small crafted ELF file for the checks of
 * `memlimits run` (tools/run-elf.c, ml__run_check_elf), with every table
 * at an odd offset, so that reading one in place is a misaligned load:
 *   malloc     a symbol table that defines the function "malloc"
 *   sanitizer  a dynamic section that needs libasan.so.8
 *   debug      what the symbolizer reads of a stripped object (issue
 *              36): section names, a build-id note, .gnu_debuglink, an
 *              executable section and a .symtab with a sized function
 *              and one of size 0
 *   debug-phdr the same build id in a PT_NOTE segment, without section
 *              headers
 *   go         a Go program linked dynamically (cgo): a .go.buildinfo
 *              section, which Go's linker writes even into a stripped
 *              program
 * All are dynamically linked (PT_INTERP and PT_DYNAMIC) for this
 * machine, so the checks reach the section tables.  Also the seeds of
 * fuzz/corpus/elf. */
#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned char file[1024];

/* Everything is placed at an odd offset after the header. */
#define PHOFF 65u
#define STROFF (PHOFF + 2 * sizeof(Elf64_Phdr))
#define STRSIZE 32u
#define TABOFF (STROFF + STRSIZE + 1)
#define TABSIZE (2 * sizeof(Elf64_Sym)) /* >= 2 * sizeof(Elf64_Dyn) */
#define SHOFF (TABOFF + TABSIZE + 1)
#define SHNUM 3u
#define SIZE (SHOFF + SHNUM * sizeof(Elf64_Shdr))

static void put(size_t off, const void *p, size_t n)
{
	memcpy(file + off, p, n);
}

/* The next odd offset from at, after n bytes put there. */
static size_t put_odd(size_t at, const void *p, size_t n)
{
	put(at, p, n);
	return (at + n) | 1;
}

/* The "debug" and "debug-phdr" files: one piece after another, each at
 * an odd offset.  Returns the size. */
static size_t debug_file(Elf64_Ehdr eh, int phdr_only)
{
	static const char names[] = "\0.shstrtab\0.note.gnu.build-id\0"
	                            ".gnu_debuglink\0.text\0.symtab\0.strtab";
	enum {
		SHSTRTAB = 1,
		NOTE = 11,
		LINK = 30,
		TEXT = 45,
		SYMTAB = 51,
		STRTAB = 59
	};
	static const char strs[] = "\0exported\0asm_size0";
	/* The note: n_namesz, n_descsz, n_type, "GNU", a 20-byte id. */
	unsigned char note[12 + 4 + 20];
	const Elf64_Nhdr nh = {4, 20, NT_GNU_BUILD_ID};
	memcpy(note, &nh, sizeof nh);
	memcpy(note + 12, "GNU", 4);
	for (int i = 0; i < 20; i++)
		note[16 + i] = (unsigned char)(0xc5 + 7 * i);
	/* The link: a name, padding to 4, the CRC. */
	unsigned char link[16] = "prog.debug";
	const uint32_t crc = 0x0c35e0b7;
	memcpy(link + 12, &crc, 4);
	const uint64_t text = 0x1000;
	Elf64_Sym sym[3] = {{0},
	                    {.st_name = 1,
	                     .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
	                     .st_shndx = 4,
	                     .st_value = text,
	                     .st_size = 16},
	                    {.st_name = 10,
	                     .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
	                     .st_shndx = 4,
	                     .st_value = text + 16}};

	size_t at = PHOFF + 3 * sizeof(Elf64_Phdr);
	size_t names_at = at;
	at = put_odd(at, names, sizeof names);
	size_t note_at = at;
	at = put_odd(at, note, sizeof note);
	size_t link_at = at;
	at = put_odd(at, link, sizeof link);
	size_t strs_at = at;
	at = put_odd(at, strs, sizeof strs);
	size_t sym_at = at;
	at = put_odd(at, sym, sizeof sym);

	Elf64_Phdr ph[3] = {{.p_type = PT_INTERP},
	                    {.p_type = PT_DYNAMIC},
	                    {.p_type = PT_NOTE,
	                     .p_offset = note_at,
	                     .p_filesz = sizeof note,
	                     .p_align = 4}};
	put(PHOFF, ph, sizeof ph);
	eh.e_phnum = 3;
	if (phdr_only) {
		eh.e_shoff = 0;
		eh.e_shnum = 0;
		put(0, &eh, sizeof eh);
		return at;
	}
	Elf64_Shdr sh[7] = {{0},
	                    {.sh_name = SHSTRTAB,
	                     .sh_type = SHT_STRTAB,
	                     .sh_offset = names_at,
	                     .sh_size = sizeof names},
	                    {.sh_name = NOTE,
	                     .sh_type = SHT_NOTE,
	                     .sh_offset = note_at,
	                     .sh_size = sizeof note,
	                     .sh_addralign = 4},
	                    {.sh_name = LINK,
	                     .sh_type = SHT_PROGBITS,
	                     .sh_offset = link_at,
	                     .sh_size = sizeof link},
	                    {.sh_name = TEXT,
	                     .sh_type = SHT_NOBITS,
	                     .sh_flags = SHF_ALLOC | SHF_EXECINSTR,
	                     .sh_addr = text,
	                     .sh_size = 64},
	                    {.sh_name = SYMTAB,
	                     .sh_type = SHT_SYMTAB,
	                     .sh_offset = sym_at,
	                     .sh_size = sizeof sym,
	                     .sh_link = 6,
	                     .sh_entsize = sizeof(Elf64_Sym)},
	                    {.sh_name = STRTAB,
	                     .sh_type = SHT_STRTAB,
	                     .sh_offset = strs_at,
	                     .sh_size = sizeof strs}};
	eh.e_shoff = at;
	eh.e_shnum = 7;
	eh.e_shstrndx = 1;
	put(at, sh, sizeof sh);
	put(0, &eh, sizeof eh);
	return at + sizeof sh;
}

static size_t simple_file(int san);

/* The "go" file: section names and a .go.buildinfo section holding the
 * magic Go's linker starts it with.  Returns the size. */
static size_t go_file(void)
{
	static const char names[] = "\0.shstrtab\0.go.buildinfo";
	static const char info[32] = "\xff Go buildinf:";
	Elf64_Phdr ph[2] = {{.p_type = PT_INTERP}, {.p_type = PT_DYNAMIC}};
	put(PHOFF, ph, sizeof ph);
	size_t at = PHOFF + sizeof ph;
	size_t names_at = at;
	at = put_odd(at, names, sizeof names);
	size_t info_at = at;
	at = put_odd(at, info, sizeof info);
	Elf64_Shdr sh[SHNUM] = {{0},
	                        {.sh_name = 1,
	                         .sh_type = SHT_STRTAB,
	                         .sh_offset = names_at,
	                         .sh_size = sizeof names},
	                        {.sh_name = 11,
	                         .sh_type = SHT_PROGBITS,
	                         .sh_flags = SHF_ALLOC | SHF_WRITE,
	                         .sh_offset = info_at,
	                         .sh_size = sizeof info,
	                         .sh_addralign = 16}};
	Elf64_Ehdr eh;
	memcpy(&eh, file, sizeof eh);
	eh.e_shoff = at;
	eh.e_shstrndx = 1;
	put(at, sh, sizeof sh);
	put(0, &eh, sizeof eh);
	return at + sizeof sh;
}

int main(int argc, char **argv)
{
	if (argc != 3 ||
	    (strcmp(argv[1], "malloc") && strcmp(argv[1], "sanitizer") &&
	     strcmp(argv[1], "debug") && strcmp(argv[1], "debug-phdr") &&
	     strcmp(argv[1], "go"))) {
		fprintf(stderr, "usage: make-elf "
		                "malloc|sanitizer|debug|debug-phdr|go FILE\n");
		return 2;
	}
	int san = !strcmp(argv[1], "sanitizer");
	/* This machine, as the command finds it (ml__run_host_machine). */
	Elf64_Ehdr self = {0};
	FILE *f = fopen("/proc/self/exe", "rb");
	if (!f || fread(&self, sizeof self, 1, f) != 1)
		return 1;
	fclose(f);

	Elf64_Ehdr eh = {.e_type = ET_DYN,
	                 .e_machine = self.e_machine,
	                 .e_version = EV_CURRENT,
	                 .e_phoff = PHOFF,
	                 .e_shoff = SHOFF,
	                 .e_ehsize = sizeof eh,
	                 .e_phentsize = sizeof(Elf64_Phdr),
	                 .e_phnum = 2,
	                 .e_shentsize = sizeof(Elf64_Shdr),
	                 .e_shnum = SHNUM};
	memcpy(eh.e_ident, self.e_ident, EI_NIDENT);
	put(0, &eh, sizeof eh);
	size_t size = !strncmp(argv[1], "debug", 5)
	                  ? debug_file(eh, !strcmp(argv[1], "debug-phdr"))
	              : !strcmp(argv[1], "go") ? go_file()
	                                       : simple_file(san);
	f = fopen(argv[2], "wb");
	if (!f || fwrite(file, size, 1, f) != 1 || fclose(f) != 0) {
		perror(argv[2]);
		return 1;
	}
	return 0;
}

/* The "malloc" and "sanitizer" files, after the header.  Returns the
 * size. */
static size_t simple_file(int san)
{
	Elf64_Phdr ph[2] = {{.p_type = PT_INTERP}, {.p_type = PT_DYNAMIC}};
	put(PHOFF, ph, sizeof ph);

	static const char str[STRSIZE] = "\0malloc\0libasan.so.8";
	put(STROFF, str, sizeof str);

	Elf64_Shdr sh[SHNUM] = {
	    {0},
	    {.sh_type = SHT_STRTAB, .sh_offset = STROFF, .sh_size = STRSIZE},
	    {.sh_type = san ? SHT_DYNAMIC : SHT_SYMTAB,
	     .sh_offset = TABOFF,
	     .sh_size = san ? 2 * sizeof(Elf64_Dyn) : TABSIZE,
	     .sh_link = 1}};
	put(SHOFF, sh, sizeof sh);
	if (san) {
		Elf64_Dyn d[2] = {{.d_tag = DT_NEEDED, .d_un.d_val = 8},
		                  {.d_tag = DT_NULL}};
		put(TABOFF, d, sizeof d);
	} else {
		Elf64_Sym sym[2] = {
		    {0},
		    {.st_name = 1,
		     .st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
		     .st_shndx = 1}};
		put(TABOFF, sym, sizeof sym);
	}
	return SIZE;
}
