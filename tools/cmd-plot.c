/* memlimits plot TIMELINE [-o OUT.svg]: a timeline (`memlimits run
 * --timeline`, lib/run/timeline.c; its format is in memlimits(1)) as a
 * standalone SVG chart: the heap of each process over time, one line per
 * pid, a dashed line for each limit (labelled with its value), a marker
 * where a limit was reached (hover it for the figures).  Held bytes are
 * drawn too (dotted, in the process's colour) when the run had a held
 * limit, the one they are compared with; the part of the heap the program
 * mapped itself (mapped_bytes, issue 34) dashed, when there is one.
 *
 * The reader is strict: comment lines ("# key value"; unknown keys are
 * skipped), the header row, and rows of 5 tab-separated fields (4 where
 * the empty event's tab is missing), or 6 (5) when the header has
 * mapped_bytes before the event (0.4; 0.3's files have none).  Anything else
 * stops the command with its line number, status 2, nothing written. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util/parse.h"
#include "svg.h"
#include "tool.h"

#define CMD "plot"

static const char synopsis[] = "[-o OUT.svg] [--title TEXT] TIMELINE";

/* The picture's geometry, in pixels. */
#define WIDTH 960.0
#define HEIGHT 540.0
#define LEFT 84.0   /* y tick labels */
#define RIGHT 28.0  /* margin */
#define TOP 66.0    /* title, subtitle */
#define BOTTOM 96.0 /* x ticks, axis title, legend */
#define LEGEND_MAX 8

enum { EV_NONE, EV_ALLOC, EV_HEAP, EV_HELD, EV_EXIT };
static const char *const ev_names[] = {"", "alloc_limit", "heap_limit",
                                       "held_limit", "exit"};
static const char *const ev_text[] = {"", "allocation limit", "heap limit",
                                      "held limit", "exit"};

struct row {
	uint64_t pid;
	double t;
	uint64_t heap, held; /* held: UINT64_MAX where not tracked */
	uint64_t mapped;     /* UINT64_MAX in a file without the column */
	int event;
};
static struct row *rows;
static size_t nrows, rows_cap;

/* Limits from the comments: UINT64_MAX where not set. */
static uint64_t limit[4] = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
static char program[512];

static _Noreturn void bad_line(const char *file, uint64_t line, const char *why)
{
	ml__tool_usage_error(CMD, "%s: line %" PRIu64 ": %s", file, line, why);
}

static bool u64_field(const char *s, uint64_t *out)
{
	return *s && strspn(s, "0123456789") == strlen(s) &&
	       ml__parse_u64(s, out) == 0;
}

/* Seconds since the program started: a run of 31 years at most, so that
 * the axis, its ticks and the figures in the text stay finite and short
 * (a 300-digit field overran the subtitle; 1.78e308 made the axis
 * infinite). */
#define SECONDS_MAX 1e9

static bool seconds_field(const char *s, double *out)
{
	if (!*s || strspn(s, "0123456789.") != strlen(s))
		return false;
	char *end;
	errno = 0;
	*out = strtod(s, &end);
	return !*end && !errno && isfinite(*out);
}

static void comment(const char *file, uint64_t line, char *s)
{
	char *key = s + 1 + strspn(s + 1, " ");
	char *sp = strchr(key, ' ');
	if (!sp)
		return;
	*sp = 0;
	const char *v = sp + 1;
	for (int i = EV_ALLOC; i <= EV_HELD; i++) {
		if (strcmp(key, ev_names[i]))
			continue;
		if (!u64_field(v, &limit[i]))
			bad_line(file, line,
			         "a limit that is not a byte count");
		return;
	}
	if (!strcmp(key, "program"))
		snprintf(program, sizeof program, "%s", v);
}

/* The line read, kept here between lines (and reachable when a bad line
 * ends the command: the fuzz target frees it). */
static char *text;
static size_t text_cap;
static bool with_mapped; /* the header names mapped_bytes */

