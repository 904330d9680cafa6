# Tests speak TAP through automake's tap-driver.sh.  Test programs are
# linked -no-install so that libtool never wraps them in a shell script
# (an LD_PRELOAD would otherwise load into bash too).
TEST_EXTENSIONS = .sh
LOG_DRIVER = env AM_TAP_AWK='$(AWK)' $(SHELL) $(top_srcdir)/build-aux/tap-driver.sh
SH_LOG_DRIVER = $(LOG_DRIVER)
SH_LOG_COMPILER = $(SHELL)
AM_TESTS_ENVIRONMENT = \
	top_builddir='$(abs_top_builddir)'; export top_builddir; \
	top_srcdir='$(abs_top_srcdir)'; export top_srcdir; \
	MEMLIMITS_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so'; export MEMLIMITS_LIB; \
	NM='$(NM)'; export NM; VALGRIND='$(VALGRIND)'; export VALGRIND; \
	PYTHON3='$(PYTHON3)'; export PYTHON3; NGINX_BIN='$(NGINX)'; export NGINX_BIN; \
	PACKAGE_VERSION='$(PACKAGE_VERSION)'; export PACKAGE_VERSION;
EXTRA_DIST += build-aux/tap-driver.sh tests/tap/tap.sh tests/tap/tree.sh tests/valgrind.supp \
	docs/reliability.md

check_LTLIBRARIES += tests/tap/libtap.la
tests_tap_libtap_la_SOURCES = tests/tap/tap.c tests/tap/tap.h

# tests/run-tests (docs/internals.md): one test, group or case by name;
# test-run-tests.sh tests it.
TESTS += tests/test-run-tests.sh
EXTRA_DIST += tests/run-tests tests/test-run-tests.sh

ML_TEST_LIBS = tests/tap/libtap.la lib/libmemlimits.la -lm
ML_TEST_LINK = -no-install
ML_TEST_CFLAGS = $(AM_CFLAGS) -fno-builtin-malloc -fno-builtin-calloc -fno-builtin-free -fno-builtin-realloc

# One folder per kind of test; tests/run-tests lists their cases and runs
# one by name (docs/internals.md).
include tests/unit/local.mk
include tests/api/local.mk
include tests/concurrency/local.mk
include tests/shared/local.mk
include tests/stats/local.mk
include tests/cli/local.mk
include tests/nginx/local.mk
include tests/postgresql/local.mk
include tests/runtimes/local.mk
