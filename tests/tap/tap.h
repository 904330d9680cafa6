/* A TAP emitter that never allocates: tests run under tight memory limits
 * and inside malloc experiments, so everything goes through write(2) from
 * stack buffers.  Formats are vsnprintf's, into a fixed buffer; keep to
 * plain conversions (%d %u %s %g %zu ...). */
#ifndef ML_TAP_H
#define ML_TAP_H

#include <stdbool.h>
#include <stdint.h>

void tap_plan(int n); /* optional: plan up front */
bool tap_ok(bool cond, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tap_skip(int n, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tap_bail(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));
/* Print the plan if none was given, return the exit status (0 iff every
 * test passed). */
int tap_done(void);

/* Compare two integers; each argument is evaluated once. */
bool tap_is_int(int64_t got, int64_t want, const char *name);
#define tap_is(got, want, name) \
	tap_is_int((int64_t)(got), (int64_t)(want), (name))

/* Run fn(arg) in a child process with a time limit in seconds (scaled by
 * tap_timeout).  Returns the child's exit status (0..255), 128+signal if it
 * was killed by a signal, or -1 if it timed out (it is then killed) or
 * could not be started. */
int tap_child(void (*fn)(void *), void *arg, unsigned timeout_s);

/* Run one case, fn(), in a child process, so that no state it leaves (the
 * library's settings, the heap, errno) reaches the next case.  Its tap_ok
 * lines count as this process's; a child that crashes or outlives the
 * (scaled) time limit adds one failed test naming the case.  Runs only
 * when tap_want(name). */
void tap_case(const char *name, void (*fn)(void), unsigned timeout_s);

/* Named cases, so that one can be listed and rerun alone (tests/run-tests):
 * with TAP_CASE=NAME in the environment only the case NAME runs, and
 * tap_done fails if no case has that name; with TAP_LIST=1 each case
 * prints its name on a line of its own and none runs (tap_ok and the like
 * then print nothing, and tap_done prints no plan).  Code outside named
 * cases always runs, so keep it short.  tap_want(name) says whether the
 * case name is to run; TAP_RUN(fn) runs fn() in this process as the case
 * named after the function. */
bool tap_want(const char *name);
#define TAP_RUN(fn)                \
	do {                       \
		if (tap_want(#fn)) \
			fn();      \
	} while (0)

/* A time limit of s seconds as this run needs it: s times
 * ML_TEST_TIMEOUT_SCALE (a whole number, 1 to 1000) when set, else 20 times
 * under valgrind, else s. */
unsigned tap_timeout(unsigned s);

/* True under valgrind, which preloads its vgpreload_*.so
 * (lib/alloc/underlying.c detects it the same way). */
bool tap_under_valgrind(void);

/* kB of a field of /proc/self/status ("VmRSS", "VmData"), read without
 * stdio (which would allocate); -1 if it cannot be read. */
long tap_proc_kb(const char *field);

/* Write without stdio (for use inside children). */
void tap_write(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
