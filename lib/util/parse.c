#include "util/parse.h"

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

static int is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int lower(char c)
{
	return (c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c;
}

static int streq_ci(const char *a, const char *b)
{
	for (; *a && *b; a++, b++)
		if (lower(*a) != lower(*b))
			return 0;
	return *a == *b;
}

int ml__parse_u64(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	unsigned base = 10;
	if (!s || !*s)
		return -1;
	if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X') && s[2]) {
		base = 16;
		s += 2;
	}
	for (; *s; s++) {
		int d;
		if (is_digit(*s))
			d = *s - '0';
		else if (base == 16 && lower(*s) >= 'a' && lower(*s) <= 'f')
			d = lower(*s) - 'a' + 10;
		else
			return -1;
		if (v > (UINT64_MAX - (uint64_t)d) / base)
			return -1;
		v = v * base + (uint64_t)d;
	}
	*out = v;
	return 0;
}

static const struct {
	const char *name;
	unsigned shift;
} units[] = {
    {"", 0},     {"b", 0},   {"k", 10},   {"kb", 10},  {"kib", 10},
    {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},   {"gb", 30},
    {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40},
};

/* floor(0.d[0]d[1]...d[n-1] * 2^sh) exactly, sh <= 40.  A result k means
 * k / 2^sh <= x, and k / 2^sh = k * 5^sh / 10^sh has at most sh decimal
 * places: only the first sh digits of x decide.  Doubling those sh times
 * in decimal shifts the bits out one by one. */
static uint64_t frac_floor(const char *d, size_t n, unsigned sh)
{
	unsigned char dig[40];
	for (unsigned i = 0; i < sh; i++)
		dig[i] = i < n ? (unsigned char)(d[i] - '0') : 0;
	uint64_t f = 0;
	for (unsigned b = 0; b < sh; b++) {
		unsigned carry = 0;
		for (unsigned i = sh; i-- > 0;) {
			unsigned v = dig[i] * 2u + carry;
			dig[i] = (unsigned char)(v % 10);
			carry = v / 10;
		}
		f = f << 1 | carry;
	}
	return f;
}

