/* memlimits stats DIR: merge the per-process statistics files that
 * `memlimits run --stats DIR` leaves (lib/run/stats.c writes them) into one
 * table.
 *
 * The files come from outside, so the reader is strict and bounded: plain
 * RFC 8259 JSON only (no comments, no trailing commas, no duplicate
 * members), at most MAX_FILE bytes and MAX_DEPTH levels, counts that are
 * unsigned integers fitting 64 bits, and the sums checked for overflow.
 * Anything else is one line on stderr and exit status 2. */
#include "config.h"

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../lib/util/parse.h"
#include "../lib/util/prom.h"
#include "memlimits.h"
#include "tool.h"

#define CMD "stats"
#define MAX_FILE (1u << 20)
#define MAX_DEPTH 32
#define NBUCKETS 65

static const char synopsis[] = "DIR [--format table|prometheus|openmetrics]";

struct proc {
	uint64_t pid, interval, threads, allocs, bytes, sampled_allocs, samples;
	uint64_t window, dry;
	/* Version 2 (issue 29), 0 in version 1 files: tasks started,
	 * interrupted by reason (alloc, global, cancelled, held: ml_status
	 * order), pressure callbacks, heap at exit, global limit (0: none),
	 * shared budget usage. */
	uint64_t version, started, intr[4], pressure, heap, glimit, shared;
	/* Version 3 (issue 34), 0 before: the part of heap mapped. */
	uint64_t mapped;
	uint64_t hist[NBUCKETS], hist_sampled[NBUCKETS];
	char program[256];
};

/* ---- Reader ----------------------------------------------------------- */

struct rd {
	const char *file;
	const char *s, *end, *p;
};

static _Noreturn void bad(struct rd *r, const char *what)
{
	unsigned line = 1, col = 1;
	for (const char *q = r->s; q < r->p && q < r->end; q++) {
		if (*q == '\n')
			line++, col = 1;
		else
			col++;
	}
	ml__tool_usage_error(CMD, "%s: line %u, column %u: %s", r->file, line,
	                     col, what);
}

