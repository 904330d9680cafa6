/* libFuzzer target: the command line of `memlimits run` and `memlimits
 * bounds` (their option parsers, tools/run-options.c and
 * tools/cmd-bounds.c).  The input is split at NUL bytes into arguments;
 * its first byte chooses the subcommand.  A parser either accepts or
 * calls ml__tool_usage_error, which here checks the message (one line,
 * non-empty) and jumps back instead of exiting; --help's exit jumps back
 * too.  Nothing is executed: only the parsers run (the program checks
 * and exec are not called). */
#include <getopt.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz-cli.h"
#include "tool.h"

static jmp_buf back;
static int usage_errors;

_Noreturn void fuzz_exit(int status)
{
	if (status != 0)
		abort(); /* only --help exits by itself, with 0 */
	longjmp(back, 1);
}

_Noreturn void ml__tool_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (n <= 0 || !cmd)
		abort();
	usage_errors++;
	longjmp(back, 2);
}

#define MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	int which = data[0] & 1;
	data++, size--;
	/* One buffer of exactly the input (plus a NUL), cut at NULs. */
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = 0;
	char *argv[MAX_ARGS + 2];
	int argc = 0;
	argv[argc++] = which ? "bounds" : "run";
	for (size_t p = 0; p <= size && argc <= MAX_ARGS;) {
		argv[argc++] = buf + p;
		p += strlen(buf + p) + 1;
	}
	argv[argc] = NULL;
	/* A fresh getopt: glibc keeps a pointer into the last argv. */
	optind = 0;
	char *dummy[] = {"x", NULL};
	opterr = 0;
	getopt(1, dummy, "");
	if (setjmp(back) == 0) {
		if (which)
			fuzz_bounds_parse(argc, argv);
		else
			fuzz_run_parse(argc, argv);
	}
	free(buf);
	return 0;
}
