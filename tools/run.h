/* memlimits run, between its files (tools/cmd-run.c has the command's
 * flow):
 *   run-options.c  the command line, and the files its options name
 *   run-path.c     the PATH search for the program
 *   run-elf.c      the checks on the program file and its ELF contents
 *   run-script.c   #! scripts: their interpreter is checked in turn
 *   run-library.c  finding the library to preload, and the allocator
 *   run-env.c      the environment the program starts with, --verbose
 *   run-tree.c     --tree-heap-limit: the run's shared budget, and the
 *                  forked program that run waits for
 * Bad input anywhere ends in ml__tool_usage_error (one line, status 2). */
#ifndef ML_TOOLS_RUN_H
#define ML_TOOLS_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CMD "run"
#define LIBNAME "libmemlimits.so.0"

/* ---- run-options.c ---- */

extern const char ml__run_synopsis[];

/* The options as given; NULL where left out. */
struct ml__run_opts {
	const char *alloc, *heap, *held, *tree, *interval, *seed, *on_limit;
	const char *report, *profile, *stats, *timeline;
	const char *allocator;
	bool verbose, report_all;
	bool no_mapped; /* --no-mapped: MEMLIMITS_MAPPED=0 */
};

/* Parse and check argv; PROGRAM is argv[optind] afterwards. */
void ml__run_parse(int argc, char **argv, struct ml__run_opts *o);
/* A size option's value in plain bytes, for the environment (one of a few
 * static buffers: up to three live at once). */
char *ml__run_size_env(const char *v);
/* --report, --profile, --timeline FILE: made absolute and started empty (unless
 * it names a per-process file, with %p). */
char *ml__run_out_file(const char *opt, const char *v);
/* --stats DIR: a writable directory, made absolute. */
char *ml__run_stats_dir(const char *v);

/* ---- run-path.c ---- */

/* The file execvp would run for name (a copy). */
char *ml__run_find_program(const char *name);

/* ---- run-elf.c ---- */

/* Refuse a program the library cannot be preloaded into (shown: the name
 * the user gave, for the messages of nested #! scripts; depth: their
 * nesting).  Records the allocator the program links. */
void ml__run_check_program(const char *shown, const char *path, int depth);
/* The checks on an ELF file's contents m[0, len), for a library of this
 * machine (an e_machine; 0: any). */
void ml__run_check_elf(const char *path, const unsigned char *m, size_t len,
                       uint16_t machine);
/* This command's own machine (0 if unknown). */
uint16_t ml__run_host_machine(void);
/* The allocator library the last checked ELF program links (its DT_NEEDED
 * name, "libjemalloc.so.2"), NULL if none. */
const char *ml__run_linked_allocator(void);
/* That library's --allocator name ("jemalloc"). */
const char *ml__run_allocator_name(const char *soname);

/* ---- run-script.c ---- */

/* A #! script m[0, len): its interpreter is checked as the program. */
void ml__run_check_script(const char *shown, const char *path,
                          const unsigned char *m, size_t len, int depth);

/* ---- run-library.c ---- */

/* --allocator NAME's shared object ("" for glibc's), NULL if unknown. */
const char *ml__run_allocator_soname(const char *name);
/* Its path in the system library directories; NULL for glibc. */
char *ml__run_find_allocator(const char *name);
/* The path of libmemlimits to preload. */
char *ml__run_find_library(void);

/* ---- run-env.c ---- */

/* Warn where PROGRAM is env and starts its command without the library. */
void ml__run_warn_env_drops_library(const char *path, char **argv);
/* Set the run's MEMLIMITS_* variables, and nothing inherited of them. */
void ml__run_set_limits(const struct ml__run_opts *o, const char *report,
                        const char *profile, const char *stats,
                        const char *timeline);
/* Put the library (and the allocator, if any) first in LD_PRELOAD. */
void ml__run_set_preload(const char *lib, const char *alloc);
/* --verbose: the settings in force, each with where it comes from. */
void ml__run_print_settings(const struct ml__run_opts *o, const char *lib,
                            const char *path);

/* ---- run-tree.c ---- */

/* --tree-heap-limit's value in bytes (P% of the memory size now). */
uint64_t ml__run_tree_bytes(const char *v);
/* Make the run's budget (name and empty object) and set
 * MEMLIMITS_SHARED. */
void ml__run_tree_make(const char *v);
/* --verbose: the budget. */
void ml__run_tree_describe(const char *v);
/* Fork and exec the program, wait for it, remove the budget, and exit as
 * it did.  Never returns. */
__attribute__((noreturn)) void ml__run_tree_exec(const char *path, char **argv);

#endif