static void ws(struct rd *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' ||
	                         *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static bool peek(struct rd *r, char c)
{
	ws(r);
	return r->p < r->end && *r->p == c;
}

static void expect(struct rd *r, char c, const char *what)
{
	if (!peek(r, c))
		bad(r, what);
	r->p++;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A string; its bytes (escapes decoded, UTF-8 for \u) go to out[cap] when
 * out is given, silently cut at cap-1. */
static void string(struct rd *r, char *out, size_t cap)
{
	size_t n = 0;
	expect(r, '"', "expected a string");
	for (;;) {
		if (r->p >= r->end)
			bad(r, "unterminated string");
		unsigned char c = (unsigned char)*r->p;
		if (c == '"') {
			r->p++;
			break;
		}
		if (c < 0x20)
			bad(r, "control character in a string");
		char buf[4];
		size_t blen = 1;
		buf[0] = (char)c;
		r->p++;
		if (c == '\\') {
			if (r->p >= r->end)
				bad(r, "unterminated escape");
			char e = *r->p++;
			const char *from = "\"\\/bfnrt",
			           *to = "\"\\/\b\f\n\r\t";
			const char *k = e ? strchr(from, e) : NULL;
			if (k) {
				buf[0] = to[k - from];
			} else if (e == 'u') {
				unsigned v = 0;
				for (int i = 0; i < 4; i++) {
					int h =
					    r->p < r->end ? hexval(*r->p) : -1;
					if (h < 0)
						bad(r, "bad \\u escape");
					v = v * 16 + (unsigned)h;
					r->p++;
				}
				/* Surrogate halves are kept as they come
				 * (the value is only displayed). */
				if (v < 0x80) {
					buf[0] = (char)v;
				} else if (v < 0x800) {
					buf[0] = (char)(0xc0 | v >> 6);
					buf[1] = (char)(0x80 | (v & 63));
					blen = 2;
				} else {
					buf[0] = (char)(0xe0 | v >> 12);
					buf[1] = (char)(0x80 | ((v >> 6) & 63));
					buf[2] = (char)(0x80 | (v & 63));
					blen = 3;
				}
			} else {
				bad(r, "bad escape in a string");
			}
		}
		for (size_t i = 0; out && i < blen && n + 1 < cap; i++)
			out[n++] = buf[i];
	}
	if (out && cap)
		out[n] = 0;
}

/* A number per the JSON grammar.  Sets *u when it is an unsigned integer
 * fitting 64 bits; returns whether it is. */
static bool number(struct rd *r, uint64_t *u)
{
	ws(r);
	const char *p = r->p;
	bool integer = true, overflow = false;
	uint64_t v = 0;
	if (p < r->end && *p == '-')
		p++, integer = false;
	if (p >= r->end || *p < '0' || *p > '9')
		bad(r, "expected a value");
	if (*p == '0') {
		p++;
	} else {
		for (; p < r->end && *p >= '0' && *p <= '9'; p++) {
			unsigned d = (unsigned)(*p - '0');
			if (v > (UINT64_MAX - d) / 10)
				overflow = true;
			v = v * 10 + d;
		}
	}
	if (p < r->end && *p == '.') {
		integer = false;
		p++;
		if (p >= r->end || *p < '0' || *p > '9')
			r->p = p, bad(r, "digits expected after '.'");
		while (p < r->end && *p >= '0' && *p <= '9')
			p++;
	}
	if (p < r->end && (*p == 'e' || *p == 'E')) {
		integer = false;
		p++;
		if (p < r->end && (*p == '+' || *p == '-'))
			p++;
		if (p >= r->end || *p < '0' || *p > '9')
			r->p = p, bad(r, "digits expected in the exponent");
		while (p < r->end && *p >= '0' && *p <= '9')
			p++;
	}
	r->p = p;
	if (integer && !overflow && u)
		*u = v;
	return integer && !overflow;
}

static void literal(struct rd *r, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n))
		bad(r, "expected a value");
	r->p += n;
}

/* Any value, checked and thrown away. */
static void skip(struct rd *r, int depth)
{
	if (depth > MAX_DEPTH)
		bad(r, "nested too deeply");
	ws(r);
	if (r->p >= r->end)
		bad(r, "expected a value");
	switch (*r->p) {
	case '{':
		r->p++;
		if (peek(r, '}')) {
			r->p++;
			return;
		}
		do {
			string(r, NULL, 0);
			expect(r, ':', "expected ':'");
			skip(r, depth + 1);
		} while (peek(r, ',') && (r->p++, true));
		expect(r, '}', "expected ',' or '}'");
		return;
	case '[':
		r->p++;
		if (peek(r, ']')) {
			r->p++;
			return;
		}
		do
			skip(r, depth + 1);
		while (peek(r, ',') && (r->p++, true));
		expect(r, ']', "expected ',' or ']'");
		return;
	case '"':
		string(r, NULL, 0);
		return;
	case 't':
		literal(r, "true");
		return;
	case 'f':
		literal(r, "false");
		return;
	case 'n':
		literal(r, "null");
		return;
	default:
		number(r, NULL);
	}
}

static uint64_t count(struct rd *r)
{
	uint64_t v = 0;
	const char *at = (ws(r), r->p);
	if (!number(r, &v)) {
		r->p = at;
		bad(r, "expected an unsigned integer below 2^64");
	}
	return v;
}

static void histogram(struct rd *r, struct proc *pr)
{
	expect(r, '[', "expected '[' (the histogram)");
	if (peek(r, ']')) {
		r->p++;
		return;
	}
	do {
		expect(r, '[', "expected '[' (a histogram bucket)");
		const char *at = (ws(r), r->p);
		uint64_t lo = count(r);
		unsigned b = lo ? 64u - (unsigned)__builtin_clzll(lo) : 0;
		if (lo & (lo - 1)) {
			r->p = at;
			bad(r, "a bucket's lower bound must be 0 or a power "
			       "of two");
		}
		expect(r, ',', "expected ','");
		uint64_t c = count(r);
		expect(r, ',', "expected ','");
		uint64_t s = count(r);
		expect(r, ']', "expected ']' after 3 numbers");
		if (s > c || pr->hist[b] || pr->hist_sampled[b]) {
			r->p = at;
			bad(r, s > c ? "more sampled than allocated"
			             : "bucket given twice");
		}
		pr->hist[b] = c;
		pr->hist_sampled[b] = s;
	} while (peek(r, ',') && (r->p++, true));
	expect(r, ']', "expected ',' or ']'");
}

