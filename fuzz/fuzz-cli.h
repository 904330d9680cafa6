/* The option parsers of the memlimits command, reached from the fuzz
 * target (fuzz-cli.c) through the wrappers fuzz/cli-run.c and
 * fuzz/cli-bounds.c, which compile the subcommands' files in whole. */
#ifndef ML_FUZZ_CLI_H
#define ML_FUZZ_CLI_H

/* Replaces exit() in the subcommands' files (--help). */
_Noreturn void fuzz_exit(int status);
void fuzz_run_parse(int argc, char **argv);
void fuzz_bounds_parse(int argc, char **argv);

#endif