int ml__parse_size(const char *s, uint64_t *out)
{
	if (!s || !is_digit(*s))
		return -1; /* empty, blank, sign: all refused */
	/* Integer part exactly, then an optional fraction. */
	uint64_t whole = 0;
	const char *p = s;
	for (; is_digit(*p); p++) {
		if (whole > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -1;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	const char *frac = p;
	size_t nfrac = 0;
	if (*p == '.') {
		frac = ++p;
		if (!is_digit(*p))
			return -1;
		while (is_digit(*p))
			p++;
		nfrac = (size_t)(p - frac);
	}
	for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
		if (!streq_ci(p, units[i].name))
			continue;
		unsigned sh = units[i].shift;
		if (sh && whole > (UINT64_MAX >> sh))
			return -1;
		uint64_t v = whole << sh;
		/* Rounded down, in exact decimal: a limit is never above
		 * what was written (a double made 0.99999999999999999 one
		 * byte). */
		uint64_t f = frac_floor(frac, nfrac, sh);
		if (v > UINT64_MAX - f)
			return -1;
		*out = v + f;
		return 0;
	}
	return -1;
}

int ml__parse_limit(const char *s, uint64_t *out)
{
	uint64_t v;
	if (ml__parse_size(s, &v) != 0)
		return -1;
	if (v == UINT64_MAX)
		return ML__PARSE_NO_LIMIT;
	*out = v;
	return 0;
}

int ml__parse_percent(const char *s, uint64_t *out)
{
	if (!s || !is_digit(*s))
		return -1;
	uint64_t v = 0;
	const char *p = s;
	for (; is_digit(*p); p++) {
		v = v * 10 + (uint64_t)(*p - '0');
		if (v > 100)
			return -1; /* and no overflow below */
	}
	uint64_t unit = ML__PERCENT_UNIT;
	v *= unit;
	if (*p == '.') {
		if (!is_digit(*++p))
			return -1;
		for (; is_digit(*p); p++) {
			if (unit == 1)
				return -1; /* more than 9 decimals */
			unit /= 10;
			v += unit * (uint64_t)(*p - '0');
		}
	}
	if (p[0] != '%' || p[1] || v == 0 || v > 100ull * ML__PERCENT_UNIT)
		return -1;
	*out = v;
	return 0;
}

uint64_t ml__percent_of(uint64_t total, uint64_t pct)
{
	/* < 2^64 * 2^37: fits; the quotient is at most total. */
	return (uint64_t)((unsigned __int128)total * pct /
	                  (100ull * ML__PERCENT_UNIT));
}

int ml__parse_prob(const char *s, double *out)
{
	/* strtod would do, but it may consult the locale; this accepts
	 * d[.d][e[-]d] only. */
	if (!s || !*s)
		return -1;
	const char *p = s;
	double m = 0, scale = 1;
	int digits = 0;
	for (; is_digit(*p); p++, digits++)
		m = m * 10 + (*p - '0');
	if (*p == '.')
		for (p++; is_digit(*p); p++, digits++)
			m += (*p - '0') * (scale /= 10);
	if (!digits)
		return -1;
	if (*p == 'e' || *p == 'E') {
		p++;
		int neg = 0, e = 0;
		if (*p == '-' || *p == '+')
			neg = *p++ == '-';
		if (!is_digit(*p))
			return -1;
		for (; is_digit(*p); p++)
			if (e < 100000)
				e = e * 10 + (*p - '0');
		m *= pow(10.0, neg ? -e : e);
	}
	if (*p || !(m > 0 && m < 1))
		return -1;
	*out = m;
	return 0;
}

unsigned ml__show_char(const char *s, char out[8], unsigned *used)
{
	const unsigned char *u = (const unsigned char *)s;
	/* The length a well-formed UTF-8 sequence starting with u[0] has (no
	 * overlong form, surrogate or value past U+10FFFF); 0: none. */
	unsigned n = u[0] < 0x80                    ? 1
	             : u[0] >= 0xc2 && u[0] <= 0xdf ? 2
	             : u[0] >= 0xe0 && u[0] <= 0xef ? 3
	             : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4
	                                            : 0;
	for (unsigned i = 1; i < n; i++)
		if ((u[i] & 0xc0) != 0x80) /* the NUL ends it too */
			n = 0;
	if ((n == 3 && ((u[0] == 0xe0 && u[1] < 0xa0) ||
	                (u[0] == 0xed && u[1] >= 0xa0))) ||
	    (n == 4 &&
	     ((u[0] == 0xf0 && u[1] < 0x90) || (u[0] == 0xf4 && u[1] >= 0x90))))
		n = 0;
	bool control = n == 0 || (n == 1 && (u[0] < 0x20 || u[0] == 0x7f)) ||
	               (n == 2 && u[0] == 0xc2 && u[1] < 0xa0);
	*used = n ? n : 1;
	if (!control) {
		memcpy(out, s, n);
		return n;
	}
	for (unsigned i = 0; i < *used; i++) {
		out[4 * i] = '\\';
		out[4 * i + 1] = 'x';
		out[4 * i + 2] = "0123456789abcdef"[u[i] >> 4];
		out[4 * i + 3] = "0123456789abcdef"[u[i] & 15];
	}
	return 4 * *used;
}

char *ml__utoa(uint64_t v, unsigned base, char buf[ML__UTOA_BYTES])
{
	char *p = buf + ML__UTOA_BYTES - 1;
	*p = 0;
	do {
		*--p = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	return p;
}

/* ---- Shared budgets' names (lib/shared, tools/run-tree.c) ---------------- */

bool ml__shared_name_ok(const char *name)
{
	if (!name)
		return false;
	size_t n = 0;
	for (; name[n]; n++) {
		char c = name[n];
		if (n >= ML__SHARED_NAME_MAX ||
		    !((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		      c == '-'))
			return false;
	}
	/* "." and ".." would still be one object name under our prefix, but
	 * they read like paths: refused. */
	return n > 0 && strcmp(name, ".") && strcmp(name, "..");
}

bool ml__shared_object_name(const char *name, char *buf, size_t len)
{
	if (!ml__shared_name_ok(name) || len < 96)
		return false;
	char num[ML__UTOA_BYTES];
	size_t k = 0;
	static const char prefix[] = "/memlimits.";
	memcpy(buf, prefix, sizeof prefix - 1);
	k = sizeof prefix - 1;
	const char *d = ml__utoa((uint64_t)geteuid(), 10, num);
	size_t m = strlen(d);
	memcpy(buf + k, d, m);
	k += m;
	buf[k++] = '.';
	m = strlen(name);
	memcpy(buf + k, name, m + 1);
	return true;
}
