/* A program built without PIE that takes malloc's address, as python3.11
 * does for its allocator tables: the executable then holds a canonical PLT
 * entry for malloc, and dlsym(RTLD_DEFAULT, "malloc") returns that address
 * in the program although the program defines no malloc.  memlimits must
 * not take it for a malloc in front of its own (tests/cli/test-accounting.sh).
 */
#include <stdio.h>
#include <stdlib.h>

void *(*volatile alloc_fn)(size_t);
void (*volatile free_fn)(void *);

int main(void)
{
	/* Taken in code, not in an initializer: non-PIE code loads the
	 * address as an immediate, and the linker makes the program's PLT
	 * entry the canonical address of malloc (an initializer would get a
	 * dynamic relocation instead). */
	alloc_fn = malloc;
	free_fn = free;
	void *p = alloc_fn(100000);
	if (!p)
		return 1;
	free_fn(p);
	puts("ok");
	return 0;
}
