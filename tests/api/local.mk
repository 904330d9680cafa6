# The public API's behaviour: tasks and tokens, the malloc family, the
# bounds functions, capabilities, bad input to every public function, jump
# safety, C++, the exported symbols, the version, what the README and the
# examples promise.
check_PROGRAMS += tests/api/test-tasks tests/api/test-family
TESTS += tests/api/test-tasks tests/api/test-family tests/api/test-symbols.sh \
	tests/api/test-preload.sh tests/api/test-version.sh tests/api/test-readme.sh
EXTRA_DIST += tests/api/test-symbols.sh tests/api/test-preload.sh \
	tests/api/test-version.sh tests/api/test-readme.sh
tests_api_test_tasks_SOURCES = tests/api/test-tasks.c
tests_api_test_tasks_LDADD = $(ML_TEST_LIBS)
tests_api_test_tasks_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_tasks_CFLAGS = $(ML_TEST_CFLAGS)
# ml_task_enter / ml_task_leave (issue 37).
check_PROGRAMS += tests/api/test-task-enter
TESTS += tests/api/test-task-enter
tests_api_test_task_enter_SOURCES = tests/api/test-task-enter.c
tests_api_test_task_enter_LDADD = $(ML_TEST_LIBS)
tests_api_test_task_enter_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_task_enter_CFLAGS = $(ML_TEST_CFLAGS)
# -fno-builtin: gcc must not fold or delete the calls under test.
tests_api_test_family_SOURCES = tests/api/test-family.c
tests_api_test_family_LDADD = $(ML_TEST_LIBS)
tests_api_test_family_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_family_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# tests/api/test-version.sh: what a program built with the header sees.
check_PROGRAMS += tests/api/version-prog
tests_api_version_prog_SOURCES = tests/api/version-prog.c
tests_api_version_prog_LDADD = lib/libmemlimits.la
tests_api_version_prog_LDFLAGS = $(ML_TEST_LINK)
AM_TESTS_ENVIRONMENT += OBJDUMP='$(OBJDUMP)'; export OBJDUMP; \
	PKG_CONFIG='$(PKG_CONFIG)'; export PKG_CONFIG;

# Every file the README and docs/ name exists and is in the tarball.
TESTS += tests/api/test-dist-docs.sh
EXTRA_DIST += tests/api/test-dist-docs.sh
# Each function's man page says whether it is thread-safe and may allocate.
TESTS += tests/api/test-man-safety.sh
EXTRA_DIST += tests/api/test-man-safety.sh
# memlimits(3) presents the header's functions by the header's kinds, and
# each header section states its convention (issue 25).
TESTS += tests/api/test-header-kinds.sh
EXTRA_DIST += tests/api/test-header-kinds.sh
# An in-tree build leaves git status clean (.gitignore).
TESTS += tests/api/test-gitignore.sh
EXTRA_DIST += tests/api/test-gitignore.sh

# ml_capabilities(): linked, and with a malloc defined in front.
check_LTLIBRARIES += tests/api/libmallocfront.la
tests_api_libmallocfront_la_SOURCES = tests/api/malloc-front.c
tests_api_libmallocfront_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
check_PROGRAMS += tests/api/test-capabilities
TESTS += tests/api/test-capabilities
tests_api_test_capabilities_SOURCES = tests/api/test-capabilities.c
tests_api_test_capabilities_LDADD = $(ML_TEST_LIBS)
tests_api_test_capabilities_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_capabilities_CFLAGS = $(ML_TEST_CFLAGS)

# ml_patch_objects(): a program that loads the library RTLD_LOCAL, as
# Python does, has its own and its objects' malloc rewritten (not linked
# with the library: linked, the library is its malloc already).
check_PROGRAMS += tests/api/test-patch
TESTS += tests/api/test-patch
tests_api_test_patch_SOURCES = tests/api/test-patch.c
tests_api_test_patch_LDADD = tests/tap/libtap.la -ldl -lm
tests_api_test_patch_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_patch_CFLAGS = $(ML_TEST_CFLAGS)

