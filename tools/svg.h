/* The memlimits command's SVG writer, shared by `memlimits plot` and
 * `memlimits flamegraph` (Debian packages no flame graph renderer, so the
 * pictures are drawn here).  Standalone SVG 1.1: no script, no external
 * file, no font that must be installed (generic families only).
 *
 * Every piece of text from outside (frame names, file names, the
 * program's name) reaches the file through ml__svg_escape and nothing
 * else: <, >, &, quotes escaped; control characters and bytes that are
 * not UTF-8 replaced (XML 1.0 allows neither, even escaped). */
#ifndef ML_TOOLS_SVG_H
#define ML_TOOLS_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* The XML declaration, <svg> of w x h pixels with a white background, and
 * its <title> (shown by viewers as the document's name). */
void ml__svg_begin(FILE *f, double w, double h, const char *title);
void ml__svg_end(FILE *f);

/* s (n bytes), escaped for an attribute or text node. */
void ml__svg_escape(FILE *f, const char *s, size_t n);

/* A group whose hover text is title (printf format; NULL: no title), and
 * its end. */
void ml__svg_group(FILE *f, const char *title, ...)
    __attribute__((format(printf, 2, 3)));
void ml__svg_group_end(FILE *f);

/* A rectangle, filled with fill ("#e08030"); stroke NULL for none. */
void ml__svg_rect(FILE *f, double x, double y, double w, double h,
                  const char *fill, const char *stroke);
/* A line; dash NULL for solid, else a dasharray ("6 4"). */
void ml__svg_line(FILE *f, double x1, double y1, double x2, double y2,
                  const char *stroke, double width, const char *dash);
/* A polyline through n points (x[i], y[i]). */
void ml__svg_polyline(FILE *f, const double *x, const double *y, size_t n,
                      const char *stroke, double width, const char *dash);
/* A circle (markers). */
void ml__svg_circle(FILE *f, double cx, double cy, double r, const char *fill,
                    const char *stroke);

/* Text at (x, y), the baseline: anchor "start", "middle" or "end"; size
 * in pixels; weight "bold" or NULL.  The text is a printf format; what
 * would reach beyond the picture's sides (at ML__SVG_EM a character) is
 * cut and ends with "...". */
void ml__svg_text(FILE *f, double x, double y, const char *anchor, double size,
                  const char *fill, const char *weight, const char *fmt, ...)
    __attribute__((format(printf, 8, 9)));

/* Text is measured, where it must fit, at a mean advance of this much of
 * its size a character (DejaVu Sans, the first family asked for, has
 * 0.55 for lowercase letters, 0.64 for digits); tests/cli/svg-check.py
 * checks with the same figures that every text lies inside the picture. */
#define ML__SVG_EM 0.6
#define ML__SVG_EM_BOLD 0.66
/* Characters (not bytes) of UTF-8 s[0, n). */
size_t ml__svg_chars(const char *s, size_t n);
/* The width of `chars` characters of `size` pixels. */
double ml__svg_width(size_t chars, double size, bool bold);
/* The bytes of s[0, n) that fit w pixels: n, else fewer, with room left
 * for "..." (*cut set). */
size_t ml__svg_fit(const char *s, size_t n, double w, double size, bool bold,
                   bool *cut);

/* ---- Shared by the pictures ---- */

/* Bytes in binary units, 3 significant digits: "512 B", "1.50 KiB",
 * "200 MiB", "1.25 GiB". */
void ml__svg_bytes(char *buf, size_t cap, double v);
/* A "nice" step (1, 2 or 5 times a power of ten) for about n ticks over
 * [0, span]. */
double ml__svg_step(double span, int n);
/* FNV-1a of s[0, n): colours by name. */
uint32_t ml__svg_hash(const char *s, size_t n);

/* The input file ("-": stdin), or one line and status 2. */
FILE *ml__svg_open_in(const char *cmd, const char *path);
/* The longest line the pictures read: a stack of thousands of frames
 * fits, and /dev/zero or a file without line breaks is refused (each
 * byte of a line is kept until its end). */
#define ML__SVG_LINE_MAX (1u << 20)
/* The next line of f (file names it in messages; *line counts the lines)
 * into *buf, of *cap bytes, both kept between calls (free(*buf) after the
 * last): NUL-terminated, its end of line ("\n", "\r\n") removed.  Returns
 * its length, or -1 at the end of the file.  A line longer than
 * ML__SVG_LINE_MAX, a NUL byte or a read error is one line naming the line
 * and status 2, as soon as it is seen. */
ssize_t ml__svg_read_line(const char *cmd, const char *file, FILE *f,
                          char **buf, size_t *cap, uint64_t *line);
/* The two picture commands' arguments: [-o OUT] [--title T] [--held]
 * INPUT (what names the input in messages: "PROFILE", "TIMELINE";
 * --held only where held is not NULL).  Returns INPUT, or
 * NULL when --help was asked (help() has printed it); bad usage is one
 * line on stderr and status 2. */
const char *ml__svg_args(const char *cmd, const char *what, int argc,
                         char **argv, void (*help)(void), const char **out,
                         const char **title, bool *held);
/* The output's name: out, else IN.svg ("-", stdout, for an input "-"). */
const char *ml__svg_out_name(const char *in, const char *out);
/* The stream to draw into ("-": stdout), or one line and status 2.  It
 * is memory: nothing reaches out before ml__svg_close_out, so bad input
 * found while drawing, or a crash, leaves no file and writes nothing. */
FILE *ml__svg_open_out(const char *cmd, const char *out);
/* The picture written to out; a failure is one line and status 2, and the
 * file removed if this call created it. */
void ml__svg_close_out(const char *cmd, FILE *f, const char *out);

#endif
