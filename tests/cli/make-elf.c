/* make-elf KIND FILE: write a small crafted ELF file for the checks of
 * `memlimits run` (tools/run-elf.c, ml__run_check_elf), with every table
 * at an odd offset, so that reading one in place is a misaligned load:
 *   malloc     a symbol table that defines the function "malloc"
 *   sanitizer  a dynamic section that needs libasan.so.8
 * Both are dynamically linked (PT_INTERP and PT_DYNAMIC) for this
 * machine, so the checks reach the section tables.  Also the seeds of
 * fuzz/corpus/elf. */
#include <elf.h>
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

int main(int argc, char **argv)
{
	if (argc != 3 ||
	    (strcmp(argv[1], "malloc") && strcmp(argv[1], "sanitizer"))) {
		fprintf(stderr, "usage: make-elf malloc|sanitizer FILE\n");
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

	f = fopen(argv[2], "wb");
	if (!f || fwrite(file, SIZE, 1, f) != 1 || fclose(f) != 0) {
		perror(argv[2]);
		return 1;
	}
	return 0;
}