enum {
	F_FORMAT,
	F_VERSION,
	F_PID,
	F_PROGRAM,
	F_INTERVAL,
	F_THREADS,
	F_ALLOCS,
	F_BYTES,
	F_SAMPLED,
	F_SAMPLES,
	F_WINDOW,
	F_DRY,
	F_HIST,
	F_STARTED, /* version 2 from here */
	F_INTR_ALLOC,
	F_INTR_GLOBAL,
	F_INTR_CANCELLED,
	F_INTR_HELD,
	F_PRESSURE,
	F_HEAP,
	F_GLIMIT,
	F_SHARED,
	F_MAPPED, /* version 3 */
	NFIELDS
};
static const char *const field_names[NFIELDS] = {"format",
                                                 "version",
                                                 "pid",
                                                 "program",
                                                 "interval",
                                                 "threads",
                                                 "allocations",
                                                 "bytes",
                                                 "sampled_allocations",
                                                 "samples",
                                                 "window",
                                                 "unsampled_windows",
                                                 "histogram",
                                                 "tasks_started",
                                                 "interrupted_alloc_limit",
                                                 "interrupted_global_limit",
                                                 "interrupted_cancelled",
                                                 "interrupted_held_limit",
                                                 "pressure_callbacks",
                                                 "heap_bytes",
                                                 "global_limit",
                                                 "shared_usage",
                                                 "mapped_bytes"};

