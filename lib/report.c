/* Run-mode report and profile: placeholder hooks, filled in by issue 5. */
#include "internal.h"

void ml__profile_sample(struct ml__thread *t, uint64_t s, uint64_t n)
{
	(void)t, (void)s, (void)n;
}

void ml__profile_trip(ml_status why, uint64_t n)
{
	(void)why, (void)n;
}

void ml__report_write(void)
{
	ml_status why = (ml_status)atomic_load(&ml__run.fired);
	if (why != ML_OK)
		ml__diag("%s", ml_status_str(why));
}
