# The memlimits command: run mode (issue 5) with real programs under limits,
# reports, profiles, statistics, its output files (issue 11), stacks in
# reports, the bounds command, and every kind of bad input to it.
check_PROGRAMS += tests/cli/test-run-hog tests/cli/test-run-rss
TESTS += tests/cli/test-run.sh tests/cli/test-run-verbose.sh
EXTRA_DIST += tests/cli/test-run.sh tests/cli/test-run-verbose.sh

# -rdynamic: the report test looks for hog_function by name (dladdr).
tests_cli_test_run_hog_SOURCES = tests/cli/test-run-hog.c
tests_cli_test_run_hog_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_cli_test_run_hog_LDFLAGS = -no-install -rdynamic
tests_cli_test_run_rss_SOURCES = tests/cli/test-run-rss.c
tests_cli_test_run_rss_LDFLAGS = -no-install

# What is charged and what the report says: allocators the meter cannot
# read, the report's figures.
check_PROGRAMS += tests/cli/test-run-alloc
TESTS += tests/cli/test-accounting.sh tests/cli/test-run-held.sh
EXTRA_DIST += tests/cli/test-accounting.sh tests/cli/test-run-held.sh
# -rdynamic: the report test looks for functions by name (dladdr).
tests_cli_test_run_alloc_SOURCES = tests/cli/test-run-alloc.c
tests_cli_test_run_alloc_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_cli_test_run_alloc_LDFLAGS = -no-install -rdynamic
# -no-pie: a canonical PLT entry for malloc in the program.
check_PROGRAMS += tests/cli/test-run-nopie
tests_cli_test_run_nopie_SOURCES = tests/cli/test-run-nopie.c
tests_cli_test_run_nopie_CFLAGS = $(AM_CFLAGS) -fno-builtin -fno-pie
tests_cli_test_run_nopie_LDFLAGS = -no-install -no-pie

# Symbols of stripped programs (issue 36): a program linked with
# -rdynamic, stripped at test time, with and without a debug file; frames
# of python3 with its debug file.
check_PROGRAMS += tests/cli/test-stripped
TESTS += tests/cli/test-stripped.sh
EXTRA_DIST += tests/cli/test-stripped.sh
tests_cli_test_stripped_SOURCES = tests/cli/test-stripped.c
tests_cli_test_stripped_CFLAGS = $(AM_CFLAGS) -fno-builtin \
	-fno-optimize-sibling-calls
tests_cli_test_stripped_LDFLAGS = -no-install -rdynamic

# Statistics written at exit() while threads still allocate are accepted
# by memlimits stats (issue 24).
check_PROGRAMS += tests/cli/test-stats-exit
TESTS += tests/cli/test-stats-exit.sh
EXTRA_DIST += tests/cli/test-stats-exit.sh
tests_cli_test_stats_exit_SOURCES = tests/cli/test-stats-exit.c
tests_cli_test_stats_exit_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_cli_test_stats_exit_LDFLAGS = -no-install

# Bad input to the command (issue 6); crafted ELF files for memlimits
# run's checks.
check_PROGRAMS += tests/cli/make-elf
TESTS += tests/cli/test-badinput-cli.sh
EXTRA_DIST += tests/cli/test-badinput-cli.sh
tests_cli_make_elf_SOURCES = tests/cli/make-elf.c
tests_cli_make_elf_LDFLAGS = -no-install

# --heap-limit P% and MEMLIMITS_HEAP_LIMIT=P% (issue 14): a percentage of
# the cgroup's memory.max or of physical memory, computed by the test too.
TESTS += tests/cli/test-heap-percent.sh
EXTRA_DIST += tests/cli/test-heap-percent.sh

# The memlimits bounds command (tools/memlimits, built with `all`).
TESTS += tests/cli/test-cli-bounds.sh
EXTRA_DIST += tests/cli/test-cli-bounds.sh

# Run mode's output files (issue 11): the environment of a privileged
# program is ignored, reports reach a closed stderr, settings survive a
# rewritten environment, FIFOs and unwritable files are refused with one
# line, and no descriptor of ours reaches the program's low range or a child.
check_PROGRAMS += tests/cli/test-output-prog tests/cli/test-output-fds
TESTS += tests/cli/test-output.sh
EXTRA_DIST += tests/cli/test-output.sh

