# Statistical tests: the real library against the bounds (fixed seeds).
check_PROGRAMS += tests/stats/test-conformance
TESTS += tests/stats/test-conformance
tests_stats_test_conformance_SOURCES = tests/stats/test-conformance.c
tests_stats_test_conformance_LDADD = $(ML_TEST_LIBS)
tests_stats_test_conformance_LDFLAGS = $(ML_TEST_LINK)
tests_stats_test_conformance_CFLAGS = $(ML_TEST_CFLAGS)