# The bounds functions against reference values, read at run time from
# $top_srcdir/tests/data: bounds-reference.tsv is the project's shared
# reference (60 digits); bounds-mpmath.tsv adds k up to 10^7 and values
# near 1e-300.
check_PROGRAMS += tests/api/test-bounds
TESTS += tests/api/test-bounds
tests_api_test_bounds_SOURCES = tests/api/test-bounds.c
tests_api_test_bounds_LDADD = $(ML_TEST_LIBS)
tests_api_test_bounds_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_bounds_CFLAGS = $(ML_TEST_CFLAGS)
EXTRA_DIST += tests/data/bounds-reference.tsv tests/data/bounds-mpmath.tsv \
	tests/data/make-bounds-mpmath.py

# Bad input to every public function (issue 6).
check_PROGRAMS += tests/api/test-badinput
TESTS += tests/api/test-badinput
tests_api_test_badinput_SOURCES = tests/api/test-badinput.c
tests_api_test_badinput_LDADD = $(ML_TEST_LIBS)
tests_api_test_badinput_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_badinput_CFLAGS = $(ML_TEST_CFLAGS)

# What is charged: requests glibc refuses.
check_PROGRAMS += tests/api/test-refused
TESTS += tests/api/test-refused
tests_api_test_refused_SOURCES = tests/api/test-refused.c
tests_api_test_refused_LDADD = $(ML_TEST_LIBS)
tests_api_test_refused_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_refused_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# Jump safety: JUMP tasks interrupted inside libc, the loader and their
# callbacks; each case in a child process with a timeout.
check_LTLIBRARIES += tests/api/libjumpdso.la
tests_api_libjumpdso_la_SOURCES = tests/api/jump-dso.c
tests_api_libjumpdso_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

check_PROGRAMS += tests/api/test-jump-safety
TESTS += tests/api/test-jump-safety
tests_api_test_jump_safety_SOURCES = tests/api/test-jump-safety.c
tests_api_test_jump_safety_CPPFLAGS = $(AM_CPPFLAGS) \
	-DJUMP_DSO='"$(abs_top_builddir)/tests/api/.libs/libjumpdso.so"'
tests_api_test_jump_safety_LDADD = $(ML_TEST_LIBS)
tests_api_test_jump_safety_LDFLAGS = $(ML_TEST_LINK)
tests_api_test_jump_safety_CFLAGS = $(ML_TEST_CFLAGS)

# C++: std::bad_alloc from operator new under FAIL, and under JUMP once the
# pending cap is reached; ml_check as the safe point; exceptions out of a
# task's body.  Skipped (tests/api/test-cxx-skip.sh) without a C++ compiler.
if HAVE_CXX
check_PROGRAMS += tests/api/test-cxx
TESTS += tests/api/test-cxx
else
TESTS += tests/api/test-cxx-skip.sh
endif
EXTRA_DIST += tests/api/test-cxx-skip.sh
tests_api_test_cxx_SOURCES = tests/api/test-cxx.cc
tests_api_test_cxx_CXXFLAGS = -std=c++17 $(ML_CXXFLAGS) -fno-builtin
tests_api_test_cxx_LDADD = $(ML_TEST_LIBS)
tests_api_test_cxx_LDFLAGS = $(ML_TEST_LINK)

# The examples (examples/local.mk builds them), run and checked; the
# guarded server's demo, short version (examples/guarded-server).
TESTS += tests/api/test-examples.sh tests/api/test-guarded-server.sh
EXTRA_DIST += tests/api/test-examples.sh tests/api/test-guarded-server.sh

