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

# -no-pie: a canonical PLT entry for malloc in the program.
check_PROGRAMS += tests/test-run-nopie
tests_test_run_nopie_SOURCES = tests/test-run-nopie.c
tests_test_run_nopie_CFLAGS = $(AM_CFLAGS) -fno-builtin -fno-pie
tests_test_run_nopie_LDFLAGS = -no-install -no-pie
