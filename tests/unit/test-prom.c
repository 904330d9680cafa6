/* The Prometheus text format's one writer (lib/util/prom.c, issue 33):
 * the HELP and TYPE lines, samples with and without labels, values as
 * numbers and as text, and the format's escapes (HELP: backslash and line
 * feed; label values: those and the double quote), written into a sink
 * of the caller's, compared byte for byte.  With promtool at hand
 * (tests/api/test-metrics-promtool.sh runs it on the library's and the
 * command's text), `test-prom print` writes the escaped family for it. */
#include "../tap/tap.h"

#include <stdio.h>
#include <string.h>

#include "util/prom.h"

struct buf {
	char s[4096];
	size_t len;
};

static void put(void *sink, const char *s, size_t n)
{
	struct buf *b = sink;
	if (n > sizeof b->s - 1 - b->len)
		n = sizeof b->s - 1 - b->len;
	memcpy(b->s + b->len, s, n);
	b->len += n;
	b->s[b->len] = 0;
}

static void escaped_family(const struct ml__prom *p)
{
	ml__prom_family(p, "t_requests_total", "counter",
	                "Requests, \"quoted\",\nover C:\\lines.");
	const struct ml__prom_label l[] = {
	    {"path", "/a\"b\\c\nd"}, {"code", "200"}, {NULL, NULL}};
	ml__prom_sample(p, "t_requests_total", l, 7);
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "print")) {
		struct buf b = {0};
		const struct ml__prom p = {.put = put, .sink = &b};
		escaped_family(&p);
		fputs(b.s, stdout);
		return 0;
	}
	struct buf b = {0};
	const struct ml__prom p = {.put = put, .sink = &b};

	ml__prom_one(&p, "t_heap_bytes", "gauge", "Heap in use.",
	             18446744073709551615u);
	if (!tap_ok(!strcmp(b.s, "# HELP t_heap_bytes Heap in use.\n"
	                         "# TYPE t_heap_bytes gauge\n"
	                         "t_heap_bytes 18446744073709551615\n"),
	            "a family of one sample, the largest value"))
		tap_diag("got: %s", b.s);

	b = (struct buf){0};
	ml__prom_sample_text(&p, "t_limit_bytes", NULL, "+Inf");
	ml__prom_sample(&p, "t_zero", NULL, 0);
	if (!tap_ok(!strcmp(b.s, "t_limit_bytes +Inf\nt_zero 0\n"),
	            "a value as text (+Inf), and 0"))
		tap_diag("got: %s", b.s);

	b = (struct buf){0};
	const struct ml__prom_label none[] = {{NULL, NULL}};
	ml__prom_sample(&p, "t_empty", none, 1);
	if (!tap_ok(!strcmp(b.s, "t_empty 1\n"),
	            "an empty label list: no braces"))
		tap_diag("got: %s", b.s);

	b = (struct buf){0};
	escaped_family(&p);
	if (!tap_ok(
	        !strcmp(
	            b.s,
	            "# HELP t_requests_total Requests, \"quoted\",\\nover "
	            "C:\\\\lines.\n"
	            "# TYPE t_requests_total counter\n"
	            "t_requests_total{path=\"/a\\\"b\\\\c\\nd\",code=\"200\"}"
	            " 7\n"),
	        "HELP escapes \\ and line feeds (not quotes); label values "
	        "escape \\, \" and line feeds; labels in order"))
		tap_diag("got: %s", b.s);
	return tap_done();
}
