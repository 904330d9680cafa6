/* memlimits accuracy --plot: the runs' empirical CDF drawn over the
 * documented one, with the limit and the +-a band, through the command's
 * SVG writer (tools/svg.h) and the conventions of memlimits plot: a bold
 * title with a subtitle, axes with units, the legend inside the picture,
 * and the file written only once whole (ml__svg_close_out). */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "accuracy.h"
#include "svg.h"
#include "tool.h"

#define CMD "accuracy"
#define WIDTH 900.0
#define HEIGHT 560.0
#define LEFT 70.0
#define RIGHT 30.0
#define TOP 70.0
#define PLOT_H 400.0
#define CURVE 400

struct frame {
	double xmin, xmax;
};

static double px(const struct frame *fr, double v)
{
	return LEFT +
	       (v - fr->xmin) / (fr->xmax - fr->xmin) * (WIDTH - LEFT - RIGHT);
}

static double py(double p)
{
	return TOP + PLOT_H * (1 - p);
}

static void axes(FILE *f, const struct frame *fr)
{
	double x0 = LEFT, x1 = WIDTH - RIGHT, y0 = TOP + PLOT_H, y1 = TOP;
	char b[64];
	for (int i = 0; i <= 10; i += 2) {
		double y = py(i / 10.0);
		ml__svg_line(f, x0, y, x1, y, "#e4e4e4", 1, NULL);
		ml__svg_text(f, x0 - 8, y + 4, "end", 12, "#333333", NULL, "%g",
		             i / 10.0);
	}
	/* Ticks at round numbers of the binary unit the labels use (1 MiB,
	 * 0.5 MiB), not of bytes (5.72 MiB). */
	double unit = 1;
	while (fr->xmax / unit >= 1024 && unit < 0x1p60)
		unit *= 1024;
	double step = ml__svg_step((fr->xmax - fr->xmin) / unit, 8) * unit;
	int n = 0;
	for (double v = ceil(fr->xmin / step) * step;
	     v <= fr->xmax * (1 + 1e-12) && n++ < 64; v += step) {
		double x = px(fr, v);
		ml__svg_line(f, x, y1, x, y0, "#ececec", 1, NULL);
		ml__svg_line(f, x, y0, x, y0 + 5, "#333333", 1, NULL);
		ml__svg_bytes(b, sizeof b, v);
		ml__svg_text(f, x, y0 + 20, "middle", 12, "#333333", NULL, "%s",
		             b);
	}
	ml__svg_line(f, x0, y0, x1, y0, "#333333", 1, NULL);
	ml__svg_line(f, x0, y0, x0, y1, "#333333", 1, NULL);
	ml__svg_text(f, (x0 + x1) / 2, y0 + 40, "middle", 12, "#333333", NULL,
	             "where the limit stopped the run (bytes)");
	ml__svg_text(f, 16, TOP - 12, "start", 12, "#333333", NULL,
	             "P(stopped by then)");
}

static void vline(FILE *f, const struct frame *fr, double v, const char *colour,
                  const char *dash, const char *label)
{
	if (v < fr->xmin || v > fr->xmax)
		return;
	char b[32];
	ml__svg_bytes(b, sizeof b, v);
	ml__svg_group(f, "%s %s (%.0f bytes)", label, b, v);
	ml__svg_line(f, px(fr, v), TOP, px(fr, v), TOP + PLOT_H, colour, 1.5,
	             dash);
	ml__svg_group_end(f);
}

