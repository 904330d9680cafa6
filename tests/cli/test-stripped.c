/* test-stripped N: allocate N blocks of 1 MiB through three functions,
 * main -> zero_size_grow -> stripped_exported_grow -> hidden_grow ->
 * malloc, and keep them.  Linked with -rdynamic, so that the exported
 * ones stay in .dynsym when the program is stripped (tests/cli/
 * test-stripped.sh): stripped_exported_grow with its size;
 * zero_size_grow, written in assembly without .size, with size 0 (on
 * x86-64; elsewhere a C function, and "test-stripped size0" says no);
 * hidden_grow static, named only from a debug file.  zero_size_fence, a
 * sized function right after zero_size_grow, ends what zero_size_grow
 * may name wherever the linker puts the rest. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void *volatile sink;

void *zero_size_grow(size_t n);
void *stripped_exported_grow(size_t n);
void zero_size_fence(void);

static __attribute__((noinline)) void *hidden_grow(size_t n)
{
	void *p = malloc(n);
	if (p)
		memset(p, 1, n);
	sink = p;
	return p;
}

__attribute__((noinline)) void *stripped_exported_grow(size_t n)
{
	void *p = hidden_grow(n);
	sink = p;
	return p;
}

#if defined(__x86_64__) && defined(__ELF__)
#define SIZE0 "yes"
__asm__(".text\n"
        ".globl zero_size_grow\n"
        ".type zero_size_grow, @function\n"
        "zero_size_grow:\n"
        ".cfi_startproc\n"
        "subq $8, %rsp\n"
        ".cfi_def_cfa_offset 16\n"
        "call stripped_exported_grow\n"
        "addq $8, %rsp\n"
        ".cfi_def_cfa_offset 8\n"
        "ret\n"
        ".cfi_endproc\n"
        ".globl zero_size_fence\n"
        ".type zero_size_fence, @function\n"
        "zero_size_fence:\n"
        "ret\n"
        ".size zero_size_fence, .-zero_size_fence\n");
#else
#define SIZE0 "no"
__attribute__((noinline)) void *zero_size_grow(size_t n)
{
	void *p = stripped_exported_grow(n);
	sink = p;
	return p;
}
void zero_size_fence(void)
{
}
#endif

int main(int argc, char **argv)
{
	if (argc == 2 && !strcmp(argv[1], "size0")) {
		puts(SIZE0);
		return 0;
	}
	int n = argc == 2 ? atoi(argv[1]) : 0;
	if (n <= 0) {
		fprintf(stderr, "usage: test-stripped N | size0\n");
		return 2;
	}
	zero_size_fence();
	for (int i = 0; i < n; i++)
		if (!zero_size_grow((size_t)1 << 20))
			return 1;
	return 0;
}
