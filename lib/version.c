#include "internal.h"

ML_EXPORT const char *ml_version(void)
{
	return ML_VERSION_STRING;
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
	case ML_EINVAL:
		return "invalid argument";
	case ML_ENOMEM:
		return "out of memory for the library itself";
	}
	return "unknown status";
}