tests_cli_test_output_prog_SOURCES = tests/cli/test-output-prog.c
tests_cli_test_output_prog_LDADD = lib/libmemlimits.la
tests_cli_test_output_prog_LDFLAGS = -no-install
tests_cli_test_output_prog_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
tests_cli_test_output_fds_SOURCES = tests/cli/test-output-fds.c
tests_cli_test_output_fds_LDFLAGS = -no-install

# Stacks (issue 11): captured without opening descriptors, a refusal whose
# cost does not grow with the stack, C++ names demangled in reports.
check_PROGRAMS += tests/cli/test-stacks-retry
# Without a C++ compiler the C++ cases skip (test-stacks-cxx is missing).
if HAVE_CXX
check_PROGRAMS += tests/cli/test-stacks-cxx
endif
TESTS += tests/cli/test-stacks.sh
EXTRA_DIST += tests/cli/test-stacks.sh

tests_cli_test_stacks_retry_SOURCES = tests/cli/test-stacks-retry.c
tests_cli_test_stacks_retry_CFLAGS = $(AM_CFLAGS) -fno-builtin -fno-optimize-sibling-calls
tests_cli_test_stacks_retry_LDADD = lib/libmemlimits.la
tests_cli_test_stacks_retry_LDFLAGS = -no-install
tests_cli_test_stacks_cxx_SOURCES = tests/cli/test-stacks-cxx.cc
tests_cli_test_stacks_cxx_CXXFLAGS = $(ML_CXXFLAGS) -fno-builtin
tests_cli_test_stacks_cxx_LDFLAGS = -no-install

# The library again, built with -DML_UNWIND_VERIFY: every capture walks
# both ways (the cached rules and _Unwind_Backtrace) and aborts when they
# differ.  test-stacks.sh preloads it into real programs.  -rpath makes it
# a shared object (a check library is otherwise a static convenience one).
check_LTLIBRARIES += tests/cli/libmemlimits-verify.la
tests_cli_libmemlimits_verify_la_SOURCES = $(lib_libmlcore_la_SOURCES) \
	$(lib_libmemlimits_la_SOURCES)
tests_cli_libmemlimits_verify_la_CPPFLAGS = $(lib_libmemlimits_la_CPPFLAGS) -DML_UNWIND_VERIFY
tests_cli_libmemlimits_verify_la_CFLAGS = $(lib_libmemlimits_la_CFLAGS)
tests_cli_libmemlimits_verify_la_LDFLAGS = $(lib_libmemlimits_la_LDFLAGS) -rpath /nowhere
tests_cli_libmemlimits_verify_la_LIBADD = $(LIBM)
EXTRA_tests_cli_libmemlimits_verify_la_DEPENDENCIES = lib/memlimits.map

# CPython's own test suite under memlimits run (41 modules, each plain, with
# --heap-limit 16GiB and with --alloc-limit 1TiB --report): 15-40 minutes on
# two cores, so outside make check.  CPYTHON_MODULES picks some.
EXTRA_DIST += tests/cli/cpython-suite.sh
check-cpython: tools/memlimits$(EXEEXT) lib/libmemlimits.la
	top_builddir='$(abs_top_builddir)' $(SHELL) $(srcdir)/tests/cli/cpython-suite.sh $(CPYTHON_MODULES) | \
		tee cpython-suite.log; ! grep -q '^not ok' cpython-suite.log
CLEANFILES += cpython-suite.log
.PHONY: check-cpython

# Pictures of a run (issue 29): --timeline, memlimits plot and memlimits
# flamegraph give valid, small SVG showing the limits, the trips and the
# frames; bad input is one line and status 2.
TESTS += tests/cli/test-pictures.sh
EXTRA_DIST += tests/cli/test-pictures.sh tests/cli/svg-check.py

# The pictures on hostile input (issue 33): numbers that overran the plot's
# subtitle or made its axis infinite, endless lines, a stack of 50 000
# frames, a write failing midway: status 2, one line, nothing written.
TESTS += tests/cli/test-pictures-hostile.sh
EXTRA_DIST += tests/cli/test-pictures-hostile.sh

# memlimits run --tree-heap-limit (issue 27): the program and its
# descendants under one shared budget, which no run leaves behind.
check_PROGRAMS += tests/cli/test-tree-alloc
TESTS += tests/cli/test-tree-limit.sh
EXTRA_DIST += tests/cli/test-tree-limit.sh
tests_cli_test_tree_alloc_SOURCES = tests/cli/test-tree-alloc.c
tests_cli_test_tree_alloc_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_cli_test_tree_alloc_LDFLAGS = -no-install

