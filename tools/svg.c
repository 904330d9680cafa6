/* The SVG writer of memlimits plot and memlimits flamegraph (svg.h).
 * Numbers are written with at most two decimals: a picture a thousand
 * pixels wide needs no more, and it keeps large flame graphs small. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "svg.h"
#include "tool.h"

/* A coordinate: "12", "12.5", "12.25" (no trailing zeros); from 1e15 on,
 * where "%.2f" has more digits than a double, 15 significant digits
 * ("1e+31", not a fixed buffer's cut "1000..." read as "1"). */
static void num(FILE *f, double v)
{
	char b[32];
	if (!isfinite(v))
		v = 0;
	if (fabs(v) >= 1e15) {
		fprintf(f, "%.15g", v);
		return;
	}
	/* At most 19 characters, with the point. */
	snprintf(b, sizeof b, "%.2f", v);
	char *e = b + strlen(b);
	while (e[-1] == '0')
		*--e = 0;
	if (e[-1] == '.')
		*--e = 0;
	if (!strcmp(b, "-0"))
		strcpy(b, "0");
	fputs(b, f);
}

/* The length of the valid UTF-8 sequence at s (of at most n bytes), 0 if
 * none starts there. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t k;
	unsigned min;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		k = 2, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		k = 3, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		k = 4, min = 0x10000;
	else
		return 0;
	if (k > n)
		return 0;
	unsigned cp = c & (0x7f >> k);
	for (size_t i = 1; i < k; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, surrogates, beyond U+10FFFF, and U+FFFE/FFFF
	 * (not XML characters). */
	if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff ||
	    cp == 0xfffe || cp == 0xffff)
		return 0;
	return k;
}

/* The picture's width, for ml__svg_text to keep every text inside it. */
static double pic_w;

/* The one place where outside text is made safe for XML. */
void ml__svg_escape(FILE *f, const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + n;
	while (p < end) {
		unsigned c = *p;
		size_t k;
		switch (c) {
		case '<':
			fputs("&lt;", f);
			break;
		case '>':
			fputs("&gt;", f);
			break;
		case '&':
			fputs("&amp;", f);
			break;
		case '"':
			fputs("&quot;", f);
			break;
		case '\'':
			fputs("&#39;", f);
			break;
		case '\n':
			fputs("&#10;", f); /* line breaks in hover titles */
			break;
		default:
			if (c < 0x20 || c == 0x7f) {
				fputs("\xef\xbf\xbd", f); /* U+FFFD */
				break;
			}
			k = utf8_len(p, (size_t)(end - p));
			if (!k) {
				fputs("\xef\xbf\xbd", f);
				break;
			}
			fwrite(p, 1, k, f);
			p += k;
			continue;
		}
		p++;
	}
}

static void escape_fmt(FILE *f, const char *fmt, va_list ap)
{
	char *s = NULL;
	int n = vasprintf(&s, fmt, ap);
	if (n < 0)
		ml__tool_usage_error(NULL, "out of memory");
	ml__svg_escape(f, s, (size_t)n);
	free(s);
}

void ml__svg_begin(FILE *f, double w, double h, const char *title)
{
	pic_w = w;
	fputs("<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"yes\"?>\n"
	      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" "
	      "width=\"",
	      f);
	num(f, w);
	fputs("\" height=\"", f);
	num(f, h);
	fputs("\" viewBox=\"0 0 ", f);
	num(f, w);
	fputs(" ", f);
	num(f, h);
	fputs("\" font-family=\"DejaVu Sans, Verdana, Arial, sans-serif\">\n"
	      "<title>",
	      f);
	ml__svg_escape(f, title, strlen(title));
	fputs("</title>\n", f);
	ml__svg_rect(f, 0, 0, w, h, "#ffffff", NULL);
}

void ml__svg_end(FILE *f)
{
	fputs("</svg>\n", f);
}

