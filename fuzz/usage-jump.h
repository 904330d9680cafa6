/* For a fuzz target whose code under test reports bad input through
 * ml__tool_usage_error (tools/tool.h): the stub checks that the message
 * formats to something and jumps back to `back`, which the target sets
 * with setjmp before each input, instead of exiting.  Included after the
 * tool's source. */
#ifndef FUZZ_USAGE_JUMP_H
#define FUZZ_USAGE_JUMP_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static jmp_buf back;

_Noreturn void ml__tool_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n <= 0 || !cmd)
		abort();
	longjmp(back, 1);
}

#endif
