/* libFuzzer target: the parsers of values from outside (lib/parse.c):
 * sizes, unsigned 64-bit integers and probabilities, as used by the
 * environment (MEMLIMITS_*) and the command line.  Each result is checked
 * against a slow reference written from the grammar in lib/parse.h, so an
 * off-by-one in an overflow check or a suffix shows as a crash, and ASan
 * catches any read past the string's end (the input is copied into a
 * buffer of exactly its length plus the NUL). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "parse.h"

#define CHECK(c)                 \
	do {                     \
		if (!(c))        \
			abort(); \
	} while (0)

static int lower(char c)
{
	return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
}

/* Reference for ml__parse_u64: decimal, or 0x followed by hex digits;
 * exact with 128-bit arithmetic. */
static int ref_u64(const char *s, uint64_t *out)
{
	unsigned base = 10;
	if (!*s)
		return -1;
	if (s[0] == '0' && lower(s[1]) == 'x' && s[2])
		base = 16, s += 2;
	unsigned __int128 v = 0;
	for (; *s; s++) {
		int c = lower(*s), d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else
			return -1;
		v = v * base + (unsigned)d;
		if (v > UINT64_MAX)
			return -1;
	}
	*out = (uint64_t)v;
	return 0;
}

/* Reference for the integer sizes (no fraction): digits, then one of the
 * suffixes, case-insensitive; exact with 128-bit arithmetic. */
static int ref_size_int(const char *s, uint64_t *out)
{
	static const char *const name[] = {"",    "b",  "k",   "kb", "kib",
	                                   "m",   "mb", "mib", "g",  "gb",
	                                   "gib", "t",  "tb",  "tib"};
	static const unsigned shift[] = {0,  0,  10, 10, 10, 20, 20,
	                                 20, 30, 30, 30, 40, 40, 40};
	unsigned __int128 v = 0;
	const char *p = s;
	if (!(*p >= '0' && *p <= '9'))
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (unsigned)(*p - '0');
		if (v > UINT64_MAX)
			return -1;
	}
	for (size_t i = 0; i < sizeof name / sizeof name[0]; i++) {
		size_t n = strlen(name[i]);
		if (strlen(p) != n)
			continue;
		size_t j = 0;
		while (j < n && lower(p[j]) == name[i][j])
			j++;
		if (j < n)
			continue;
		v <<= shift[i];
		if (v > UINT64_MAX)
			return -1;
		*out = (uint64_t)v;
		return 0;
	}
	return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = 0;

	uint64_t a = 0, b = 0;
	int ra = ml__parse_u64(s, &a), rb = ref_u64(s, &b);
	CHECK(ra == rb);
	CHECK(ra != 0 || a == b);

	int rs = ml__parse_size(s, &a);
	CHECK(rs == 0 || rs == -1);
	if (!strchr(s, '.')) {
		rb = ref_size_int(s, &b);
		CHECK(rs == rb);
		CHECK(rs != 0 || a == b);
	} else if (rs == 0) {
		/* With a fraction: between the integer part's value and the
		 * next multiple of the unit. */
		char *t = strdup(s);
		if (t) {
			char *dot = strchr(t, '.'), *q = dot + 1;
			while (*q >= '0' && *q <= '9')
				q++;
			memmove(dot, q, strlen(q) + 1);
			uint64_t lo;
			CHECK(ref_size_int(t, &lo) == 0 && a >= lo);
			free(t);
		}
	}

	double d = -1;
	if (ml__parse_prob(s, &d) == 0)
		CHECK(d > 0 && d < 1 && !isnan(d));

	/* NULL is refused, never dereferenced. */
	CHECK(ml__parse_u64(NULL, &a) == -1 && ml__parse_size(NULL, &a) == -1 &&
	      ml__parse_prob(NULL, &d) == -1);
	free(s);
	return 0;
}