# The core without run mode (docs/internals.md, "Layers").
check_PROGRAMS += tests/api/test-core-alone
TESTS += tests/api/test-core-alone
tests_api_test_core_alone_SOURCES = tests/api/test-core-alone.c
tests_api_test_core_alone_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_core_alone_LDADD = tests/tap/libtap.la lib/libmlcore.la $(LIBM)
tests_api_test_core_alone_LDFLAGS = $(ML_TEST_LINK) \
	-Wl,--version-script=$(srcdir)/lib/memlimits.map

# Held memory and the global limit's choice (issue 14).
check_PROGRAMS += tests/api/test-held
TESTS += tests/api/test-held
tests_api_test_held_SOURCES = tests/api/test-held.c
tests_api_test_held_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_held_LDADD = $(ML_TEST_LIBS)
tests_api_test_held_LDFLAGS = $(ML_TEST_LINK)
# ml_task_describe: why, how much and where, in one line.
check_PROGRAMS += tests/api/test-describe
TESTS += tests/api/test-describe
tests_api_test_describe_SOURCES = tests/api/test-describe.c
tests_api_test_describe_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_describe_LDADD = $(ML_TEST_LIBS)
tests_api_test_describe_LDFLAGS = $(ML_TEST_LINK)
# ml_write_held_profile and ml_set_stack_capture.
check_PROGRAMS += tests/api/test-frame-source
TESTS += tests/api/test-frame-source
tests_api_test_frame_source_SOURCES = tests/api/test-frame-source.c
tests_api_test_frame_source_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_frame_source_LDADD = $(ML_TEST_LIBS)
tests_api_test_frame_source_LDFLAGS = $(ML_TEST_LINK)

check_PROGRAMS += tests/api/test-held-profile
TESTS += tests/api/test-held-profile
tests_api_test_held_profile_SOURCES = tests/api/test-held-profile.c
tests_api_test_held_profile_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_held_profile_LDADD = $(ML_TEST_LIBS)
tests_api_test_held_profile_LDFLAGS = $(ML_TEST_LINK)

# A 0.1 binary against this library (tests/api/test-abi-0.1.sh): built
# with the saved 0.1 header, linked against a stand-in with the 0.1 names
# and no versions (its soname is libmemlimits.so.0 too), run against the
# real library.
check_LTLIBRARIES += tests/api/abi01/libmemlimits.la
tests_api_abi01_libmemlimits_la_SOURCES = tests/api/abi-0.1-stub.c
tests_api_abi01_libmemlimits_la_LDFLAGS = -rpath /nowhere -version-info 0:0:0
check_PROGRAMS += tests/api/abi-0.1-prog
tests_api_abi_0_1_prog_SOURCES = tests/api/abi-0.1-prog.c
tests_api_abi_0_1_prog_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/tests/data
tests_api_abi_0_1_prog_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_abi_0_1_prog_LDADD = tests/tap/libtap.la \
	tests/api/abi01/libmemlimits.la
tests_api_abi_0_1_prog_LDFLAGS = $(ML_TEST_LINK)
TESTS += tests/api/test-abi-0.1.sh
EXTRA_DIST += tests/api/test-abi-0.1.sh tests/data/memlimits-0.1.h

# Task objects across callbacks and threads (issue 13).
check_PROGRAMS += tests/api/test-task-objects
TESTS += tests/api/test-task-objects
tests_api_test_task_objects_SOURCES = tests/api/test-task-objects.c
tests_api_test_task_objects_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_task_objects_LDADD = $(ML_TEST_LIBS)
tests_api_test_task_objects_LDFLAGS = $(ML_TEST_LINK)

# The pressure callback (issue 14).
check_PROGRAMS += tests/api/test-pressure
TESTS += tests/api/test-pressure
tests_api_test_pressure_SOURCES = tests/api/test-pressure.c
tests_api_test_pressure_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_pressure_LDADD = $(ML_TEST_LIBS)
tests_api_test_pressure_LDFLAGS = $(ML_TEST_LINK)

