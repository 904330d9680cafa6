/* Diagnostics without stdio: format into a stack buffer, write(2) it.
 * Understands %s %c %d %u %ld %lu %lld %llu %zu %x %lx %llx %p %%, which is
 * all the library prints. */
#include "internal.h"

#include <stdarg.h>
#include <unistd.h>

struct out {
	char buf[512];
	size_t len;
};

static void put(struct out *o, char c)
{
	if (o->len < sizeof o->buf - 1)
		o->buf[o->len++] = c;
}

static void put_u(struct out *o, unsigned long long v, unsigned base)
{
	char tmp[24];
	int i = 0;
	do {
		tmp[i++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	while (i)
		put(o, tmp[--i]);
}

void ml__diag(const char *fmt, ...)
{
	struct out o = {.len = 0};
	va_list ap;
	va_start(ap, fmt);
	for (const char *f = "memlimits: "; *f; f++)
		put(&o, *f);
	for (; *fmt; fmt++) {
		if (*fmt != '%') {
			put(&o, *fmt);
			continue;
		}
		int lng = 0;
		while (*++fmt == 'l' || *fmt == 'z')
			lng = 1 + (*fmt == 'l' && lng);
		switch (*fmt) {
		case 's': {
			const char *s = va_arg(ap, const char *);
			for (s = s ? s : "(null)"; *s; s++)
				put(&o, *s);
			break;
		}
		case 'c':
			put(&o, (char)va_arg(ap, int));
			break;
		case 'd': {
			long long v =
			    lng ? va_arg(ap, long long) : va_arg(ap, int);
			if (v < 0) {
				put(&o, '-');
				put_u(&o, 0ull - (unsigned long long)v, 10);
			} else {
				put_u(&o, (unsigned long long)v, 10);
			}
			break;
		}
		case 'u':
		case 'x':
			put_u(&o,
			      lng ? va_arg(ap, unsigned long long)
			          : va_arg(ap, unsigned),
			      *fmt == 'x' ? 16 : 10);
			break;
		case 'p':
			put(&o, '0');
			put(&o, 'x');
			put_u(&o, (uintptr_t)va_arg(ap, void *), 16);
			break;
		case '%':
			put(&o, '%');
			break;
		default:
			put(&o, '?');
			if (!*fmt)
				fmt--;
		}
	}
	va_end(ap);
	if (o.len && o.buf[o.len - 1] != '\n')
		put(&o, '\n');
	ssize_t w = write(2, o.buf, o.len);
	(void)w;
}
