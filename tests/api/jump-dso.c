/* A tiny library for tests/api/test-jump-safety: dlopen'ing it makes the loader
 * allocate (link map, scope lists) under its lock, its constructor
 * allocates from user code called by the loader, and jump_dso_touch()
 * touches a general-dynamic TLS block, which __tls_get_addr allocates on
 * first use in each thread. */
#include <stdlib.h>

int jump_dso_touch(void);

void *volatile jump_dso_sink;
static __thread char tls_block[8192];

__attribute__((constructor)) static void jump_dso_init(void)
{
	jump_dso_sink = malloc(200);
	free(jump_dso_sink);
}

int jump_dso_touch(void)
{
	tls_block[sizeof tls_block - 1]++;
	return tls_block[sizeof tls_block - 1];
}