# The heap meter against the blocks held and the allocator's own figures,
# across threads (issue 26); test-allocators.sh runs it over each
# allocator.
check_PROGRAMS += tests/api/test-meter-threads
TESTS += tests/api/test-meter-threads
tests_api_test_meter_threads_SOURCES = tests/api/test-meter-threads.c
tests_api_test_meter_threads_CFLAGS = $(ML_TEST_CFLAGS) -pthread
tests_api_test_meter_threads_LDADD = $(ML_TEST_LIBS) -ldl
tests_api_test_meter_threads_LDFLAGS = $(ML_TEST_LINK) -pthread

# The library over jemalloc, tcmalloc and mimalloc (issue 15): the family,
# tasks, held memory and the global limit over each one installed.
check_PROGRAMS += tests/api/allocator-name
tests_api_allocator_name_SOURCES = tests/api/allocator-name.c
tests_api_allocator_name_LDADD = lib/libmemlimits.la
tests_api_allocator_name_LDFLAGS = -no-install
TESTS += tests/api/test-allocators.sh
EXTRA_DIST += tests/api/test-allocators.sh

# Exact allocation budgets (issue 16).
check_PROGRAMS += tests/api/test-exact
TESTS += tests/api/test-exact
tests_api_test_exact_SOURCES = tests/api/test-exact.c
tests_api_test_exact_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_exact_LDADD = $(ML_TEST_LIBS)
tests_api_test_exact_LDFLAGS = $(ML_TEST_LINK)

# The refusal guard (issue 28): allocations let through where a refusal
# would be fatal, and only refusals asked.
check_PROGRAMS += tests/api/test-refusal-guard
TESTS += tests/api/test-refusal-guard
tests_api_test_refusal_guard_SOURCES = tests/api/test-refusal-guard.c
tests_api_test_refusal_guard_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_refusal_guard_LDADD = $(ML_TEST_LIBS)
tests_api_test_refusal_guard_LDFLAGS = $(ML_TEST_LINK)

# Issue 29: ml_write_metrics; promtool accepts its text.
check_PROGRAMS += tests/api/test-metrics
TESTS += tests/api/test-metrics tests/api/test-metrics-promtool.sh
EXTRA_DIST += tests/api/test-metrics-promtool.sh
tests_api_test_metrics_SOURCES = tests/api/test-metrics.c
tests_api_test_metrics_CFLAGS = $(ML_TEST_CFLAGS) -pthread
tests_api_test_metrics_LDADD = $(ML_TEST_LIBS)
tests_api_test_metrics_LDFLAGS = $(ML_TEST_LINK) -pthread

# Memory the program maps itself (issue 34): partial unmaps, MAP_FIXED,
# reservations, mremap, fork, threads, refusals, held samples, a full
# table, MEMLIMITS_MAPPED=0.
check_PROGRAMS += tests/api/test-mapped
TESTS += tests/api/test-mapped
tests_api_test_mapped_SOURCES = tests/api/test-mapped.c
tests_api_test_mapped_CFLAGS = $(ML_TEST_CFLAGS)
tests_api_test_mapped_LDADD = $(ML_TEST_LIBS) -lpthread
tests_api_test_mapped_LDFLAGS = $(ML_TEST_LINK)

# Issue 41, item 2: a signal handler that maps and mallocs on a thread
# inside the mmap family; no lock across munmap's system call.
check_PROGRAMS += tests/api/test-mapped-signal
TESTS += tests/api/test-mapped-signal
EXTRA_DIST += tests/api/signal-maps.h
tests_api_test_mapped_signal_SOURCES = tests/api/test-mapped-signal.c
tests_api_test_mapped_signal_CFLAGS = $(ML_TEST_CFLAGS) -pthread
tests_api_test_mapped_signal_LDADD = $(ML_TEST_LIBS)
tests_api_test_mapped_signal_LDFLAGS = $(ML_TEST_LINK) -pthread