static void read_timeline(const char *file, FILE *f)
{
	uint64_t line = 0;
	while (ml__svg_read_line(CMD, file, f, &text, &text_cap, &line) >= 0) {
		char *s = text;
		if (!*s)
			continue;
		if (s[0] == '#') {
			comment(file, line, s);
			continue;
		}
		if (!strncmp(s, "pid\t", 4)) {
			/* The header: 0.4's has mapped_bytes. */
			with_mapped = strstr(s, "\tmapped_bytes\t") != NULL;
			continue;
		}
		char *field[6];
		int n = 0;
		for (char *p = s; n < 6; n++) {
			field[n] = p;
			char *tab = strchr(p, '\t');
			if (!tab) {
				n++;
				break;
			}
			*tab = 0;
			p = tab + 1;
		}
		int m = with_mapped; /* the event's field is one later */
		if (n < 4 + m || n > 5 + m)
			bad_line(file, line,
			         m ? "expected 6 tab-separated fields: pid, "
			             "seconds, heap_bytes, held_bytes, "
			             "mapped_bytes, event"
			           : "expected 5 tab-separated fields: pid, "
			             "seconds, heap_bytes, held_bytes, event");
		struct row r = {.event = EV_NONE};
		if (!u64_field(field[0], &r.pid))
			bad_line(file, line, "the pid is not a number");
		if (!seconds_field(field[1], &r.t))
			bad_line(file, line, "the seconds are not a number");
		if (r.t > SECONDS_MAX)
			bad_line(file, line,
			         "the seconds are beyond 10^9 (31 years)");
		if (!u64_field(field[2], &r.heap))
			bad_line(file, line, "heap_bytes is not a byte count");
		r.held = UINT64_MAX;
		if (*field[3] && !u64_field(field[3], &r.held))
			bad_line(file, line, "held_bytes is not a byte count");
		r.mapped = UINT64_MAX;
		if (m && !u64_field(field[4], &r.mapped))
			bad_line(file, line,
			         "mapped_bytes is not a byte count");
		if (n == 5 + m && *field[4 + m]) {
			r.event = -1;
			for (int i = EV_ALLOC; i <= EV_EXIT; i++)
				if (!strcmp(field[4 + m], ev_names[i]))
					r.event = i;
			if (r.event < 0)
				bad_line(file, line,
				         "unknown event (alloc_limit, "
				         "heap_limit, held_limit or exit)");
		}
		if (nrows == rows_cap) {
			rows_cap = rows_cap ? 2 * rows_cap : 1024;
			rows = realloc(rows, rows_cap * sizeof *rows);
			if (!rows)
				ml__tool_usage_error(CMD, "out of memory");
		}
		rows[nrows++] = r;
	}
	free(text);
	text = NULL;
	text_cap = 0;
	if (!nrows)
		ml__tool_usage_error(CMD,
		                     "%s: no rows (not a timeline, or the "
		                     "program wrote none)",
		                     file);
}

/* ---- Drawing ---------------------------------------------------------- */

static double tmax, ymax, ystep, yunit;
static const char *yunit_name;

static double px(double t)
{
	return LEFT + (WIDTH - LEFT - RIGHT) * t / tmax;
}

static double py(double v)
{
	return HEIGHT - BOTTOM - (HEIGHT - TOP - BOTTOM) * v / ymax;
}

/* By pid, then time: rows of one process in order (threads may write
 * theirs slightly out of order), processes in the order they started. */
