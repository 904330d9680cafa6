#include "api/api.h"

/* configure's version (config.h), not the header's: the library says what
 * it was built as, whichever header a program was compiled with. */
ML_EXPORT const char *ml_version(void)
{
	return PACKAGE_VERSION;
}

ML_EXPORT unsigned ml_capabilities(void)
{
	static _Atomic int cached = -1;
	int c = atomic_load_explicit(&cached, memory_order_relaxed);
	if (c >= 0)
		return (unsigned)c;
	c = 0;
	/* ml__malloc_in_front answers once, and knows a non-PIE program's
	 * canonical PLT entry from a malloc defined in front of ours. */
	if (!ml__malloc_in_front())
		c |= ML_CAP_INTERPOSED;
	struct ml__object o;
	if (ml__find_object((uintptr_t)ml_capabilities, &o) == 0 &&
	    o.start <= (uintptr_t)ml_capabilities &&
	    (uintptr_t)ml_capabilities < o.end)
		c |= ML_CAP_JUMP_SAFE;
	void *ip[4];
	if (ml__backtrace(ip, 4) > 0)
		c |= ML_CAP_STACKS;
	/* Held memory is recorded at the allocations that reach us and
	 * recognised at their free: only when ours is the malloc called. */
	if (c & ML_CAP_INTERPOSED)
		c |= ML_CAP_HELD;
	/* The mmap family is interposed with the malloc family; settings
	 * are read by the constructor, before any caller can ask. */
	if ((c & ML_CAP_INTERPOSED) && ML__MAPPED_ON)
		c |= ML_CAP_MAPPED;
	atomic_store_explicit(&cached, c, memory_order_relaxed);
	return (unsigned)c;
}

ML_EXPORT const char *ml_allocator(void)
{
	return ml__allocator_kind();
}

ML_EXPORT const char *ml_status_str(ml_status s)
{
	switch (s) {
	case ML_OK:
		return "ok";
	case ML_ALLOC_LIMIT:
		return "allocation limit reached";
	case ML_GLOBAL_LIMIT:
		return "global memory limit exceeded";
	case ML_CANCELLED:
		return "cancelled";
	case ML_HELD_LIMIT:
		return "held memory limit reached";
	case ML_EINVAL:
		return "invalid argument";
	case ML_ENOMEM:
		return "out of memory for the library itself";
	}
	return "unknown status";
}
