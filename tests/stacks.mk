# Stacks (issue 11): captured without opening descriptors, a refusal whose
# cost does not grow with the stack, C++ names demangled in reports.
check_PROGRAMS += tests/test-stacks-retry
# Without a C++ compiler the C++ cases skip (test-stacks-cxx is missing).
if HAVE_CXX
check_PROGRAMS += tests/test-stacks-cxx
endif
TESTS += tests/test-stacks.sh
EXTRA_DIST += tests/test-stacks.sh

tests_test_stacks_retry_SOURCES = tests/test-stacks-retry.c
tests_test_stacks_retry_CFLAGS = $(AM_CFLAGS) -fno-builtin -fno-optimize-sibling-calls
tests_test_stacks_retry_LDADD = lib/libmemlimits.la
tests_test_stacks_retry_LDFLAGS = -no-install
tests_test_stacks_cxx_SOURCES = tests/test-stacks-cxx.cc
tests_test_stacks_cxx_CXXFLAGS = $(ML_CXXFLAGS) -fno-builtin
tests_test_stacks_cxx_LDFLAGS = -no-install

# The library again, built with -DML_UNWIND_VERIFY: every capture walks
# both ways (the cached rules and _Unwind_Backtrace) and aborts when they
# differ.  test-stacks.sh preloads it into real programs.  -rpath makes it
# a shared object (a check library is otherwise a static convenience one).
check_LTLIBRARIES += tests/libmemlimits-verify.la
tests_libmemlimits_verify_la_SOURCES = $(lib_libmemlimits_la_SOURCES)
tests_libmemlimits_verify_la_CPPFLAGS = $(lib_libmemlimits_la_CPPFLAGS) -DML_UNWIND_VERIFY
tests_libmemlimits_verify_la_CFLAGS = $(lib_libmemlimits_la_CFLAGS)
tests_libmemlimits_verify_la_LDFLAGS = $(lib_libmemlimits_la_LDFLAGS) -rpath /nowhere
tests_libmemlimits_verify_la_LIBADD = $(lib_libmemlimits_la_LIBADD)
EXTRA_tests_libmemlimits_verify_la_DEPENDENCIES = lib/exported-symbols.txt
