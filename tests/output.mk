# Run mode's output files (issue 11): the environment of a privileged
# program is ignored, reports reach a closed stderr, settings survive a
# rewritten environment, FIFOs and unwritable files are refused with one
# line, and no descriptor of ours reaches the program's low range or a child.
check_PROGRAMS += tests/test-output-prog tests/test-output-fds
TESTS += tests/test-output.sh
EXTRA_DIST += tests/test-output.sh

tests_test_output_prog_SOURCES = tests/test-output-prog.c
tests_test_output_prog_LDADD = lib/libmemlimits.la
tests_test_output_prog_LDFLAGS = -no-install
tests_test_output_prog_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
tests_test_output_fds_SOURCES = tests/test-output-fds.c
tests_test_output_fds_LDFLAGS = -no-install
