/* The core's own settings (sample interval, seed, default delivery) and
 * the MEMLIMITS_* variables that set them, read once at start.  Threads
 * pick a change up by its epoch (tasks/thread.c); run mode reads its own
 * variables (run/settings.c). */
#define _GNU_SOURCE
#include "core/core.h"

#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

_Atomic uint64_t ml__interval = ML__DEFAULT_INTERVAL;
_Atomic uint64_t ml__seed = 0x6d656d6c696d6974u; /* "memlimit" */
_Atomic uint32_t ml__seed_epoch;
_Atomic uint32_t ml__interval_epoch;
_Atomic int ml__default_delivery = ML_DELIVER_JUMP;

void ml__set_interval(uint64_t bytes)
{
	atomic_store(&ml__interval, bytes);
	atomic_fetch_add(&ml__interval_epoch, 1);
}

void ml__set_seed(uint64_t seed)
{
	atomic_store(&ml__seed, seed);
	atomic_fetch_add(&ml__seed_epoch, 1);
}

ML_EXPORT uint64_t ml_sample_interval(void)
{
	return atomic_load(&ml__interval);
}

ML_EXPORT int ml_set_default_delivery(ml_delivery d)
{
	if ((unsigned)d > ML_DELIVER_FLAG)
		return ML_EINVAL;
	atomic_store(&ml__default_delivery, (int)d);
	return 0;
}

ML_EXPORT ml_delivery ml_default_delivery(void)
{
	return (ml_delivery)atomic_load(&ml__default_delivery);
}

/* Say once that the variables are ignored, if any is set. */
static void note_secure(void)
{
	extern char **environ;
	if (!getauxval(AT_SECURE))
		return;
	for (char **e = environ; e && *e; e++)
		if (!strncmp(*e, "MEMLIMITS_", 10)) {
			ml__diag("ignoring the MEMLIMITS_* variables: this "
			         "program runs with privileges (setuid, setgid "
			         "or file capabilities)");
			return;
		}
}

static void bad_env(const char *name, const char *value, const char *want)
{
	ml__diag("ignoring %s=%s: expected %s", name, value, want);
}

/* MEMLIMITS_FAULT=libc:N[,pool]: for the tests only, honoured only by a
 * build configured with --enable-fault-injection (docs/reliability.md).
 * The whole value is checked before any of it is applied: a malformed
 * value changes nothing, and the message names all of it. */
static void read_fault(const char *v)
{
#ifdef ML_FAULT_INJECTION
	uint64_t every = 0;
	bool pool = false;
	const char *s = v;
	do {
		size_t len = strcspn(s, ",");
		char num[24];
		if (len == 4 && !strncmp(s, "pool", 4))
			pool = true;
		else if (len > 5 && len - 5 < sizeof num &&
		         !strncmp(s, "libc:", 5)) {
			memcpy(num, s + 5, len - 5);
			num[len - 5] = 0;
			if (ml__parse_u64(num, &every) != 0 || every == 0)
				goto bad;
		} else
			goto bad; /* an empty item too: '', 'pool,', ',pool' */
		s += len;
	} while (*s++ == ',');
	ml__fault_pool = pool;
	if (every) {
		ml__fault_libc(every);
		ml__meter_switch(ML__METER_ON); /* the tails call the table */
	}
	return;
bad:
	bad_env("MEMLIMITS_FAULT", v,
	        "libc:N (N >= 1) or pool, comma-separated");
#else
	ml__diag("ignoring MEMLIMITS_FAULT=%s: this build has no fault "
	         "injection (configure --enable-fault-injection)",
	         v);
#endif
}

void ml__settings_read_env(void)
{
	const char *v;
	uint64_t x;
	note_secure();
	if ((v = ml__getenv("MEMLIMITS_SAMPLE_INTERVAL"))) {
		if (ml__parse_size(v, &x) == 0 && x > 0)
			ml__set_interval(x);
		else
			bad_env("MEMLIMITS_SAMPLE_INTERVAL", v,
			        "a size in bytes >= 1 (e.g. 80000, 64KiB)");
	}
	if ((v = ml__getenv("MEMLIMITS_SEED"))) {
		if (ml__parse_u64(v, &x) == 0)
			ml__set_seed(x);
		else
			bad_env("MEMLIMITS_SEED", v,
			        "an unsigned 64-bit integer");
	}
	if ((v = ml__getenv("MEMLIMITS_FAULT")))
		read_fault(v);
	if ((v = ml__getenv("MEMLIMITS_DELIVERY"))) {
		if (!strcmp(v, "jump"))
			ml_set_default_delivery(ML_DELIVER_JUMP);
		else if (!strcmp(v, "fail"))
			ml_set_default_delivery(ML_DELIVER_FAIL);
		else if (!strcmp(v, "flag"))
			ml_set_default_delivery(ML_DELIVER_FLAG);
		else
			bad_env("MEMLIMITS_DELIVERY", v, "jump, fail or flag");
	}
	/* Issue 34: counting the program's own mappings, on by default.
	 * What was counted before this constructor is forgotten with it. */
	if ((v = ml__getenv("MEMLIMITS_MAPPED"))) {
		if (!strcmp(v, "0"))
			ml__mapped_disable();
		else if (strcmp(v, "1") != 0)
			bad_env("MEMLIMITS_MAPPED", v, "0 or 1");
	}
}
