/* Prints ml_allocator() and what the meter reads while 64 blocks of 1 MiB
 * are held and after they are freed, under a global limit: for
 * tests/api/test-allocators.sh, which runs it over each allocator. */
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
	static char *blocks[64];
	ml_set_global_limit((uint64_t)1 << 40);
	uint64_t start = ml_global_memory_usage();
	for (int i = 0; i < 64; i++) {
		blocks[i] = malloc(1 << 20);
		if (!blocks[i])
			return 1;
		memset(blocks[i], 1, 4096);
	}
	uint64_t held = ml_global_memory_usage();
	for (int i = 0; i < 64; i++)
		free(blocks[i]);
	uint64_t after = ml_global_memory_usage();
	printf("%s %lld %lld\n", ml_allocator(), (long long)(held - start),
	       (long long)(after - start));
	return 0;
}
