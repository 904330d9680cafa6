/* memlimits run: which file the program is.  Owns the PATH search, done
 * here as execvp does it so that the file can be checked (run-elf.c)
 * before anything runs. */
#include "config.h"

#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "run.h"
#include "tool.h"

/* Names with a slash are taken as they are; PATH unset means confstr's
 * default, as for execvp. */
char *ml__run_find_program(const char *name)
{
	if (strchr(name, '/'))
		return strdup(name);
	const char *path = getenv("PATH");
	char def[256];
	if (!path) {
		size_t n = confstr(_CS_PATH, def, sizeof def);
		path = n && n <= sizeof def ? def : "/bin:/usr/bin";
	}
	bool denied = false;
	for (const char *p = path;; p++) {
		const char *end = strchrnul(p, ':');
		int dl = (int)(end - p);
		char *cand;
		if (asprintf(&cand, "%.*s%s%s", dl, p, dl ? "/" : "", name) < 0)
			ml__tool_usage_error(CMD, "out of memory");
		struct stat st;
		if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
			if (access(cand, X_OK) == 0)
				return cand;
			denied = true;
		}
		free(cand);
		if (!*end)
			break;
		p = end;
	}
	ml__tool_usage_error(CMD,
	                     denied ? "'%s': permission denied"
	                            : "'%s': program not found in PATH",
	                     name);
}
