# Malloc-family, symbol, preload, fork and thread tests.
check_PROGRAMS += tests/test-family tests/test-threads
TESTS += tests/test-family tests/test-threads tests/test-symbols.sh \
	tests/test-preload.sh
EXTRA_DIST += tests/test-symbols.sh tests/test-preload.sh

# -fno-builtin: gcc must not fold or delete the calls under test.
tests_test_family_SOURCES = tests/test-family.c
tests_test_family_LDADD = $(ML_TEST_LIBS)
tests_test_family_LDFLAGS = $(ML_TEST_LINK)
tests_test_family_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
tests_test_threads_SOURCES = tests/test-threads.c
tests_test_threads_LDADD = $(ML_TEST_LIBS)
tests_test_threads_LDFLAGS = $(ML_TEST_LINK)
tests_test_threads_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
