/* Two helpers with no dependency, shared with the memlimits command
 * (tools/local.mk compiles this file in): an error number as text and
 * this program's path. */
#define _GNU_SOURCE
#include "util/util.h"

#include <string.h>
#include <unistd.h>

const char *ml__strerror(int err)
{
	/* Neither allocates nor looks at the locale. */
	const char *s = strerrordesc_np(err);
	return s ? s : "unknown error";
}

void ml__self_exe(char *buf, size_t cap)
{
	ssize_t n = readlink("/proc/self/exe", buf, cap - 1);
	if (n > 0)
		buf[n] = 0;
	else
		memcpy(buf, "?", 2);
}