static void parse_file(const char *file, const char *s, size_t len,
                       struct proc *pr)
{
	struct rd r = {file, s, s + len, s};
	bool seen[NFIELDS] = {0};
	memset(pr, 0, sizeof *pr);
	if (memchr(s, 0, len))
		r.p = memchr(s, 0, len), bad(&r, "NUL byte");
	expect(&r, '{', "expected '{'");
	if (!peek(&r, '}')) {
		do {
			char key[64];
			const char *at = (ws(&r), r.p);
			string(&r, key, sizeof key);
			expect(&r, ':', "expected ':'");
			int f = 0;
			while (f < NFIELDS && strcmp(key, field_names[f]))
				f++;
			if (f == NFIELDS) {
				skip(&r, 1); /* a later version's field */
				continue;
			}
			if (seen[f])
				r.p = at, bad(&r, "member given twice");
			seen[f] = true;
			char fmt[32];
			ws(&r);
			at = r.p;
			switch (f) {
			case F_FORMAT:
				string(&r, fmt, sizeof fmt);
				if (strcmp(fmt, "memlimits-stats"))
					r.p = at, bad(&r, "not a memlimits "
					                  "statistics file");
				break;
			case F_VERSION:
				pr->version = count(&r);
				if (pr->version < 1 || pr->version > 3)
					r.p = at, bad(&r, "unknown version");
				break;
			case F_PROGRAM:
				string(&r, pr->program, sizeof pr->program);
				break;
			case F_HIST:
				histogram(&r, pr);
				break;
			default: {
				uint64_t v = count(&r);
				uint64_t *dst[NFIELDS] = {
				    [F_PID] = &pr->pid,
				    [F_INTERVAL] = &pr->interval,
				    [F_THREADS] = &pr->threads,
				    [F_ALLOCS] = &pr->allocs,
				    [F_BYTES] = &pr->bytes,
				    [F_SAMPLED] = &pr->sampled_allocs,
				    [F_SAMPLES] = &pr->samples,
				    [F_WINDOW] = &pr->window,
				    [F_DRY] = &pr->dry,
				    [F_STARTED] = &pr->started,
				    [F_INTR_ALLOC] = &pr->intr[0],
				    [F_INTR_GLOBAL] = &pr->intr[1],
				    [F_INTR_CANCELLED] = &pr->intr[2],
				    [F_INTR_HELD] = &pr->intr[3],
				    [F_PRESSURE] = &pr->pressure,
				    [F_HEAP] = &pr->heap,
				    [F_GLIMIT] = &pr->glimit,
				    [F_SHARED] = &pr->shared,
				    [F_MAPPED] = &pr->mapped,
				};
				*dst[f] = v;
			}
			}
		} while (peek(&r, ',') && (r.p++, true));
	}
	expect(&r, '}', "expected ',' or '}'");
	ws(&r);
	if (r.p != r.end)
		bad(&r, "text after the object");
	for (int f = 0; f < NFIELDS; f++)
		if (!seen[f] && f != F_PROGRAM && f != F_THREADS &&
		    f != F_WINDOW && (f < F_STARTED || pr->version >= 2) &&
		    (f < F_MAPPED || pr->version >= 3)) {
			char msg[80];
			snprintf(msg, sizeof msg, "missing member \"%s\"",
			         field_names[f]);
			bad(&r, msg);
		}
	if (pr->interval == 0)
		bad(&r, "the interval is 0");
	if (pr->sampled_allocs > pr->allocs)
		bad(&r, "more sampled allocations than allocations");
	if (pr->samples && pr->samples > UINT64_MAX / pr->interval)
		bad(&r, "samples times interval overflows");
	/* The histogram must account for the allocations. */
	uint64_t hc = 0, hs = 0;
	for (int i = 0; i < NBUCKETS; i++)
		if (__builtin_add_overflow(hc, pr->hist[i], &hc) ||
		    __builtin_add_overflow(hs, pr->hist_sampled[i], &hs))
			bad(&r, "histogram counts overflow");
	if (hc != pr->allocs || hs != pr->sampled_allocs)
		bad(&r, "the histogram does not add up to the allocation "
		        "counts");
}

static void read_file(const char *path, struct proc *pr)
{
	/* O_NONBLOCK: a FIFO named like a statistics file must not wait for
	 * a writer; its type is refused just below. */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		ml__tool_usage_error(CMD, "cannot read %s: %s", path,
		                     strerror(errno));
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		ml__tool_usage_error(CMD, "%s: not a regular file", path);
	char *buf = malloc(MAX_FILE + 1);
	if (!buf)
		ml__tool_usage_error(CMD, "out of memory");
	size_t len = 0;
	for (;;) {
		ssize_t n = read(fd, buf + len, MAX_FILE + 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			ml__tool_usage_error(CMD, "cannot read %s: %s", path,
			                     strerror(errno));
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > MAX_FILE)
			ml__tool_usage_error(CMD, "%s: larger than %u bytes",
			                     path, MAX_FILE);
	}
	close(fd);
	parse_file(path, buf, len, pr);
	free(buf);
}

/* For memlimits accuracy (tools/cmd-accuracy.c): the bytes allocated and
 * the heap at exit of one statistics file, read by this file's reader, so
 * that the command has one JSON reader.  With --on-limit abort a stopped
 * run exits at the trip, so these are its figures there. */
void ml__stats_read_stop(const char *path, uint64_t *bytes, uint64_t *heap)
{
	struct proc *pr = ml__tool_calloc(CMD, 1, sizeof *pr);
	read_file(path, pr);
	*bytes = pr->bytes;
	*heap = pr->heap;
	free(pr);
}

/* ---- Table ------------------------------------------------------------ */

static void human(char *out, size_t cap, double d)
{
	static const char *const unit[] = {"B",   "KiB", "MiB", "GiB", "TiB",
	                                   "PiB", "EiB", "ZiB", "YiB"};
	int u = 0;
	while (d >= 1024 && u < 8)
		d /= 1024, u++;
	if (u == 0)
		snprintf(out, cap, "%.0f B", d);
	else
		snprintf(out, cap, "%.1f %s", d, unit[u]);
}

