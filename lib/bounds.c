/* Placeholder until the bounds module lands (issue 4). */
#include "internal.h"
#include <math.h>
ML_EXPORT double ml_bound_global(uint64_t n, uint64_t interval)
{
	return interval ? -expm1(-(double)n / (double)interval) : NAN;
}
ML_EXPORT double ml_bound_alloc(uint64_t n, uint64_t limit, uint64_t interval)
{
	(void)n;
	(void)limit;
	(void)interval;
	return NAN;
}
ML_EXPORT uint64_t ml_bound_safe_bytes(uint64_t limit, double t,
                                       uint64_t interval)
{
	(void)limit;
	(void)t;
	(void)interval;
	return 0;
}
ML_EXPORT uint64_t ml_bound_limit_for(uint64_t safe, double t,
                                      uint64_t interval)
{
	(void)safe;
	(void)t;
	(void)interval;
	return 0;
}
