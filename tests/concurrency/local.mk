# Concurrency: threads, fork, the locks, pthread failures, the program that
# .ci/run also builds under ThreadSanitizer, and the stress run.
check_PROGRAMS += tests/concurrency/test-threads
TESTS += tests/concurrency/test-threads
tests_concurrency_test_threads_SOURCES = tests/concurrency/test-threads.c
tests_concurrency_test_threads_LDADD = $(ML_TEST_LIBS)
tests_concurrency_test_threads_LDFLAGS = $(ML_TEST_LINK)
tests_concurrency_test_threads_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# fork while threads allocate in run mode (every lock held around fork).
check_PROGRAMS += tests/concurrency/test-fork
TESTS += tests/concurrency/test-fork
tests_concurrency_test_fork_SOURCES = tests/concurrency/test-fork.c
tests_concurrency_test_fork_LDADD = $(ML_TEST_LIBS)
tests_concurrency_test_fork_LDFLAGS = $(ML_TEST_LINK)
tests_concurrency_test_fork_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
# Every lock in lib/ goes through the fork registry's macros.
TESTS += tests/concurrency/test-locks.sh
EXTRA_DIST += tests/concurrency/test-locks.sh
# pthread_key_create, pthread_atfork, pthread_setspecific failing.
check_PROGRAMS += tests/concurrency/test-pthread-fail
TESTS += tests/concurrency/test-pthread-fail
tests_concurrency_test_pthread_fail_SOURCES = tests/concurrency/test-pthread-fail.c
tests_concurrency_test_pthread_fail_LDADD = $(ML_TEST_LIBS)
tests_concurrency_test_pthread_fail_LDFLAGS = $(ML_TEST_LINK)
tests_concurrency_test_pthread_fail_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# Many threads of nested tasks; .ci/run also builds it under
# ThreadSanitizer.  See docs/reliability.md.
check_PROGRAMS += tests/concurrency/test-tsan
TESTS += tests/concurrency/test-tsan
tests_concurrency_test_tsan_SOURCES = tests/concurrency/test-tsan.c
tests_concurrency_test_tsan_LDADD = $(ML_TEST_LIBS)
tests_concurrency_test_tsan_LDFLAGS = $(ML_TEST_LINK)
tests_concurrency_test_tsan_CFLAGS = $(ML_TEST_CFLAGS)

# The timeline's descriptor closed under threads that write rows (issue
# 33); .ci/run also builds it under ThreadSanitizer.
check_PROGRAMS += tests/concurrency/test-timeline-threads
TESTS += tests/concurrency/test-timeline-threads
tests_concurrency_test_timeline_threads_SOURCES = \
	tests/concurrency/test-timeline-threads.c
tests_concurrency_test_timeline_threads_LDADD = $(ML_TEST_LIBS)
tests_concurrency_test_timeline_threads_LDFLAGS = $(ML_TEST_LINK)
tests_concurrency_test_timeline_threads_CFLAGS = $(ML_TEST_CFLAGS)

# Stress: 8 threads, nested tasks, tokens, all deliveries, global limit
# flips.  `make check` runs 3 s of it; `make stress` runs STRESS_SECONDS
# (default 60).
check_PROGRAMS += tests/concurrency/stress
tests_concurrency_stress_SOURCES = tests/concurrency/stress.c
tests_concurrency_stress_LDADD = $(ML_TEST_LIBS)
tests_concurrency_stress_LDFLAGS = $(ML_TEST_LINK)
tests_concurrency_stress_CFLAGS = $(ML_TEST_CFLAGS)
TESTS += tests/concurrency/test-stress.sh
EXTRA_DIST += tests/concurrency/test-stress.sh

stress: tests/concurrency/stress$(EXEEXT)
	STRESS_SECONDS=$${STRESS_SECONDS:-60} $(abs_builddir)/tests/concurrency/stress$(EXEEXT)
.PHONY: stress

# An allocation that re-enters the library's start-up on the same thread
# (from pthread_atfork): it must not wait for itself.
check_PROGRAMS += tests/concurrency/test-init-reentry
TESTS += tests/concurrency/test-init-reentry
tests_concurrency_test_init_reentry_SOURCES = tests/concurrency/test-init-reentry.c
tests_concurrency_test_init_reentry_LDADD = $(ML_TEST_LIBS)
tests_concurrency_test_init_reentry_LDFLAGS = $(ML_TEST_LINK)
tests_concurrency_test_init_reentry_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