void ml__acc_plot(const char *out, const struct ml__acc_model *m,
                  const uint64_t *x, size_t n, double a, const char *title)
{
	FILE *f = ml__svg_open_out(CMD, out);
	double l = (double)m->limit;
	/* The range holds every stop, the band, and the law's 0.1 % to
	 * 99.9 %, so that neither picture is cut. */
	struct frame fr = {(double)x[0], (double)x[n - 1]};
	double lo = fmin((1 - a) * l, (double)ml__acc_quantile(m, 0.001));
	double hi = fmax((1 + a) * l, (double)ml__acc_quantile(m, 0.999));
	fr.xmin = fmin(fr.xmin, lo);
	fr.xmax = fmax(fr.xmax, hi);
	double pad = (fr.xmax - fr.xmin) * 0.03;
	fr.xmin = fmax(0, fr.xmin - pad);
	fr.xmax += pad;
	ml__svg_begin(f, WIDTH, HEIGHT, title);
	ml__svg_text(f, WIDTH / 2, 26, "middle", 17, "#000000", "bold", "%s",
	             title);
	char lb[32];
	ml__svg_bytes(lb, sizeof lb, l);
	ml__svg_text(f, WIDTH / 2, 46, "middle", 12, "#444444", NULL,
	             "%zu stops; limit %s, interval %llu bytes; band +-%g %%",
	             n, lb, (unsigned long long)m->interval, 100 * a);
	axes(f, &fr);
	double band0 = px(&fr, fmax(fr.xmin, (1 - a) * l)),
	       band1 = px(&fr, fmin(fr.xmax, (1 + a) * l));
	ml__svg_rect(f, band0, TOP, band1 - band0, PLOT_H, "#eef3fb", NULL);
	vline(f, &fr, (1 - a) * l, "#7090c0", "4 4", "(1-a) L");
	vline(f, &fr, (1 + a) * l, "#7090c0", "4 4", "(1+a) L");
	vline(f, &fr, l, "#c03030", "7 5", "the limit");
	double cx[CURVE + 1], cy[CURVE + 1];
	for (int i = 0; i <= CURVE; i++) {
		double v = fr.xmin + (fr.xmax - fr.xmin) * i / CURVE;
		cx[i] = px(&fr, v);
		cy[i] = py(ml__acc_cdf(m, v));
	}
	ml__svg_group(f, "the documented law (ml_bound_*)");
	ml__svg_polyline(f, cx, cy, CURVE + 1, "#303030", 2, "6 3");
	ml__svg_group_end(f);
	/* The empirical CDF as steps: two points a stop. */
	double *ex = ml__tool_calloc(CMD, 2 * n + 2, sizeof *ex),
	       *ey = ml__tool_calloc(CMD, 2 * n + 2, sizeof *ey);
	size_t k = 0;
	ex[k] = px(&fr, fr.xmin), ey[k++] = py(0);
	for (size_t i = 0; i < n; i++) {
		double xv = px(&fr, (double)x[i]);
		ex[k] = xv, ey[k++] = py((double)i / (double)n);
		ex[k] = xv, ey[k++] = py((double)(i + 1) / (double)n);
	}
	ex[k] = px(&fr, fr.xmax), ey[k++] = py(1);
	ml__svg_group(f, "the runs' stops (empirical CDF)");
	ml__svg_polyline(f, ex, ey, k, "#e08030", 2, NULL);
	ml__svg_group_end(f);
	free(ex);
	free(ey);
	/* The legend, inside the plot's upper left, where both curves are
	 * still near 0. */
	static const struct {
		const char *colour, *dash, *text;
	} legend[] = {
	    {"#e08030", NULL, "the runs (empirical CDF)"},
	    {"#303030", "6 3", "the bounds (documented law)"},
	    {"#c03030", "7 5", "the limit L"},
	    {"#7090c0", "4 4", "(1-a) L and (1+a) L"},
	};
	double y = TOP + 20;
	ml__svg_rect(f, LEFT + 10, TOP + 6, 240, 4 * 18 + 8, "#ffffff",
	             "#cccccc");
	for (size_t i = 0; i < sizeof legend / sizeof legend[0]; i++) {
		ml__svg_line(f, LEFT + 18, y - 4, LEFT + 40, y - 4,
		             legend[i].colour, 2.5, legend[i].dash);
		ml__svg_text(f, LEFT + 46, y, "start", 12, "#333333", NULL,
		             "%s", legend[i].text);
		y += 18;
	}
	ml__svg_end(f);
	ml__svg_close_out(CMD, f, out);
}
