/* Start-up, and the public settings that act on the calling thread at
 * once. */
#include "api/api.h"

/* Apply a new seed or interval to the calling thread at once (so a
 * single-threaded program is reproducible from this call on); other
 * threads pick it up at their next slow path. */
static void apply_here(void)
{
	struct ml__thread *t = &ml__self;
	if (t->busy)
		return;
	t->busy = 1;
	ml__force_slow(t);
	if (t->state == ML__T_NEW)
		ml__thread_init(t);
	ml__thread_refresh(t);
	t->busy = 0;
	ml__unforce(t);
}

ML_EXPORT int ml_set_sample_interval(uint64_t bytes)
{
	if (bytes == 0)
		return ML_EINVAL;
	ml__set_interval(bytes);
	apply_here();
	return 0;
}

ML_EXPORT void ml_set_seed(uint64_t seed)
{
	ml__set_seed(seed);
	apply_here();
}

/* The first allocation may come before this (from ld.so or another
 * constructor); it then runs with the defaults, and the settings below take
 * effect before main.  Run mode, a consumer above, starts in its own
 * constructor after this one (run/runmode.c). */
__attribute__((constructor(101))) static void ml_constructor(void)
{
	ml__diag_init();
	ml__global_init();
	ml__unwind_load();
	if (ml__allocator_unusable())
		ml__diag("%s defines malloc but not what forwarding to it "
		         "needs (free, calloc, realloc, an aligned allocation, "
		         "malloc_usable_size): allocations go to glibc's",
		         ml__allocator_object(NULL, NULL));
	uint32_t epochs =
	    atomic_load(&ml__seed_epoch) + atomic_load(&ml__interval_epoch);
	ml__settings_read_env();
	ml__shared_from_env(); /* issue 27: MEMLIMITS_SHARED */
	if (epochs !=
	    atomic_load(&ml__seed_epoch) + atomic_load(&ml__interval_epoch))
		apply_here();
}
