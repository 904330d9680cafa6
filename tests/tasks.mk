# Task, delivery and jump-safety tests.

# Jump safety: JUMP tasks interrupted inside libc, the loader and their
# callbacks; each case in a child process with a timeout.
check_LTLIBRARIES += tests/libjumpdso.la
tests_libjumpdso_la_SOURCES = tests/jump-dso.c
tests_libjumpdso_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere

check_PROGRAMS += tests/test-jump-safety
TESTS += tests/test-jump-safety
tests_test_jump_safety_SOURCES = tests/test-jump-safety.c
tests_test_jump_safety_CPPFLAGS = $(AM_CPPFLAGS) \
	-DJUMP_DSO='"$(abs_top_builddir)/tests/.libs/libjumpdso.so"'
tests_test_jump_safety_LDADD = $(ML_TEST_LIBS)
tests_test_jump_safety_LDFLAGS = $(ML_TEST_LINK)
tests_test_jump_safety_CFLAGS = $(ML_TEST_CFLAGS)

# C++: std::bad_alloc from operator new under FAIL, and under JUMP once the
# pending cap is reached; ml_check as the safe point; exceptions out of a
# task's body.  Skipped (tests/test-cxx-skip.sh) without a C++ compiler.
if HAVE_CXX
check_PROGRAMS += tests/test-cxx
TESTS += tests/test-cxx
else
TESTS += tests/test-cxx-skip.sh
endif
EXTRA_DIST += tests/test-cxx-skip.sh
tests_test_cxx_SOURCES = tests/test-cxx.cc
tests_test_cxx_CXXFLAGS = -std=c++17 $(ML_CXXFLAGS) -fno-builtin
tests_test_cxx_LDADD = $(ML_TEST_LIBS)
tests_test_cxx_LDFLAGS = $(ML_TEST_LINK)

# The examples (examples/local.mk builds them), run and checked.
TESTS += tests/test-examples.sh
EXTRA_DIST += tests/test-examples.sh

# Stress: 8 threads, nested tasks, tokens, all deliveries, global limit
# flips.  `make check` runs 3 s of it; `make stress` runs STRESS_SECONDS
# (default 60).
check_PROGRAMS += tests/stress
tests_stress_SOURCES = tests/stress.c
tests_stress_LDADD = $(ML_TEST_LIBS)
tests_stress_LDFLAGS = $(ML_TEST_LINK)
tests_stress_CFLAGS = $(ML_TEST_CFLAGS)
TESTS += tests/test-stress.sh
EXTRA_DIST += tests/test-stress.sh

stress: tests/stress$(EXEEXT)
	STRESS_SECONDS=$${STRESS_SECONDS:-60} $(abs_builddir)/tests/stress$(EXEEXT)
.PHONY: stress