/* A program name from a file, as a table cell: at most 16 bytes, its
 * control characters escaped (never sent to the terminal raw), never cut
 * inside an escape or a character. */
static void program_cell(char out[17], const char *prog)
{
	size_t n = 0;
	for (const char *p = prog; *p;) {
		char e[8];
		unsigned used, k = ml__show_char(p, e, &used);
		if (n + k > 16)
			break;
		memcpy(out + n, e, k);
		n += k;
		p += used;
	}
	out[n] = 0;
}

static void row(const char *pid, const char *prog, uint64_t threads,
                uint64_t allocs, uint64_t bytes, uint64_t sampled,
                uint64_t samples, double est, double expected, uint64_t dry)
{
	char b[32], e[32];
	human(b, sizeof b, (double)bytes);
	human(e, sizeof e, est);
	char rate[32], ratio[32];
	if (allocs)
		snprintf(rate, sizeof rate, "%.4f%%",
		         100.0 * (double)sampled / (double)allocs);
	else
		snprintf(rate, sizeof rate, "-");
	if (expected > 0)
		snprintf(ratio, sizeof ratio, "%.3f",
		         (double)samples / expected);
	else
		snprintf(ratio, sizeof ratio, "-");
	printf("%-8s %-16s %7" PRIu64 " %12" PRIu64 " %11s %9" PRIu64
	       " %11s %9s %10s %8" PRIu64 "\n",
	       pid, prog, threads, allocs, b, samples, e, rate, ratio, dry);
}

