/* A stand-in for the 0.1 library at link time (tests/api/test-abi-0.1.sh):
 * the same soname, libmemlimits.so.0, and the 0.1 names without symbol
 * versions, as the 0.1 library exported them.  A program linked against
 * it holds unversioned references, exactly as a program built with 0.1;
 * it runs against the real library.  The bodies never run: the names are
 * all the linker needs, so no header is included and no signature is
 * given. */
#include <stdlib.h>

#define STUB(name)                                              \
	__attribute__((visibility("default"))) void name(void); \
	__attribute__((visibility("default"))) void name(void)  \
	{                                                       \
		abort();                                        \
	}

STUB(ml_run)
STUB(ml_limit_allocations)
STUB(ml_limit_global_memory)
STUB(ml_limit_with_token)
STUB(ml_set_default_delivery)
STUB(ml_default_delivery)
STUB(ml_set_global_memory_limit)
STUB(ml_global_memory_limit)
STUB(ml_global_memory_usage)
STUB(ml_is_interrupted)
STUB(ml_check)
STUB(ml_mask)
STUB(ml_unmask)
STUB(ml_is_masked)
STUB(ml_cleanup_push)
STUB(ml_cleanup_pop)
STUB(ml_token_new)
STUB(ml_token_set)
STUB(ml_token_is_set)
STUB(ml_token_free)
STUB(ml_set_sample_interval)
STUB(ml_sample_interval)
STUB(ml_set_seed)
STUB(ml_note_alloc)
STUB(ml_note_free)
STUB(ml_bound_global)
STUB(ml_bound_alloc)
STUB(ml_bound_safe_bytes)
STUB(ml_bound_limit_for)
STUB(ml_version)
STUB(ml_status_str)
