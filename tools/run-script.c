/* memlimits run: #! scripts.  Owns reading the interpreter from a
 * script's first line (as the kernel does: up to the first blank, the
 * rest of the line is its argument) and checking it in turn as the
 * program, to the kernel's depth of nesting. */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "run.h"
#include "tool.h"

#define MAX_SCRIPT_DEPTH 4 /* the kernel's own limit on #! nesting */

void ml__run_check_script(const char *shown, const char *path,
                          const unsigned char *m, size_t len, int depth)
{
	if (depth >= MAX_SCRIPT_DEPTH)
		ml__tool_usage_error(CMD,
		                     "'%s': too many levels of #! "
		                     "interpreters",
		                     shown);
	char line[256];
	size_t n = 0;
	for (size_t i = 2; i < len && m[i] != '\n' && n + 1 < sizeof line; i++)
		line[n++] = (char)m[i];
	line[n] = 0;
	char *interp = line + strspn(line, " \t");
	interp[strcspn(interp, " \t")] = 0;
	if (!*interp)
		ml__tool_usage_error(CMD, "'%s': no interpreter after #!",
		                     path);
	ml__run_check_program(shown, interp, depth + 1);
}