void ml__svg_group(FILE *f, const char *title, ...)
{
	fputs("<g>", f);
	if (!title)
		return;
	fputs("<title>", f);
	va_list ap;
	va_start(ap, title);
	escape_fmt(f, title, ap);
	va_end(ap);
	fputs("</title>", f);
}

void ml__svg_group_end(FILE *f)
{
	fputs("</g>\n", f);
}

void ml__svg_rect(FILE *f, double x, double y, double w, double h,
                  const char *fill, const char *stroke)
{
	fputs("<rect x=\"", f);
	num(f, x);
	fputs("\" y=\"", f);
	num(f, y);
	fputs("\" width=\"", f);
	num(f, w);
	fputs("\" height=\"", f);
	num(f, h);
	fprintf(f, "\" fill=\"%s\"", fill);
	if (stroke)
		fprintf(f, " stroke=\"%s\"", stroke);
	fputs("/>", f);
}

static void stroke_attrs(FILE *f, const char *stroke, double width,
                         const char *dash)
{
	fprintf(f, " fill=\"none\" stroke=\"%s\" stroke-width=\"", stroke);
	num(f, width);
	fputs("\"", f);
	if (dash)
		fprintf(f, " stroke-dasharray=\"%s\"", dash);
}

void ml__svg_line(FILE *f, double x1, double y1, double x2, double y2,
                  const char *stroke, double width, const char *dash)
{
	fputs("<line x1=\"", f);
	num(f, x1);
	fputs("\" y1=\"", f);
	num(f, y1);
	fputs("\" x2=\"", f);
	num(f, x2);
	fputs("\" y2=\"", f);
	num(f, y2);
	fputs("\"", f);
	stroke_attrs(f, stroke, width, dash);
	fputs("/>\n", f);
}

void ml__svg_polyline(FILE *f, const double *x, const double *y, size_t n,
                      const char *stroke, double width, const char *dash)
{
	fputs("<polyline points=\"", f);
	for (size_t i = 0; i < n; i++) {
		if (i)
			fputs(i % 8 ? " " : "\n", f);
		num(f, x[i]);
		fputs(",", f);
		num(f, y[i]);
	}
	fputs("\"", f);
	stroke_attrs(f, stroke, width, dash);
	fputs(" stroke-linejoin=\"round\"/>\n", f);
}

void ml__svg_circle(FILE *f, double cx, double cy, double r, const char *fill,
                    const char *stroke)
{
	fputs("<circle cx=\"", f);
	num(f, cx);
	fputs("\" cy=\"", f);
	num(f, cy);
	fputs("\" r=\"", f);
	num(f, r);
	fprintf(f, "\" fill=\"%s\"", fill);
	if (stroke)
		fprintf(f, " stroke=\"%s\" stroke-width=\"1.5\"", stroke);
	fputs("/>", f);
}

size_t ml__svg_chars(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++)
		k += ((unsigned char)s[i] & 0xc0) != 0x80;
	return k;
}

double ml__svg_width(size_t chars, double size, bool bold)
{
	return (double)chars * size * (bold ? ML__SVG_EM_BOLD : ML__SVG_EM);
}

size_t ml__svg_fit(const char *s, size_t n, double w, double size, bool bold,
                   bool *cut)
{
	size_t chars = ml__svg_chars(s, n);
	*cut = false;
	if (ml__svg_width(chars, size, bold) <= w)
		return n;
	*cut = true;
	/* Room for the "..." that says so. */
	double room = w - ml__svg_width(3, size, bold);
	size_t keep =
	    room > 0 ? (size_t)(room / ml__svg_width(1, size, bold)) : 0;
	size_t i = 0, k = 0;
	for (; i < n; i++) {
		if (((unsigned char)s[i] & 0xc0) == 0x80)
			continue;
		if (k++ == keep)
			break;
	}
	return i;
}