# memlimits run and signals (issue 33): SIGCHLD inherited as ignored, and
# every signal that ends a process leaves no object of a tree run.
check_PROGRAMS += tests/cli/test-sig-exec
TESTS += tests/cli/test-tree-signals.sh
EXTRA_DIST += tests/cli/test-tree-signals.sh
tests_cli_test_sig_exec_SOURCES = tests/cli/test-sig-exec.c
tests_cli_test_sig_exec_LDFLAGS = -no-install
# Memory the program maps itself under run mode (issue 34): the heap
# limit refuses mappings, --no-mapped, the report, timeline and statistics.
check_PROGRAMS += tests/cli/test-run-mapped
TESTS += tests/cli/test-run-mapped.sh
EXTRA_DIST += tests/cli/test-run-mapped.sh tests/cli/run-env.sh
tests_cli_test_run_mapped_SOURCES = tests/cli/test-run-mapped.c
tests_cli_test_run_mapped_LDFLAGS = -no-install

# Issue 41: private memory by other ways than the malloc family and mmap
# (glibc's __libc_* entry points, sbrk, SysV shmat) is counted in run mode.
check_PROGRAMS += tests/cli/test-run-private
TESTS += tests/cli/test-run-private.sh
EXTRA_DIST += tests/cli/test-run-private.sh
tests_cli_test_run_private_SOURCES = tests/cli/test-run-private.c
tests_cli_test_run_private_LDFLAGS = -no-install

# Issue 41 (7): a process that aborts, _exits, is killed or exits racing
# after its limit still leaves its report.
check_PROGRAMS += tests/cli/test-run-die
TESTS += tests/cli/test-run-die.sh
EXTRA_DIST += tests/cli/test-run-die.sh
tests_cli_test_run_die_SOURCES = tests/cli/test-run-die.c
tests_cli_test_run_die_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_cli_test_run_die_LDFLAGS = -no-install -rdynamic
tests_cli_test_run_die_LDADD = -lpthread

# A program that retries a refused allocation (issue 41): once a limit has
# refused a block, retries are refused too until the heap is back under
# it, as prlimit --data holds it; lua5.4's table growth.
check_PROGRAMS += tests/cli/test-run-retry
TESTS += tests/cli/test-run-retry.sh
EXTRA_DIST += tests/cli/test-run-retry.sh
tests_cli_test_run_retry_SOURCES = tests/cli/test-run-retry.c
tests_cli_test_run_retry_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_cli_test_run_retry_LDFLAGS = -no-install

# A signal handler that maps and mallocs on a thread inside the mmap
# family, under run mode (issue 41, item 2).
check_PROGRAMS += tests/cli/test-run-signal
TESTS += tests/cli/test-run-signal.sh
EXTRA_DIST += tests/cli/test-run-signal.sh
tests_cli_test_run_signal_SOURCES = tests/cli/test-run-signal.c
tests_cli_test_run_signal_LDFLAGS = -no-install
# A JUMP out of mmap leaves no mapping flag behind (issue 41, item 3).
check_PROGRAMS += tests/cli/test-run-jump-map
TESTS += tests/cli/test-run-jump-map.sh
EXTRA_DIST += tests/cli/test-run-jump-map.sh
tests_cli_test_run_jump_map_SOURCES = tests/cli/test-run-jump-map.c
tests_cli_test_run_jump_map_LDADD = lib/libmemlimits.la
tests_cli_test_run_jump_map_LDFLAGS = -no-install
# Private memory made through protection changes (issue 41, item 6).
check_PROGRAMS += tests/cli/test-run-protect
TESTS += tests/cli/test-run-protect.sh
EXTRA_DIST += tests/cli/test-run-protect.sh
tests_cli_test_run_protect_SOURCES = tests/cli/test-run-protect.c
tests_cli_test_run_protect_LDFLAGS = -no-install

# memlimits accuracy (issue 45): stop points against the bounds, from a
# file and from real runs of a program that allocates 4 KiB blocks.
check_PROGRAMS += tests/cli/test-accuracy-prog
TESTS += tests/cli/test-accuracy.sh
EXTRA_DIST += tests/cli/test-accuracy.sh
tests_cli_test_accuracy_prog_SOURCES = tests/cli/test-accuracy-prog.c
tests_cli_test_accuracy_prog_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_cli_test_accuracy_prog_LDFLAGS = -no-install
