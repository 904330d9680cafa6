# Malloc-family, symbol, preload, fork and thread tests.
check_PROGRAMS += tests/test-family tests/test-threads
TESTS += tests/test-family tests/test-threads tests/test-symbols.sh \
	tests/test-preload.sh tests/test-version.sh
EXTRA_DIST += tests/test-symbols.sh tests/test-preload.sh tests/test-version.sh

# -fno-builtin: gcc must not fold or delete the calls under test.
tests_test_family_SOURCES = tests/test-family.c
tests_test_family_LDADD = $(ML_TEST_LIBS)
tests_test_family_LDFLAGS = $(ML_TEST_LINK)
tests_test_family_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
tests_test_threads_SOURCES = tests/test-threads.c
tests_test_threads_LDADD = $(ML_TEST_LIBS)
tests_test_threads_LDFLAGS = $(ML_TEST_LINK)
tests_test_threads_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# fork while threads allocate in run mode (every lock held around fork).
check_PROGRAMS += tests/test-fork
TESTS += tests/test-fork
tests_test_fork_SOURCES = tests/test-fork.c
tests_test_fork_LDADD = $(ML_TEST_LIBS)
tests_test_fork_LDFLAGS = $(ML_TEST_LINK)
tests_test_fork_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
# Every lock in lib/ goes through the fork registry's macros.
TESTS += tests/test-locks.sh
EXTRA_DIST += tests/test-locks.sh
# pthread_key_create, pthread_atfork, pthread_setspecific failing.
check_PROGRAMS += tests/test-pthread-fail
TESTS += tests/test-pthread-fail
tests_test_pthread_fail_SOURCES = tests/test-pthread-fail.c
tests_test_pthread_fail_LDADD = $(ML_TEST_LIBS)
tests_test_pthread_fail_LDFLAGS = $(ML_TEST_LINK)
tests_test_pthread_fail_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
# Every file the README and docs/ name exists and is in the tarball.
TESTS += tests/test-dist-docs.sh
EXTRA_DIST += tests/test-dist-docs.sh

# ml_capabilities(): linked, and with a malloc defined in front.
check_LTLIBRARIES += tests/libmallocfront.la
tests_libmallocfront_la_SOURCES = tests/malloc-front.c
tests_libmallocfront_la_LDFLAGS = -module -avoid-version -shared -rpath /nowhere
check_PROGRAMS += tests/test-capabilities
TESTS += tests/test-capabilities
tests_test_capabilities_SOURCES = tests/test-capabilities.c
tests_test_capabilities_LDADD = $(ML_TEST_LIBS)
tests_test_capabilities_LDFLAGS = $(ML_TEST_LINK)
tests_test_capabilities_CFLAGS = $(ML_TEST_CFLAGS)
