/* ml_task_describe (issue 18's need, API in memlimits.h): one line that
 * says why a task was interrupted, the limit, the estimates at the
 * interruption and where (the innermost frames of the allocation that
 * tripped it); snprintf's contract for the buffer; bad arguments refused.
 * The trips here are certain (limits far below what the tasks allocate):
 * no statistics. */
#define _GNU_SOURCE
#include <errno.h>
#include <memlimits.h>
#include <stdlib.h>
#include <string.h>

#include "../tap/tap.h"

static void *volatile sink;

__attribute__((noinline)) void *runaway_alloc(void *arg);
__attribute__((noinline)) void *hold_forever(void *arg);

/* Allocates and frees 64 MiB in 64 KiB blocks (FAIL delivery: they start
 * failing). */
__attribute__((noinline)) void *runaway_alloc(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1024; i++) {
		sink = malloc(64 << 10);
		free(sink);
	}
	return NULL;
}

static void *kept[1024];
__attribute__((noinline)) void *hold_forever(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1024; i++)
		kept[i] = malloc(64 << 10);
	return NULL;
}

static char line[4096];

static bool starts(const char *s, const char *prefix)
{
	return !strncmp(s, prefix, strlen(prefix));
}

static void test_alloc_limit(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 1 << 20;
	l.delivery = ML_DELIVER_FAIL;
	ml_task *t = ml_task_new(&l);
	ml_status st = ml_task_run(t, runaway_alloc, NULL, NULL);
	int n = ml_task_describe(t, line, sizeof line);
	tap_ok(st == ML_ALLOC_LIMIT && n == (int)strlen(line) &&
	           starts(line, "allocation limit reached: limit 1.0 MiB, "
	                        "allocated ~") &&
	           strstr(line, ", at runaway_alloc"),
	       "allocation limit: '%s'", line);
	ml_task_free(t);
}

static void test_held_limit(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.held_bytes = 4 << 20;
	l.delivery = ML_DELIVER_FAIL;
	ml_task *t = ml_task_new(&l);
	ml_task_run(t, hold_forever, NULL, NULL);
	ml_task_describe(t, line, sizeof line);
	tap_ok(starts(line, "held memory limit reached: limit 4.0 MiB, ") &&
	           strstr(line, ", held ~") &&
	           strstr(line, ", at hold_forever"),
	       "held limit: '%s'", line);
	for (int i = 0; i < 1024; i++)
		free(kept[i]);
	ml_task_free(t);
}

static void *nothing(void *arg)
{
	return arg;
}

static void test_cancelled_and_ok(void)
{
	ml_token *tok = ml_token_new();
	ml_limits l = ML_LIMITS_INIT;
	l.token = tok;
	ml_task *t = ml_task_new(&l);
	ml_task_run(t, nothing, NULL, NULL);
	ml_task_describe(t, line, sizeof line);
	tap_ok(starts(line, "not interrupted: allocated ~"),
	       "not interrupted: '%s'", line);
	ml_token_set(tok);
	ml_task_describe(t, line, sizeof line);
	tap_ok(starts(line, "cancelled: allocated ~") && !strstr(line, " at "),
	       "cancelled between slices (no allocation made it): '%s'", line);
	ml_task_free(t);
	ml_token_free(tok);
}

static void test_buffer(void)
{
	ml_limits l = ML_LIMITS_INIT;
	ml_task *t = ml_task_new(&l);
	int whole = ml_task_describe(t, NULL, 0);
	char small[8];
	memset(small, 'x', sizeof small);
	int n = ml_task_describe(t, small, sizeof small);
	tap_ok(whole > 8 && n == whole && small[7] == 0 &&
	           !strncmp(small, "not int", 7),
	       "as snprintf: the whole length (%d) back, the line cut and "
	       "terminated",
	       whole);
	errno = 0;
	tap_ok(ml_task_describe(NULL, line, sizeof line) == ML_EINVAL &&
	           errno == EINVAL,
	       "NULL task: ML_EINVAL");
	errno = 0;
	tap_ok(ml_task_describe(t, NULL, 5) == ML_EINVAL && errno == EINVAL,
	       "buf NULL with len 5: ML_EINVAL");
	ml_task_free(t);
}

int main(void)
{
	ml_set_seed(11);
	tap_case("test_alloc_limit", test_alloc_limit, 30);
	tap_case("test_held_limit", test_held_limit, 30);
	tap_case("test_cancelled_and_ok", test_cancelled_and_ok, 30);
	tap_case("test_buffer", test_buffer, 30);
	return tap_done();
}