void ml__svg_text(FILE *f, double x, double y, const char *anchor, double size,
                  const char *fill, const char *weight, const char *fmt, ...)
{
	char *s = NULL;
	va_list ap;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		ml__tool_usage_error(NULL, "out of memory");
	/* What lies beyond the picture's sides is cut, with "...": a name
	 * from outside (a program's, a file's) may be of any length. */
	double room = !strcmp(anchor, "start") ? pic_w - x
	              : !strcmp(anchor, "end") ? x
	                                       : 2 * fmin(x, pic_w - x);
	bool cut;
	size_t keep =
	    ml__svg_fit(s, (size_t)n, room - 2, size, weight != NULL, &cut);
	fputs("<text x=\"", f);
	num(f, x);
	fputs("\" y=\"", f);
	num(f, y);
	fputs("\" font-size=\"", f);
	num(f, size);
	fputs("\"", f);
	if (strcmp(anchor, "start"))
		fprintf(f, " text-anchor=\"%s\"", anchor);
	if (strcmp(fill, "#000000"))
		fprintf(f, " fill=\"%s\"", fill);
	if (weight)
		fprintf(f, " font-weight=\"%s\"", weight);
	fputs(">", f);
	ml__svg_escape(f, s, keep);
	if (cut)
		fputs("...", f);
	fputs("</text>", f);
	free(s);
}

void ml__svg_bytes(char *buf, size_t cap, double v)
{
	static const char *const units[] = {"B",   "KiB", "MiB", "GiB",
	                                    "TiB", "PiB", "EiB"};
	unsigned u = 0;
	while (fabs(v) >= 1024 && u < 6)
		v /= 1024, u++;
	if (u == 0 || fabs(v) >= 100 || v == floor(v))
		snprintf(buf, cap, "%.0f %s", v, units[u]);
	else if (fabs(v) >= 10)
		snprintf(buf, cap, "%.1f %s", v, units[u]);
	else
		snprintf(buf, cap, "%.2f %s", v, units[u]);
}

double ml__svg_step(double span, int n)
{
	if (!(span > 0) || n < 1)
		return 1;
	double raw = span / n, p = pow(10, floor(log10(raw)));
	double m = raw / p;
	return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

uint32_t ml__svg_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

/* ---- The pictures' files ---- */

FILE *ml__svg_open_in(const char *cmd, const char *path)
{
	if (!strcmp(path, "-"))
		return stdin;
	if (!*path)
		ml__tool_usage_error(cmd, "empty file name");
	FILE *f = fopen(path, "re");
	if (!f)
		ml__tool_usage_error(cmd, "cannot read '%s': %s", path,
		                     strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode))
		ml__tool_usage_error(cmd, "cannot read '%s': %s", path,
		                     strerror(EISDIR));
	return f;
}

const char *ml__svg_out_name(const char *in, const char *out)
{
	if (out)
		return out;
	if (!strcmp(in, "-"))
		return "-";
	char *p;
	if (asprintf(&p, "%s.svg", in) < 0)
		ml__tool_usage_error(NULL, "out of memory");
	return p;
}

ssize_t ml__svg_read_line(const char *cmd, const char *file, FILE *f,
                          char **buf, size_t *cap, uint64_t *line)
{
	size_t len = 0;
	int c;
	++*line;
	errno = 0;
	for (;;) {
		/* Room for one more byte and the NUL. */
		if (len + 2 > *cap) {
			size_t n = *cap ? 2 * *cap : 256;
			char *p = realloc(*buf, n);
			if (!p)
				ml__tool_usage_error(cmd, "out of memory");
			*buf = p, *cap = n;
		}
		c = getc_unlocked(f);
		if (c == EOF || c == '\n')
			break;
		if (!c)
			ml__tool_usage_error(cmd,
			                     "%s: line %" PRIu64 ": a NUL byte",
			                     file, *line);
		if (len == ML__SVG_LINE_MAX)
			ml__tool_usage_error(cmd,
			                     "%s: line %" PRIu64
			                     ": longer than "
			                     "%u bytes",
			                     file, *line, ML__SVG_LINE_MAX);
		(*buf)[len++] = (char)c;
	}
	if (c == EOF && ferror(f))
		ml__tool_usage_error(cmd, "cannot read '%s': %s", file,
		                     strerror(errno ? errno : EIO));
	if (c == EOF && !len)
		return -1;
	while (len && (*buf)[len - 1] == '\r')
		len--;
	(*buf)[len] = 0;
	return (ssize_t)len;
}

