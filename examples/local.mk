# Examples are built by make check and run as tests.
check_PROGRAMS += examples/untrusted-task
examples_untrusted_task_SOURCES = examples/untrusted-task.c
examples_untrusted_task_LDADD = lib/libmemlimits.la
examples_untrusted_task_LDFLAGS = -no-install

# The guarded server and its demo (examples/guarded-server/README.md); run
# by tests/api/test-guarded-server.sh.  noinst: `make` builds it for the demo.
noinst_PROGRAMS += examples/guarded-server/guarded-server
examples_guarded_server_guarded_server_SOURCES = \
	examples/guarded-server/main.c examples/guarded-server/gs.h \
	examples/guarded-server/server.c examples/guarded-server/demo.c \
	examples/guarded-server/json.c examples/guarded-server/json.h \
	examples/guarded-server/expand.c examples/guarded-server/expand.h
examples_guarded_server_guarded_server_LDADD = lib/libmemlimits.la -lm
examples_guarded_server_guarded_server_LDFLAGS = -no-install
EXTRA_DIST += examples/guarded-server/README.md

# One example per delivery: untrusted-task (JUMP), fail-mode (FAIL),
# poll-flag (FLAG); run and checked by tests/api/test-examples.sh.
check_PROGRAMS += examples/fail-mode examples/poll-flag
examples_fail_mode_SOURCES = examples/fail-mode.c
examples_fail_mode_LDADD = lib/libmemlimits.la
examples_fail_mode_LDFLAGS = -no-install
examples_poll_flag_SOURCES = examples/poll-flag.c
examples_poll_flag_LDADD = lib/libmemlimits.la
examples_poll_flag_LDFLAGS = -no-install

# One request split across four threads, one budget (issue 13); run and
# checked by tests/api/test-examples.sh.
check_PROGRAMS += examples/fan-out
examples_fan_out_SOURCES = examples/fan-out.c
examples_fan_out_LDADD = lib/libmemlimits.la
examples_fan_out_LDFLAGS = -no-install

# An event-loop server (libuv) whose requests are tasks resumed in every
# callback (examples/event-loop/README.md); built when libuv is found, run
# by tests/api/test-examples.sh (--quick).
EXTRA_DIST += examples/event-loop/README.md examples/event-loop/event-loop.c
# Deployment files of docs/python.md ("Deployment"), run as written by
# python/tests/test_deploy.py.
EXTRA_DIST += examples/python/gunicorn.conf.py \
	examples/python/memlimits-gunicorn.service
if HAVE_LIBUV
check_PROGRAMS += examples/event-loop/event-loop
examples_event_loop_event_loop_SOURCES = examples/event-loop/event-loop.c
examples_event_loop_event_loop_CFLAGS = $(AM_CFLAGS) $(LIBUV_CFLAGS)
examples_event_loop_event_loop_LDADD = lib/libmemlimits.la $(LIBUV_LIBS)
examples_event_loop_event_loop_LDFLAGS = -no-install
endif
