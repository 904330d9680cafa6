/* The Prometheus text format 0.0.4 (prom.h).  Escaping as the format's
 * specification says: in HELP, backslash and line feed; in a label value,
 * those and the double quote.  Names are the caller's constants.  With
 * parse.c (ml__utoa), it needs no other file of the library. */
#include "prom.h"

#include "parse.h"

#include <string.h>

static void puts_(const struct ml__prom *p, const char *s)
{
	p->put(p->sink, s, strlen(s));
}

/* s with each character of special written as a backslash and its
 * escape (a line feed as "\n"). */
static void escaped(const struct ml__prom *p, const char *s,
                    const char *special)
{
	const char *run = s;
	for (; *s; s++) {
		if (!strchr(special, *s))
			continue;
		p->put(p->sink, run, (size_t)(s - run));
		p->put(p->sink,
		       *s == '\n'  ? "\\n"
		       : *s == '"' ? "\\\""
		                   : "\\\\",
		       2);
		run = s + 1;
	}
	p->put(p->sink, run, (size_t)(s - run));
}

void ml__prom_family(const struct ml__prom *p, const char *name,
                     const char *type, const char *help)
{
	puts_(p, "# HELP ");
	puts_(p, name);
	puts_(p, " ");
	escaped(p, help, "\\\n");
	puts_(p, "\n# TYPE ");
	puts_(p, name);
	puts_(p, " ");
	puts_(p, type);
	puts_(p, "\n");
}

void ml__prom_sample_text(const struct ml__prom *p, const char *name,
                          const struct ml__prom_label *labels,
                          const char *value)
{
	puts_(p, name);
	if (labels && labels->name) {
		for (const struct ml__prom_label *l = labels; l->name; l++) {
			puts_(p, l == labels ? "{" : ",");
			puts_(p, l->name);
			puts_(p, "=\"");
			escaped(p, l->value, "\\\"\n");
			puts_(p, "\"");
		}
		puts_(p, "}");
	}
	puts_(p, " ");
	puts_(p, value);
	puts_(p, "\n");
}

void ml__prom_sample(const struct ml__prom *p, const char *name,
                     const struct ml__prom_label *labels, uint64_t value)
{
	char d[ML__UTOA_BYTES];
	ml__prom_sample_text(p, name, labels, ml__utoa(value, 10, d));
}

void ml__prom_one(const struct ml__prom *p, const char *name, const char *type,
                  const char *help, uint64_t value)
{
	ml__prom_family(p, name, type, help);
	ml__prom_sample(p, name, NULL, value);
}