static int by_pid_time(const void *a, const void *b)
{
	const struct row *x = a, *y = b;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

/* Colours that tell lines apart (Tableau 10), limits in their own. */
static const char *const palette[] = {"#1f77b4", "#2ca02c", "#ff7f0e",
                                      "#17becf", "#8c564b", "#e377c2",
                                      "#bcbd22", "#7f7f7f", "#9467bd"};
#define NPALETTE (sizeof palette / sizeof palette[0])
static const char *const limit_colour[] = {"", "#555555", "#d62728", "#9467bd"};

static void tick_label(char *buf, size_t cap, double v)
{
	snprintf(buf, cap, "%g %s", v / yunit, yunit_name);
}

/* Ticks on an axis: about 6 or 8 (ml__svg_step), never more than this
 * whatever the scale's arithmetic does. */
#define TICKS_MAX 64

static void axes(FILE *f)
{
	double x0 = LEFT, x1 = WIDTH - RIGHT, y0 = HEIGHT - BOTTOM, y1 = TOP;
	char b[64];
	int n = 0;
	for (double v = 0; v <= ymax * (1 + 1e-9) && n++ < TICKS_MAX;
	     v += ystep) {
		double y = py(v);
		ml__svg_line(f, x0, y, x1, y, "#e4e4e4", 1, NULL);
		tick_label(b, sizeof b, v);
		ml__svg_text(f, x0 - 8, y + 4, "end", 12, "#333333", NULL, "%s",
		             b);
	}
	double xstep = ml__svg_step(tmax, 8);
	n = 0;
	for (double t = 0; t <= tmax * (1 + 1e-9) && n++ < TICKS_MAX;
	     t += xstep) {
		double x = px(t);
		ml__svg_line(f, x, y1, x, y0, "#ececec", 1, NULL);
		ml__svg_line(f, x, y0, x, y0 + 5, "#333333", 1, NULL);
		ml__svg_text(f, x, y0 + 20, "middle", 12, "#333333", NULL,
		             "%g s", fabs(t) < xstep / 2 ? 0 : t);
	}
	ml__svg_line(f, x0, y0, x1, y0, "#333333", 1, NULL);
	ml__svg_line(f, x0, y0, x0, y1, "#333333", 1, NULL);
	ml__svg_text(f, (x0 + x1) / 2, y0 + 40, "middle", 12, "#333333", NULL,
	             "seconds since the program started");
}

static void limit_line(FILE *f, int i)
{
	if (limit[i] == UINT64_MAX || (double)limit[i] > ymax)
		return;
	char b[32];
	ml__svg_bytes(b, sizeof b, (double)limit[i]);
	double y = py((double)limit[i]);
	ml__svg_group(f, "%s %s (%" PRIu64 " bytes)", ev_text[i], b, limit[i]);
	ml__svg_line(f, LEFT, y, WIDTH - RIGHT, y, limit_colour[i], 1.5, "7 5");
	/* At the left, where the heap is still low (markers are where it
	 * reaches the line, later). */
	ml__svg_text(f, LEFT + 8, y - 6, "start", 12, limit_colour[i], "bold",
	             "%s %s", ev_text[i], b);
	ml__svg_group_end(f);
}

/* Which series of a process: its heap, held bytes, mapped bytes. */
enum { S_HEAP, S_HELD, S_MAPPED };

static void process_line(FILE *f, const struct row *r, size_t n,
                         const char *colour, int which)
{
	bool held = which != S_HEAP;
	double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
	if (!x || !y)
		ml__tool_usage_error(CMD, "out of memory");
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t v = which == S_HELD     ? r[i].held
		             : which == S_MAPPED ? r[i].mapped
		                                 : r[i].heap;
		if (v == UINT64_MAX)
			continue;
		double xi = px(r[i].t);
		double yi = py((double)v);
		/* Points closer than half a pixel to the last add nothing
		 * (a timeline of hours has a row per 10 ms); the last one
		 * is kept. */
		if (k && i + 1 < n && fabs(xi - x[k - 1]) < 0.5 &&
		    fabs(yi - y[k - 1]) < 0.5)
			continue;
		x[k] = xi;
		y[k] = yi;
		k++;
	}
	if (k == 1)
		ml__svg_circle(f, x[0], y[0], 2.5, colour, NULL);
	else if (k > 1)
		ml__svg_polyline(f, x, y, k, colour, held ? 1.2 : 2,
		                 which == S_HELD     ? "1.5 3"
		                 : which == S_MAPPED ? "6 3"
		                                     : NULL);
	free(x);
	free(y);
}

/* A marker where a limit was reached; one per pixel and pid. */
static void markers(FILE *f, const struct row *r, size_t n, bool *labelled)
{
	double lastx = -100, lasty = -100;
	for (size_t i = 0; i < n; i++) {
		int e = r[i].event;
		if (e < EV_ALLOC || e > EV_HELD)
			continue;
		double x = px(r[i].t), y = py((double)r[i].heap);
		if (fabs(x - lastx) < 3 && fabs(y - lasty) < 3)
			continue;
		lastx = x, lasty = y;
		char b[32];
		ml__svg_bytes(b, sizeof b, (double)r[i].heap);
		ml__svg_group(f,
		              "pid %" PRIu64 ": the %s reached at %.3f s "
		              "(heap %s)",
		              r[i].pid, ev_text[e], r[i].t, b);
		ml__svg_circle(f, x, y, 6, "#ffffff", limit_colour[e]);
		ml__svg_line(f, x - 3.5, y - 3.5, x + 3.5, y + 3.5,
		             limit_colour[e], 2, NULL);
		ml__svg_line(f, x - 3.5, y + 3.5, x + 3.5, y - 3.5,
		             limit_colour[e], 2, NULL);
		if (!labelled[e]) {
			/* The first of each kind says what it is, on the
			 * side with room: left of it in the right half. */
			bool left = x > LEFT + (WIDTH - LEFT - RIGHT) / 2;
			/* Above the marker: the heap seldom passes the
			 * limit it reached. */
			ml__svg_text(f, left ? x - 10 : x + 10, y - 10,
			             left ? "end" : "start", 12,
			             limit_colour[e], "bold", "%s reached",
			             ev_text[e]);
			labelled[e] = true;
		}
		ml__svg_group_end(f);
	}
}

