/* libFuzzer target: the environment the library reads at start
 * (lib/core/settings.c: MEMLIMITS_SAMPLE_INTERVAL, _SEED, _FAULT,
 * _DELIVERY, _MAPPED; lib/run/settings.c: MEMLIMITS_ALLOC_LIMIT, _HEAP_LIMIT,
 * _ON_LIMIT, _REPORT, _PROFILE, _STATS_DIR; a percentage heap limit reads
 * lib/util/memtotal.c's files) and the diagnostics it prints
 * about bad values (lib/util/diag.c).  The input is up to ten lines, one
 * value per variable.
 *
 * The two readers are linked in with the utilities they use; what they
 * call further down (the allocator underneath, the meter) is replaced by
 * the recording stubs below: the readers are exercised exactly as at
 * start-up, nothing else runs.  The library's own malloc is not linked:
 * ASan's is in charge. */
#include "run/run.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- Stubs ------------------------------------------------------------ */

bool ml__fault_pool;
_Atomic bool ml__meter_on_;
static uint64_t fault_every, global_limit = ML_NO_LIMIT;

void ml__fault_libc(uint64_t every)
{
	fault_every = every;
}
void ml__meter_switch(bool on)
{
	(void)on;
}
const char *ml__malloc_in_front(void)
{
	return NULL; /* nothing preloaded before the library */
}
void ml__global_limit_set(uint64_t bytes)
{
	global_limit = bytes;
}
bool ml__shared_member(void)
{
	return false; /* the settings alone: no tree budget joined */
}
static bool mapped_off;
void ml__mapped_disable(void)
{
	mapped_off = true;
}

/* As the library's constructor does first (lib/api/init.c). */
__attribute__((constructor)) static void start(void)
{
	ml__diag_init();
}

/* ---- Target ----------------------------------------------------------- */

static const char *const vars[] = {
    "MEMLIMITS_SAMPLE_INTERVAL", "MEMLIMITS_SEED",
    "MEMLIMITS_FAULT",           "MEMLIMITS_DELIVERY",
    "MEMLIMITS_ALLOC_LIMIT",     "MEMLIMITS_HEAP_LIMIT",
    "MEMLIMITS_ON_LIMIT",        "MEMLIMITS_REPORT",
    "MEMLIMITS_PROFILE",         "MEMLIMITS_STATS_DIR",
    "MEMLIMITS_HELD_LIMIT",      "MEMLIMITS_MAPPED",
};
#define NVARS (sizeof vars / sizeof vars[0])

#define CHECK(c)                 \
	do {                     \
		if (!(c))        \
			abort(); \
	} while (0)

/* The environment is an array of our own buffers, made environ for each
 * input: glibc's setenv keeps every value it was ever given (a fuzz run
 * of 5 minutes grew to 1.5 GB and ended in a false out-of-memory).  A
 * value longer than MAX_VALUE (past -max_len) is cut there. */
#define MAX_VALUE 8192
extern char **environ;
static char env_buf[NVARS][32 + MAX_VALUE];
static char *env_arr[NVARS + 1];

static void reset(void)
{
	atomic_store(&ml__interval, ML__DEFAULT_INTERVAL);
	atomic_store(&ml__default_delivery, ML_DELIVER_JUMP);
	ml__run = (struct ml__run){.alloc_limit = ML_NO_LIMIT,
	                           .heap_limit = ML_NO_LIMIT,
	                           .held_limit = ML_NO_LIMIT};
	ml__fault_pool = false;
	fault_every = 0;
	global_limit = ML_NO_LIMIT;
	mapped_off = false;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* The constructor copied stderr before libFuzzer's -close_fd_mask
	 * replaced fd 2: follow it, so that the diagnostics are silenced
	 * too (diag.c writes nowhere once its copy is another file). */
	static bool followed;
	int dfd = ml__diag_fd();
	if (!followed && dfd > 2)
		dup2(2, dfd);
	followed = true;
	reset();
	const char *val[NVARS] = {0};
	size_t i = 0, start = 0, nenv = 0;
	for (size_t p = 0; p <= size && i < NVARS; p++) {
		if (p < size && data[p] != '\n')
			continue;
		/* A value ends at its first NUL, as in a real environment. */
		size_t len = strnlen((const char *)data + start, p - start);
		if (len > MAX_VALUE)
			len = MAX_VALUE;
		char *b = env_buf[i];
		size_t nl = strlen(vars[i]);
		memcpy(b, vars[i], nl);
		b[nl] = '=';
		memcpy(b + nl + 1, data + start, len);
		b[nl + 1 + len] = 0;
		val[i] = b + nl + 1;
		/* An empty line leaves the variable unset. */
		if (len)
			env_arr[nenv++] = b;
		i++;
		start = p + 1;
	}
	env_arr[nenv] = NULL;
	char **saved = environ;
	environ = env_arr;
	ml__settings_read_env();
	ml__run_configure();
	environ = saved;

	uint64_t x;
	uint64_t s = atomic_load(&ml__interval);
	CHECK(s >= 1);
	if (val[0] && *val[0] && ml__parse_size(val[0], &x) == 0 && x > 0)
		CHECK(s == x);
	else
		CHECK(s == ML__DEFAULT_INTERVAL);
	int d = atomic_load(&ml__default_delivery);
	CHECK(d >= ML_DELIVER_JUMP && d <= ML_DELIVER_FLAG);
	CHECK(ml__run.on_limit == ML__ON_LIMIT_FAIL ||
	      ml__run.on_limit == ML__ON_LIMIT_ABORT);
	if (ml__run.alloc_limit != ML_NO_LIMIT)
		CHECK(ml__run.k >= 1 &&
		      ml__run.k - 1 < ml__run.alloc_limit / s + 1);
	CHECK(ml__run.active == (ml__run.alloc_limit != ML_NO_LIMIT ||
	                         ml__run.heap_limit != ML_NO_LIMIT ||
	                         ml__run.held_limit != ML_NO_LIMIT));
	if (ml__run.heap_limit != ML_NO_LIMIT)
		CHECK(global_limit == ml__run.heap_limit);
	/* A good percentage sets the limit and says of what; a bad one
	 * leaves none. */
	if (val[5] && *val[5] && strchr(val[5], '%')) {
		bool good = ml__parse_percent(val[5], &x) == 0;
		CHECK(good == (ml__run.heap_limit != ML_NO_LIMIT));
		CHECK(good == (ml__run.heap_from != NULL));
	} else {
		CHECK(ml__run.heap_from == NULL);
	}
	return 0;
}
