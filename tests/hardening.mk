# Hardening (issue 6): faults around the library, bad input to every public
# function and to the command, and the many-threads program that .ci/run
# also builds under ThreadSanitizer.  See docs/reliability.md.
check_PROGRAMS += tests/test-faults tests/test-badinput tests/test-tsan \
	tests/make-elf
TESTS += tests/test-faults tests/test-badinput tests/test-tsan \
	tests/test-badinput-cli.sh
EXTRA_DIST += tests/test-badinput-cli.sh tests/valgrind.supp \
	docs/reliability.md

tests_test_faults_SOURCES = tests/test-faults.c
tests_test_faults_LDADD = $(ML_TEST_LIBS)
tests_test_faults_LDFLAGS = $(ML_TEST_LINK)
tests_test_faults_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin
tests_test_badinput_SOURCES = tests/test-badinput.c
tests_test_badinput_LDADD = $(ML_TEST_LIBS)
tests_test_badinput_LDFLAGS = $(ML_TEST_LINK)
tests_test_badinput_CFLAGS = $(ML_TEST_CFLAGS)
# Crafted ELF files for test-badinput-cli.sh (memlimits run's checks).
tests_make_elf_SOURCES = tests/make-elf.c
tests_make_elf_LDFLAGS = -no-install
tests_test_tsan_SOURCES = tests/test-tsan.c
tests_test_tsan_LDADD = $(ML_TEST_LIBS)
tests_test_tsan_LDFLAGS = $(ML_TEST_LINK)
tests_test_tsan_CFLAGS = $(ML_TEST_CFLAGS)