/* vsnprintf at buf[*k], *k moved to the end: at most cap - 1 (the text
 * cut there), where k += snprintf(...) went past it and the next call
 * wrote beyond buf. */
__attribute__((format(printf, 4, 5))) static void
append(char *buf, size_t cap, size_t *k, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf + *k, cap - *k, fmt, ap);
	va_end(ap);
	if (n > 0)
		*k = (size_t)n < cap - *k ? *k + (size_t)n : cap - 1;
}

static void help(void)
{
	printf("Usage: memlimits plot %s\n\n", synopsis);
	printf("Draw a timeline (memlimits run --timeline FILE) as a "
	       "standalone SVG chart:\nthe heap of each process over time, a "
	       "dashed line for each limit, a marker\nwhere one was reached "
	       "(memlimits(1)).\n\n"
	       "  -o, --output FILE  write the SVG to FILE (default: "
	       "TIMELINE.svg; '-': stdout,\n"
	       "                     the default when TIMELINE is '-', "
	       "stdin)\n"
	       "  --title TEXT       the chart's title (default: \"Heap over "
	       "time: PROGRAM\")\n\n"
	       "Exit status: 0; 2 on bad usage or bad input (one line on "
	       "stderr, nothing\nwritten).\n");
}

/* The chart of the rows read, into o (shown: the input's name, for the
 * default title).  The fuzz target calls it too. */
