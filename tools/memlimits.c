/* memlimits: the command.  Dispatches to subcommands (tools/cmd-*.c).
 *
 * The command does not link libmemlimits: it would then interpose its own
 * malloc and read MEMLIMITS_* from its environment, so that a command run
 * inside `memlimits run` would limit itself.  What it needs of the library
 * (the bounds, the parsers) is compiled in. */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util/parse.h"
#include "memlimits.h"
#include "tool.h"

extern const struct ml__tool_cmd ml__tool_cmd_bounds, ml__tool_cmd_run,
    ml__tool_cmd_stats, ml__tool_cmd_plot, ml__tool_cmd_flamegraph,
    ml__tool_cmd_accuracy;

static const struct ml__tool_cmd *const commands[] = {
    &ml__tool_cmd_run,  &ml__tool_cmd_bounds,     &ml__tool_cmd_stats,
    &ml__tool_cmd_plot, &ml__tool_cmd_flamegraph, &ml__tool_cmd_accuracy,
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

_Noreturn void ml__tool_usage_error(const char *cmd, const char *fmt, ...)
{
	char msg[512], shown[512];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	/* One line, whatever the message holds: control characters (of a
	 * value the user gave) escaped, a message too long cut with "...". */
	size_t len = 0;
	bool cut = n < 0 || (size_t)n >= sizeof msg;
	for (const char *p = msg; *p;) {
		char e[8];
		unsigned used, k = ml__show_char(p, e, &used);
		if (len + k > sizeof shown - 4) {
			cut = true;
			break;
		}
		memcpy(shown + len, e, k);
		len += k;
		p += used;
	}
	if (cut) {
		memcpy(shown + len, "...", 3);
		len += 3;
	}
	shown[len] = 0;
	fprintf(stderr, "memlimits%s%s: %s\n", cmd ? " " : "", cmd ? cmd : "",
	        shown);
	exit(ML__TOOL_USAGE);
}

static void usage(FILE *to)
{
	fprintf(to, "Usage: memlimits COMMAND [OPTION]...\n"
	            "       memlimits --help | --version\n\nCommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(to, "  %-10s %s\n", commands[i]->name,
		        commands[i]->summary);
	fprintf(to, "\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(to, "memlimits %s %s\n", commands[i]->name,
		        commands[i]->synopsis);
	fprintf(to, "\nSIZE: bytes, or with a binary suffix k/K/KB/KiB, "
	            "M/MB/MiB, G/GB/GiB (64MiB, 1.5G).\n"
	            "'memlimits COMMAND --help' describes a command; "
	            "docs/statistics.md the bounds.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2)
		ml__tool_usage_error(NULL, "missing command (try --help)");
	const char *name = argv[1];
	if (!strcmp(name, "--help") || !strcmp(name, "-h") ||
	    !strcmp(name, "help")) {
		usage(stdout);
		return ML__TOOL_OK;
	}
	if (!strcmp(name, "--version") || !strcmp(name, "-V")) {
		printf("memlimits %s\n", PACKAGE_VERSION);
		return ML__TOOL_OK;
	}
	for (size_t i = 0; i < NCOMMANDS; i++)
		if (!strcmp(name, commands[i]->name))
			return commands[i]->main(argc - 1, argv + 1);
	if (name[0] == '-')
		ml__tool_usage_error(NULL, "unknown option '%s' (try --help)",
		                     name);
	ml__tool_usage_error(NULL, "unknown command '%s' (try --help)", name);
}
