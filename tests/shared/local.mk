# Budgets shared by processes (issue 27): member processes, a killed one,
# another user, a corrupt table, fork, leaving.
check_PROGRAMS += tests/shared/test-shared
TESTS += tests/shared/test-shared
tests_shared_test_shared_SOURCES = tests/shared/test-shared.c tests/shared/pipes.h
tests_shared_test_shared_LDADD = $(ML_TEST_LIBS)
tests_shared_test_shared_LDFLAGS = $(ML_TEST_LINK)
tests_shared_test_shared_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# Issue 35: the stop that reaches a waiting member, the deadline, the
# crosser counted, read-only usage, untorn reads, a truncated or foreign
# object, exec, 1100 members.
check_PROGRAMS += tests/shared/test-shared-stop
TESTS += tests/shared/test-shared-stop
tests_shared_test_shared_stop_SOURCES = tests/shared/test-shared-stop.c tests/shared/pipes.h
tests_shared_test_shared_stop_LDADD = $(ML_TEST_LIBS)
tests_shared_test_shared_stop_LDFLAGS = $(ML_TEST_LINK)
tests_shared_test_shared_stop_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# Issue 35: --tree-heap-limit fails closed when its table is full.
TESTS += tests/shared/test-tree-full.sh
EXTRA_DIST += tests/shared/test-tree-full.sh

# Issue 35: 1030 processes under --tree-heap-limit 512MiB, members by fork
# and by exec, in a table of the default size and in one too small.
check_PROGRAMS += tests/shared/test-tree-many
TESTS += tests/shared/test-tree-many.sh
EXTRA_DIST += tests/shared/test-tree-many.sh
tests_shared_test_tree_many_SOURCES = tests/shared/test-tree-many.c tests/shared/pipes.h
tests_shared_test_tree_many_CFLAGS = $(AM_CFLAGS) -fno-builtin
tests_shared_test_tree_many_LDFLAGS = -no-install

# Issue 41 (1): malloc and free keep errno while the fold hook sweeps the
# slots of members that exited (kill(pid, 0) sets ESRCH).
check_PROGRAMS += tests/shared/test-shared-errno
TESTS += tests/shared/test-shared-errno
tests_shared_test_shared_errno_SOURCES = tests/shared/test-shared-errno.c tests/shared/pipes.h
tests_shared_test_shared_errno_LDADD = $(ML_TEST_LIBS)
tests_shared_test_shared_errno_LDFLAGS = $(ML_TEST_LINK)
tests_shared_test_shared_errno_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