static void plot(FILE *o, const char *title, const char *shown)
{
	qsort(rows, nrows, sizeof *rows, by_pid_time);

	/* The scales: every row, and the limits that fit. */
	tmax = 0;
	double top = 0;
	bool any_held = false, any_mapped = false;
	size_t npids = 0;
	for (size_t i = 0; i < nrows; i++) {
		tmax = rows[i].t > tmax ? rows[i].t : tmax;
		top = (double)rows[i].heap > top ? (double)rows[i].heap : top;
		npids += !i || rows[i].pid != rows[i - 1].pid;
		any_held |= rows[i].held != UINT64_MAX;
		any_mapped |= rows[i].mapped != UINT64_MAX && rows[i].mapped;
	}
	bool draw_held = any_held && limit[EV_HELD] != UINT64_MAX;
	for (size_t i = 0; draw_held && i < nrows; i++)
		if (rows[i].held != UINT64_MAX && (double)rows[i].held > top)
			top = (double)rows[i].held;
	for (int i = EV_HEAP; i <= EV_HELD; i++)
		if (limit[i] != UINT64_MAX && (double)limit[i] > top)
			top = (double)limit[i];
	/* The allocation limit counts bytes allocated, not the heap: on
	 * the scale only when it does not flatten the heap. */
	bool alloc_off = limit[EV_ALLOC] != UINT64_MAX &&
	                 (double)limit[EV_ALLOC] > 3 * (top ? top : 1);
	if (limit[EV_ALLOC] != UINT64_MAX && !alloc_off &&
	    (double)limit[EV_ALLOC] > top)
		top = (double)limit[EV_ALLOC];
	if (top < 1024)
		top = 1024;
	tmax = tmax < 0.001 ? 0.001 : tmax * 1.02;
	static const char *const units[] = {"B",   "KiB", "MiB",
	                                    "GiB", "TiB", "PiB"};
	yunit = 1;
	yunit_name = units[0];
	for (int u = 1; u < 6 && top >= pow(1024, u); u++)
		yunit = pow(1024, u), yunit_name = units[u];
	ystep = ml__svg_step(top * 1.1 / yunit, 6) * yunit;
	ymax = ceil(top * 1.1 / ystep) * ystep;

	char *t = NULL;
	if (!title) {
		const char *base = strrchr(program, '/');
		base = base ? base + 1 : program;
		if (asprintf(&t, "Heap over time: %s", *base ? base : shown) <
		    0)
			ml__tool_usage_error(CMD, "out of memory");
		title = t;
	}
	ml__svg_begin(o, WIDTH, HEIGHT, title);
	ml__svg_text(o, WIDTH / 2, 26, "middle", 17, "#000000", "bold", "%s",
	             title);
	/* The subtitle: what is drawn, and the first limit reached. */
	const struct row *first = NULL;
	for (size_t i = 0; i < nrows; i++)
		if (rows[i].event >= EV_ALLOC && rows[i].event <= EV_HELD &&
		    (!first || rows[i].t < first->t))
			first = &rows[i];
	char peak[32], sub[256];
	ml__svg_bytes(peak, sizeof peak, top);
	size_t k = 0;
	append(sub, sizeof sub, &k, "%zu process%s", npids,
	       npids == 1 ? "" : "es");
	if (first)
		append(sub, sizeof sub, &k,
		       "; the %s was reached at %.2f s (pid %" PRIu64 ")",
		       ev_text[first->event], first->t, first->pid);
	else
		append(sub, sizeof sub, &k, "; no limit reached");
	if (alloc_off) {
		char b[32];
		ml__svg_bytes(b, sizeof b, (double)limit[EV_ALLOC]);
		append(sub, sizeof sub, &k,
		       "; allocation limit %s (bytes allocated, off this "
		       "scale)",
		       b);
	}
	ml__svg_text(o, WIDTH / 2, 46, "middle", 12, "#444444", NULL, "%s",
	             sub);
	axes(o);
	for (int i = EV_ALLOC; i <= EV_HELD; i++)
		limit_line(o, i);
	bool labelled[EV_EXIT + 1] = {false};
	size_t p = 0, shown_pids = 0;
	double lx = LEFT;
	for (size_t i = 0; i < nrows; i = p) {
		for (p = i; p < nrows && rows[p].pid == rows[i].pid; p++)
			;
		const char *c = palette[shown_pids % NPALETTE];
		ml__svg_group(o, "pid %" PRIu64, rows[i].pid);
		process_line(o, rows + i, p - i, c, S_HEAP);
		if (draw_held)
			process_line(o, rows + i, p - i, c, S_HELD);
		if (any_mapped)
			process_line(o, rows + i, p - i, c, S_MAPPED);
		markers(o, rows + i, p - i, labelled);
		ml__svg_group_end(o);
		/* The legend, under the axis title. */
		double ly = HEIGHT - 28;
		if (shown_pids < LEGEND_MAX) {
			ml__svg_line(o, lx, ly - 4, lx + 22, ly - 4, c, 2.5,
			             NULL);
			ml__svg_text(o, lx + 28, ly, "start", 12, "#333333",
			             NULL, "pid %" PRIu64, rows[i].pid);
			lx += 28 +
			      7.2 * (4 + snprintf(NULL, 0, "%" PRIu64,
			                          rows[i].pid)) +
			      18;
		} else if (shown_pids == LEGEND_MAX) {
			ml__svg_text(o, lx, ly, "start", 12, "#333333", NULL,
			             "and %zu more", npids - LEGEND_MAX);
		}
		shown_pids++;
	}
	if (draw_held || any_mapped)
		ml__svg_text(o, WIDTH - RIGHT, HEIGHT - 24, "end", 12,
		             "#333333", NULL, "solid: heap%s%s",
		             any_mapped ? "; dashed: of it mapped" : "",
		             draw_held ? "; dotted: held (estimated)" : "");
	ml__svg_end(o);
	free(t);
}

static int plot_main(int argc, char **argv)
{
	const char *out = NULL, *title = NULL;
	const char *in =
	    ml__svg_args(CMD, "TIMELINE", argc, argv, help, &out, &title);
	if (!in)
		return ML__TOOL_OK;
	const char *shown = strcmp(in, "-") ? in : "stdin";
	FILE *f = ml__svg_open_in(CMD, in);
	read_timeline(shown, f);
	if (f != stdin)
		fclose(f);
	const char *outname = ml__svg_out_name(in, out);
	FILE *o = ml__svg_open_out(CMD, outname);
	plot(o, title, shown);
	ml__svg_close_out(CMD, o, outname);
	free(rows);
	return ML__TOOL_OK;
}

const struct ml__tool_cmd ml__tool_cmd_plot = {
    .name = "plot",
    .synopsis = synopsis,
    .summary = "draw a timeline of a run (--timeline) as an SVG chart",
    .main = plot_main,
};
