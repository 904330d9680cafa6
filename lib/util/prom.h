/* The Prometheus text exposition format, version 0.0.4: a family's HELP
 * and TYPE lines, and its samples with their labels, every text escaped
 * as the format asks.  The one writer of that format: ml_write_metrics
 * (api/metrics.c) and `memlimits stats --format prometheus` (compiled
 * into the command) use it, and it is made to be compiled into the nginx
 * and PostgreSQL modules too: it needs nothing but the sink it is given
 * and parse.c (no allocation, no stdio, no locale, nothing else of the
 * library), so it writes into a stack buffer, a FILE, an ngx_buf_t or a
 * StringInfo alike. */
#ifndef ML_PROM_H
#define ML_PROM_H

#include <stddef.h>
#include <stdint.h>

/* Where the text goes: put(sink, s, n) appends n bytes (no NUL), and is
 * called many times for a line; a sink that runs out of room keeps its
 * own account of it. */
struct ml__prom {
	void (*put)(void *sink, const char *s, size_t n);
	void *sink;
};

/* A label of a sample; an array of them ends with a NULL name. */
struct ml__prom_label {
	const char *name, *value;
};

/* "# HELP NAME HELP" and "# TYPE NAME TYPE" (gauge, counter, ...): the
 * help text escaped (\\ and \n). */
void ml__prom_family(const struct ml__prom *p, const char *name,
                     const char *type, const char *help);
/* "NAME{L1=\"V1\",...} VALUE": labels NULL or ended by a NULL name, their
 * values escaped (\\, \" and \n). */
void ml__prom_sample(const struct ml__prom *p, const char *name,
                     const struct ml__prom_label *labels, uint64_t value);
/* The same with a value written as given ("+Inf", "NaN", "0.25"). */
void ml__prom_sample_text(const struct ml__prom *p, const char *name,
                          const struct ml__prom_label *labels,
                          const char *value);
/* A family of one sample without labels. */
void ml__prom_one(const struct ml__prom *p, const char *name, const char *type,
                  const char *help, uint64_t value);

#endif
