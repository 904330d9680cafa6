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
