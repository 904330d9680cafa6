# What is charged and what the report says: requests glibc refuses,
# allocators the meter cannot read, the report's figures.
check_PROGRAMS += tests/test-refused tests/test-run-alloc
TESTS += tests/test-refused tests/test-accounting.sh
EXTRA_DIST += tests/test-accounting.sh

tests_test_refused_SOURCES = tests/test-refused.c
tests_test_refused_LDADD = $(ML_TEST_LIBS)
tests_test_refused_LDFLAGS = $(ML_TEST_LINK)
tests_test_refused_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# -rdynamic: the report test looks for functions by name (dladdr).
tests_test_run_alloc_SOURCES = tests/test-run-alloc.c
tests_test_run_alloc_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_test_run_alloc_LDFLAGS = -no-install -rdynamic
