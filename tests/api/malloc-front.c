/* A malloc family defined in front of libmemlimits (LD_PRELOAD before it):
 * the library is then not the process's allocator.  Forwards to glibc. */
#include <stddef.h>
#include <stdlib.h> /* the prototypes these definitions replace */

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

void *malloc(size_t n)
{
	return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
	return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
	return __libc_realloc(p, n);
}

void free(void *p)
{
	__libc_free(p);
}
