# memlimits run and memlimits stats (issue 5): real programs under limits,
# reports, profiles, statistics, and every kind of bad input.
check_PROGRAMS += tests/test-run-hog tests/test-run-rss
TESTS += tests/test-run.sh
EXTRA_DIST += tests/test-run.sh

# -rdynamic: the report test looks for hog_function by name (dladdr).
tests_test_run_hog_SOURCES = tests/test-run-hog.c
tests_test_run_hog_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_test_run_hog_LDFLAGS = -no-install -rdynamic
tests_test_run_rss_SOURCES = tests/test-run-rss.c
tests_test_run_rss_LDFLAGS = -no-install

# CPython's own test suite under memlimits run (41 modules, each plain, with
# --heap-limit 16GiB and with --alloc-limit 1TiB --report): 15-40 minutes on
# two cores, so outside make check.  CPYTHON_MODULES picks some.
EXTRA_DIST += tests/cpython-suite.sh
check-cpython: tools/memlimits$(EXEEXT) lib/libmemlimits.la
	top_builddir='$(abs_top_builddir)' $(SHELL) $(srcdir)/tests/cpython-suite.sh $(CPYTHON_MODULES) | \
		tee cpython-suite.log; ! grep -q '^not ok' cpython-suite.log
CLEANFILES += cpython-suite.log
.PHONY: check-cpython
