/* Output without stdio: the library's one writer (struct ml__out, which
 * the report and the statistics use too) and diagnostics, formatted into
 * a stack buffer and written with write(2).
 * Understands %s %c %d %u %ld %lu %lld %llu %zu %x %lx %llx %p %%, which is
 * all the library prints.  A %s argument is a value from outside: its
 * control characters are escaped.  The line always ends with a newline. */
#include "util/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

int ml__out_write(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t w = write(fd, buf, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return w < 0 ? errno : EIO;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

void ml__out_flush(struct ml__out *o, size_t upto)
{
	if (!o->err)
		o->err = ml__out_write(o->fd, o->buf, upto);
	memmove(o->buf, o->buf + upto, o->len - upto);
	o->len -= upto;
	o->line -= upto;
}

void ml__out_put(struct ml__out *o, const char *s, size_t n)
{
	if (o->fd < 0) {
		if (o->cut || n > o->cap - o->len) {
			o->cut = true;
			return;
		}
		memcpy(o->buf + o->len, s, n);
		o->len += n;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		if (o->len == o->cap) {
			/* Whole lines go out together. */
			ml__out_flush(o, o->line ? o->line : o->len);
		}
		o->buf[o->len++] = s[i];
		if (s[i] == '\n')
			o->line = o->len;
	}
}

void ml__out_puts(struct ml__out *o, const char *s)
{
	ml__out_put(o, s, strlen(s));
}

void ml__out_u(struct ml__out *o, uint64_t v, unsigned base)
{
	char tmp[ML__UTOA_BYTES];
	ml__out_puts(o, ml__utoa(v, base, tmp));
}

void ml__out_x(struct ml__out *o, uint64_t v)
{
	ml__out_puts(o, "0x");
	ml__out_u(o, v, 16);
}

/* v/d with one decimal, rounded: "12.5". */
void ml__out_ratio(struct ml__out *o, uint64_t v, uint64_t d)
{
	if (!d) {
		ml__out_puts(o, "0.0");
		return;
	}
	unsigned __int128 tenths = ((unsigned __int128)v * 10 + d / 2) / d;
	ml__out_u(o, (uint64_t)(tenths / 10), 10);
	ml__out_puts(o, ".");
	ml__out_u(o, (uint64_t)(tenths % 10), 10);
}

/* "67108864 bytes (64.0 MiB)" */
void ml__out_human(struct ml__out *o, uint64_t v)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	if (v < 1024) {
		ml__out_u(o, v, 10);
		ml__out_puts(o, " bytes");
		return;
	}
	int u = 0;
	uint64_t d = 1024;
	while (u < 4 && v / d >= 1024) {
		d *= 1024;
		u++;
	}
	ml__out_ratio(o, v, d);
	ml__out_puts(o, " ");
	ml__out_puts(o, unit[u]);
}

void ml__out_size(struct ml__out *o, uint64_t v)
{
	ml__out_u(o, v, 10);
	ml__out_puts(o, " bytes");
	if (v < 1024)
		return;
	ml__out_puts(o, " (");
	ml__out_human(o, v);
	ml__out_puts(o, ")");
}

static void put(struct ml__out *o, char c)
{
	ml__out_put(o, &c, 1);
}

void ml__diag(const char *fmt, ...)
{
	/* Room is kept for "...\n": a message too long for the buffer is
	 * cut, says so, and still ends its line. */
	char buf[512];
	struct ml__out o = {.buf = buf, .cap = sizeof buf - 4, .fd = -1};
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
			/* Values from outside: control characters
			 * escaped, never sent to the terminal raw. */
			for (s = s ? s : "(null)"; *s;) {
				char e[8];
				unsigned used;
				ml__out_put(&o, e, ml__show_char(s, e, &used));
				s += used;
			}
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
				ml__out_u(&o, 0ull - (unsigned long long)v, 10);
			} else {
				ml__out_u(&o, (unsigned long long)v, 10);
			}
			break;
		}
		case 'u':
		case 'x':
			ml__out_u(&o,
			          lng ? va_arg(ap, unsigned long long)
			              : va_arg(ap, unsigned),
			          *fmt == 'x' ? 16 : 10);
			break;
		case 'p':
			put(&o, '0');
			put(&o, 'x');
			ml__out_u(&o, (uintptr_t)va_arg(ap, void *), 16);
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
	/* Past cap: the 4 bytes kept. */
	if (o.cut)
		for (const char *f = "..."; *f; f++)
			o.buf[o.len++] = *f;
	if (o.len && o.buf[o.len - 1] != '\n')
		o.buf[o.len++] = '\n';
	int fd = ml__diag_fd();
	if (fd >= 0) {
		ssize_t w = write(fd, o.buf, o.len);
		(void)w;
	}
}

/* Where diagnostics and a report on stderr go.  The stderr the process
 * started with is remembered (its device and inode), and copied only once
 * a report on stderr is due (a limit reached in run mode, or --report
 * /dev/stderr): a close-on-exec copy far above the low descriptors, so that
 * a program that closes stderr before exit (coreutils' close_stdout) still
 * gets its report and no child inherits it.  Until then the library holds
 * no descriptor at all: a program that lists every descriptor it has
 * (CPython's test_subprocess) sees only its own.  Before ml__diag_init runs
 * (an allocation before our constructor): fd 2. */
static bool err_known; /* stderr's identity was taken at start */
static bool err_none;  /* started without stderr: nowhere to write */
static _Atomic int err_copy = -1;
static dev_t err_dev;
static ino_t err_ino;

void ml__diag_init(void)
{
	struct stat st;
	if (fstat(2, &st) != 0) {
		err_none = true;
		return;
	}
	err_dev = st.st_dev;
	err_ino = st.st_ino;
	err_known = true;
}

/* fd is (still) the stderr the process started with. */
static bool is_start_stderr(int fd)
{
	struct stat st;
	return fstat(fd, &st) == 0 && st.st_dev == err_dev &&
	       st.st_ino == err_ino;
}

void ml__diag_keep(void)
{
	if (!err_known || atomic_load(&err_copy) >= 0 || !is_start_stderr(2))
		return;
	/* From 100 up, or lower when RLIMIT_NOFILE is small. */
	int lo = 100;
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur <= (rlim_t)lo * 2)
		lo = rl.rlim_cur > 20 ? (int)(rl.rlim_cur / 2) : 10;
	int fd = fcntl(2, F_DUPFD_CLOEXEC, lo), none = -1;
	/* Two threads reaching a limit at once: one copy is kept. */
	if (fd >= 0 && !atomic_compare_exchange_strong(&err_copy, &none, fd))
		close(fd);
}

int ml__diag_fd(void)
{
	if (err_none)
		return -1;
	if (!err_known)
		return 2;
	/* A program that closed a descriptor may have reused its number
	 * for a file of its own: never write into that. */
	int fd = atomic_load(&err_copy);
	if (fd >= 0)
		return is_start_stderr(fd) ? fd : -1;
	return is_start_stderr(2) ? 2 : -1;
}
