/* Diagnostics without stdio: format into a stack buffer, write(2) it.
 * Understands %s %c %d %u %ld %lu %lld %llu %zu %x %lx %llx %p %%, which is
 * all the library prints.  A %s argument is a value from outside: its
 * control characters are escaped.  The line always ends with a newline. */
#include "internal.h"
#include "parse.h"

#include <fcntl.h>
#include <stdarg.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

struct out {
	char buf[512];
	size_t len;
	bool cut;
};

/* Room is kept for "...\n": a message too long for the buffer is cut,
 * says so, and still ends its line. */
#define ROOM (sizeof((struct out *)0)->buf - 4)

static void put_n(struct out *o, const char *s, size_t n)
{
	if (o->cut || o->len + n > ROOM) {
		o->cut = true;
		return;
	}
	for (size_t i = 0; i < n; i++)
		o->buf[o->len++] = s[i];
}

static void put(struct out *o, char c)
{
	put_n(o, &c, 1);
}

static void put_u(struct out *o, unsigned long long v, unsigned base)
{
	char tmp[ML__UTOA_BYTES];
	const char *p = ml__utoa(v, base, tmp);
	put_n(o, p, (size_t)(tmp + sizeof tmp - 1 - p));
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
			/* Values from outside: control characters
			 * escaped, never sent to the terminal raw. */
			for (s = s ? s : "(null)"; *s;) {
				char e[8];
				unsigned used;
				put_n(&o, e, ml__show_char(s, e, &used));
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
	/* Past ROOM: the 4 bytes kept. */
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
