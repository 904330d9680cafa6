# Bounds and conformance tests.
check_PROGRAMS += tests/test-bounds
TESTS += tests/test-bounds
tests_test_bounds_SOURCES = tests/test-bounds.c
tests_test_bounds_LDADD = $(ML_TEST_LIBS)
tests_test_bounds_LDFLAGS = $(ML_TEST_LINK)
tests_test_bounds_CFLAGS = $(ML_TEST_CFLAGS)

# Reference values, read at run time from $top_srcdir/tests/data:
# bounds-reference.tsv is the project's shared reference (60 digits);
# bounds-mpmath.tsv adds k up to 10^7 and values near 1e-300.
EXTRA_DIST += tests/data/bounds-reference.tsv tests/data/bounds-mpmath.tsv \
	tests/data/make-bounds-mpmath.py

# The memlimits bounds command (tools/memlimits, built with `all`).
TESTS += tests/test-cli-bounds.sh
EXTRA_DIST += tests/test-cli-bounds.sh

# The real library against the bounds (statistical, fixed seeds).
check_PROGRAMS += tests/test-conformance
TESTS += tests/test-conformance
tests_test_conformance_SOURCES = tests/test-conformance.c
tests_test_conformance_LDADD = $(ML_TEST_LIBS)
tests_test_conformance_LDFLAGS = $(ML_TEST_LINK)
tests_test_conformance_CFLAGS = $(ML_TEST_CFLAGS)