/* The picture, drawn into memory (ml__svg_open_out), and its size. */
static char *pic;
static size_t pic_len;

FILE *ml__svg_open_out(const char *cmd, const char *out)
{
	if (!*out)
		ml__tool_usage_error(cmd, "-o needs a file name");
	FILE *f = open_memstream(&pic, &pic_len);
	if (!f)
		ml__tool_usage_error(cmd, "out of memory");
	return f;
}

void ml__svg_close_out(const char *cmd, FILE *f, const char *out)
{
	bool mem_bad = ferror(f) != 0;
	if (fclose(f) != 0 || mem_bad) /* a memory stream fails for memory */
		ml__tool_usage_error(cmd, "out of memory");
	bool to_stdout = !strcmp(out, "-"), created = false;
	int fd = STDOUT_FILENO, err = 0;
	if (!to_stdout) {
		/* Whether the file is ours to remove if writing fails. */
		fd = open(out, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		created = fd >= 0;
		if (fd < 0 && errno == EEXIST)
			fd = open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			          0666);
		if (fd < 0)
			ml__tool_usage_error(cmd, "cannot write '%s': %s", out,
			                     strerror(errno));
	}
	/* errno read where the call that failed set it. */
	for (size_t done = 0; done < pic_len && !err;) {
		ssize_t n = write(fd, pic + done, pic_len - done);
		if (n > 0)
			done += (size_t)n;
		else if (n == 0)
			err = EIO;
		else if (errno != EINTR)
			err = errno;
	}
	if (!to_stdout && close(fd) != 0 && !err && errno != EINTR)
		err = errno;
	free(pic);
	pic = NULL;
	if (!err)
		return;
	if (created)
		unlink(out);
	ml__tool_usage_error(cmd, "cannot write '%s': %s",
	                     to_stdout ? "stdout" : out, strerror(err));
}

const char *ml__svg_args(const char *cmd, const char *what, int argc,
                         char **argv, void (*help)(void), const char **out,
                         const char **title, bool *held)
{
	static const struct option longopts[] = {
	    {"output", required_argument, NULL, 'o'},
	    {"title", required_argument, NULL, 'T'},
	    {"help", no_argument, NULL, 'h'},
	    {"held", no_argument, NULL, 'H'},
	    {NULL, 0, NULL, 0},
	};
	opterr = 0;
	optind = 1;
	for (;;) {
		int prev = optind;
		int c = getopt_long(argc, argv, ":o:h", longopts, NULL);
		if (c == -1)
			break;
		switch (c) {
		case 'o':
			*out = optarg;
			break;
		case 'T':
			*title = optarg;
			break;
		case 'h':
			help();
			return NULL;
		case 'H':
			if (held) {
				*held = true;
				break;
			}
			/* Not this command's. */
			ml__tool_option_error(cmd, '?', argc, argv, prev);
		default:
			ml__tool_option_error(cmd, c, argc, argv, prev);
		}
	}
	if (optind >= argc)
		ml__tool_usage_error(
		    cmd, "missing %s (memlimits %s [-o OUT.svg] %s)", what, cmd,
		    what);
	if (optind + 1 < argc)
		ml__tool_usage_error(cmd, "one %s only (got '%s' too)", what,
		                     argv[optind + 1]);
	return argv[optind];
}