static int by_pid(const void *a, const void *b)
{
	const struct proc *x = a, *y = b;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

static bool stats_name(const char *n)
{
	if (strncmp(n, "memlimits.", 10))
		return false;
	const char *p = n + 10;
	if (*p < '0' || *p > '9')
		return false;
	while (*p >= '0' && *p <= '9')
		p++;
	return !strcmp(p, ".json");
}

/* ---- Prometheus and OpenMetrics ---------------------------------------- */

/* The text goes to stdout through the library's writer of the format
 * (lib/util/prom.c).  The counters' families keep their _total in both
 * formats: Prometheus' OpenMetrics parser takes them so, and promtool
 * check metrics (which reads only the 0.0.4 text format) would find the
 * _total samples of a family named without it undocumented (issue 29
 * asks that promtool accept both). */
static void to_stdout(void *sink, const char *s, size_t n)
{
	fwrite(s, 1, n, sink);
}

/* The run's totals: the same families as ml_write_metrics(3), summed over
 * the processes (the gauges: the heap of each at exit, summed; the largest
 * global limit and shared usage).  Version 1 files count 0 for what they
 * lack. */
static void metrics(const struct proc *t, size_t n, bool om)
{
	const struct ml__prom p = {.put = to_stdout, .sink = stdout};
	ml__prom_one(&p, "memlimits_processes", "gauge",
	             "Processes of the run (statistics files read).", n);
	ml__prom_one(
	    &p, "memlimits_heap_bytes", "gauge",
	    "Heap in use by the run's processes at their exit, summed.",
	    t->heap);
	ml__prom_one(&p, "memlimits_mapped_bytes", "gauge",
	             "The part of that heap the processes mapped themselves, "
	             "summed.",
	             t->mapped);
	ml__prom_family(&p, "memlimits_global_limit_bytes", "gauge",
	                "The largest global limit of the run's processes; +Inf "
	                "when none set one.");
	if (t->glimit)
		ml__prom_sample(&p, "memlimits_global_limit_bytes", NULL,
		                t->glimit);
	else
		ml__prom_sample_text(&p, "memlimits_global_limit_bytes", NULL,
		                     "+Inf");
	ml__prom_one(&p, "memlimits_shared_usage_bytes", "gauge",
	             "The largest shared budget usage a process saw at exit.",
	             t->shared);
	ml__prom_one(&p, "memlimits_samples_total", "counter",
	             "Samples taken by the allocation slow path.", t->samples);
	ml__prom_one(
	    &p, "memlimits_tasks_started_total", "counter",
	    "Tasks started: ml_run calls and task objects (not slices).",
	    t->started);
	ml__prom_family(
	    &p, "memlimits_tasks_interrupted_total", "counter",
	    "Tasks interrupted, by the reason of the interruption.");
	/* t->intr in ml_status order, from ML_ALLOC_LIMIT. */
	static const char *const reasons[] = {
	    [ML_ALLOC_LIMIT] = "alloc_limit",
	    [ML_GLOBAL_LIMIT] = "global_limit",
	    [ML_CANCELLED] = "cancelled",
	    [ML_HELD_LIMIT] = "held_limit",
	};
	for (int st = ML_ALLOC_LIMIT; st <= ML_HELD_LIMIT; st++) {
		const struct ml__prom_label l[] = {{"reason", reasons[st]},
		                                   {NULL, NULL}};
		ml__prom_sample(&p, "memlimits_tasks_interrupted_total", l,
		                t->intr[st - ML_ALLOC_LIMIT]);
	}
	ml__prom_one(&p, "memlimits_pressure_callbacks_total", "counter",
	             "Calls of the pressure callback.", t->pressure);
	if (om)
		printf("# EOF\n");
}

static int stats_main(int argc, char **argv)
{
	if (argc == 2 &&
	    (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("Usage: memlimits stats DIR [--format "
		       "table|prometheus|openmetrics]\n\n"
		       "Merge the files memlimits.PID.json that 'memlimits "
		       "run --stats DIR' wrote\n(one per process) into one "
		       "table: a row per process and the total.\n"
		       "Columns: allocations and bytes counted, samples "
		       "taken, the estimate\nsamples x interval, the "
		       "fraction of allocations sampled, samples over\n"
		       "expected samples (bytes / interval: near 1), and "
		       "windows of 100000\nconsecutive allocations of a "
		       "thread without a sample.\n"
		       "--format prometheus (text format 0.0.4) or "
		       "openmetrics: the run's totals\nas metrics, the "
		       "families of ml_write_metrics(3).\n");
		return ML__TOOL_OK;
	}
	const char *dir = NULL, *format = "table";
	bool opts = true;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (opts && !strcmp(a, "--")) {
			opts = false;
		} else if (opts && !strcmp(a, "--format")) {
			if (++i >= argc)
				ml__tool_usage_error(CMD, "--format needs a "
				                          "value");
			format = argv[i];
		} else if (opts && !strncmp(a, "--format=", 9)) {
			format = a + 9;
		} else if (opts && a[0] == '-' && a[1]) {
			ml__tool_usage_error(CMD, "unknown option '%s'", a);
		} else if (dir) {
			ml__tool_usage_error(CMD, "unexpected argument '%s'",
			                     a);
		} else {
			dir = a;
		}
	}
	if (!dir)
		ml__tool_usage_error(CMD, "missing directory (memlimits stats "
		                          "DIR)");
	int fmt = !strcmp(format, "table")         ? 0
	          : !strcmp(format, "prometheus")  ? 1
	          : !strcmp(format, "openmetrics") ? 2
	                                           : -1;
	if (fmt < 0)
		ml__tool_usage_error(CMD,
		                     "unknown format '%s' (table, prometheus, "
		                     "openmetrics)",
		                     format);
	DIR *d = opendir(dir);
	if (!d)
		ml__tool_usage_error(CMD, "cannot read directory '%s': %s", dir,
		                     strerror(errno));
	struct proc *procs = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!stats_name(de->d_name))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			procs = realloc(procs, cap * sizeof *procs);
			if (!procs)
				ml__tool_usage_error(CMD, "out of memory");
		}
		char *path;
		if (asprintf(&path, "%s/%s", dir, de->d_name) < 0)
			ml__tool_usage_error(CMD, "out of memory");
		read_file(path, &procs[n++]);
		free(path);
	}
	closedir(d);
	if (!n)
		ml__tool_usage_error(CMD, "no memlimits.*.json files in '%s'",
		                     dir);
	/* n > 0: procs is set (ml__tool_usage_error does not return). */
	// cppcheck-suppress nullPointer
	qsort(procs, n, sizeof *procs, by_pid);

	/* The totals first: a file that makes them overflow is refused
	 * before any row is printed. */
	struct proc tot = {0};
	double est = 0, expected = 0;
	for (size_t k = 0; k < n; k++) {
		const struct proc *p = &procs[k];
		/* Sums of 64-bit counts can overflow only with forged files. */
		if (__builtin_add_overflow(tot.threads, p->threads,
		                           &tot.threads) ||
		    __builtin_add_overflow(tot.allocs, p->allocs,
		                           &tot.allocs) ||
		    __builtin_add_overflow(tot.bytes, p->bytes, &tot.bytes) ||
		    __builtin_add_overflow(tot.sampled_allocs,
		                           p->sampled_allocs,
		                           &tot.sampled_allocs) ||
		    __builtin_add_overflow(tot.samples, p->samples,
		                           &tot.samples) ||
		    __builtin_add_overflow(tot.dry, p->dry, &tot.dry))
			ml__tool_usage_error(CMD, "the totals overflow");
		for (int j = 0; j < 4; j++)
			if (__builtin_add_overflow(tot.intr[j], p->intr[j],
			                           &tot.intr[j]))
				ml__tool_usage_error(CMD,
				                     "the totals overflow");
		if (__builtin_add_overflow(tot.started, p->started,
		                           &tot.started) ||
		    __builtin_add_overflow(tot.pressure, p->pressure,
		                           &tot.pressure) ||
		    __builtin_add_overflow(tot.heap, p->heap, &tot.heap) ||
		    __builtin_add_overflow(tot.mapped, p->mapped, &tot.mapped))
			ml__tool_usage_error(CMD, "the totals overflow");
		if (p->glimit > tot.glimit)
			tot.glimit = p->glimit;
		if (p->shared > tot.shared)
			tot.shared = p->shared;
		tot.version =
		    p->version > tot.version ? p->version : tot.version;
		est += (double)p->samples * (double)p->interval;
		expected += (double)p->bytes / (double)p->interval;
	}

	if (fmt) {
		metrics(&tot, n, fmt == 2);
		free(procs);
		return fflush(stdout) == 0 ? ML__TOOL_OK : 1;
	}
	printf("%-8s %-16s %7s %12s %11s %9s %11s %9s %10s %8s\n", "PID",
	       "PROGRAM", "THREADS", "ALLOCATIONS", "BYTES", "SAMPLES",
	       "ESTIMATE", "SAMPLED", "SAMP/EXP", "DRY-WIN");
	for (size_t k = 0; k < n; k++) {
		const struct proc *p = &procs[k];
		char pid[24], prog[17];
		snprintf(pid, sizeof pid, "%" PRIu64, p->pid);
		const char *base = strrchr(p->program, '/');
		base = base ? base + 1 : (*p->program ? p->program : "?");
		program_cell(prog, base);
		row(pid, prog, p->threads, p->allocs, p->bytes,
		    p->sampled_allocs, p->samples,
		    (double)p->samples * (double)p->interval,
		    (double)p->bytes / (double)p->interval, p->dry);
	}
	/* Whole, even past the column's 16 (10 000 processes and more). */
	char label[40];
	snprintf(label, sizeof label, "(%zu process%s)", n, n == 1 ? "" : "es");
	row("TOTAL", label, tot.threads, tot.allocs, tot.bytes,
	    tot.sampled_allocs, tot.samples, est, expected, tot.dry);
	free(procs);
	return fflush(stdout) == 0 ? ML__TOOL_OK : 1;
}

const struct ml__tool_cmd ml__tool_cmd_stats = {
    .name = "stats",
    .synopsis = synopsis,
    .summary = "merge the statistics files of a run into one table",
    .main = stats_main,
};
