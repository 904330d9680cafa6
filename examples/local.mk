# Examples are built by make check and run as tests.
check_PROGRAMS += examples/untrusted-task
examples_untrusted_task_SOURCES = examples/untrusted-task.c
examples_untrusted_task_LDADD = lib/libmemlimits.la
examples_untrusted_task_LDFLAGS = -no-install
