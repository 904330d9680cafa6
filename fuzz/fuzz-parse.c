/* libFuzzer target: the parsers of values from outside (lib/util/parse.c):
 * sizes, unsigned 64-bit integers, probabilities and percentages, as used by
 * the environment (MEMLIMITS_*) and the command line.  Each result is checked
 * against a slow reference written from the grammar in lib/util/parse.h, so an
 * off-by-one in an overflow check or a suffix shows as a crash, and ASan
 * catches any read past the string's end (the input is copied into a
 * buffer of exactly its length plus the NUL). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/parse.h"

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

/* Reference for ml__parse_size: digits, an optional '.' and digits, then
 * one of the suffixes, case-insensitive; the value rounded down (never
 * above what was written).  Exact with 128-bit arithmetic: the fraction's
 * first 20 digits F give floor(F * 2^shift / 10^20); *slack is set when
 * later digits are not all 0 and a multiple of 2^-shift lies between
 * 0.F and 0.F + 10^-20, the only case where the answer may be one more. */
static int ref_size(const char *s, uint64_t *out, int *slack)
{
	static const char *const name[] = {"",    "b",  "k",   "kb", "kib",
	                                   "m",   "mb", "mib", "g",  "gb",
	                                   "gib", "t",  "tb",  "tib"};
	static const unsigned shift[] = {0,  0,  10, 10, 10, 20, 20,
	                                 20, 30, 30, 30, 40, 40, 40};
	unsigned __int128 v = 0, f = 0, ten20 = 1;
	int rest = 0;
	const char *p = s;
	*slack = 0;
	if (!(*p >= '0' && *p <= '9'))
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (unsigned)(*p - '0');
		if (v > UINT64_MAX)
			return -1;
	}
	if (*p == '.') {
		p++;
		if (!(*p >= '0' && *p <= '9'))
			return -1;
		for (int i = 0; i < 20; i++) {
			unsigned d =
			    *p >= '0' && *p <= '9' ? (unsigned)(*p++ - '0') : 0;
			f = f * 10 + d;
			ten20 *= 10;
		}
		for (; *p >= '0' && *p <= '9'; p++)
			rest |= *p != '0';
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
		unsigned __int128 one = (unsigned __int128)1 << shift[i];
		unsigned __int128 lo = ten20 > 1 ? f * one / ten20 : 0;
		unsigned __int128 hi =
		    ten20 > 1 ? ((f + 1) * one - 1) / ten20 : 0;
		*slack = rest && hi != lo;
		v = (v << shift[i]) + lo;
		if (v > UINT64_MAX)
			return -1;
		*out = (uint64_t)v;
		return 0;
	}
	return -1;
}

/* Reference for ml__parse_percent: digits, an optional '.' and 1 to 9
 * digits, '%', the end; in billionths of a percent, more than 0 and at
 * most 100%.  Exact with 128-bit arithmetic (the integer part saturates). */
static int ref_percent(const char *s, uint64_t *out)
{
	unsigned __int128 v = 0;
	const char *p = s;
	if (!(*p >= '0' && *p <= '9'))
		return -1;
	for (; *p >= '0' && *p <= '9'; p++)
		if (v < 1000)
			v = v * 10 + (unsigned)(*p - '0');
	v *= 1000000000u;
	if (*p == '.') {
		unsigned __int128 scale = 100000000u;
		int n = 0;
		for (p++; *p >= '0' && *p <= '9'; p++, n++) {
			if (n >= 9)
				return -1;
			v += scale * (unsigned)(*p - '0');
			scale /= 10;
		}
		if (!n)
			return -1;
	}
	if (strcmp(p, "%") || v == 0 ||
	    v > 100 * (unsigned __int128)1000000000u)
		return -1;
	*out = (uint64_t)v;
	return 0;
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

	int rs = ml__parse_size(s, &a), slack = 0;
	rb = ref_size(s, &b, &slack);
	if (!slack) {
		CHECK(rs == rb);
		CHECK(rs != 0 || a == b);
	} else {
		/* The reference's value b, or b + 1 when that fits. */
		CHECK(rb == 0);
		CHECK(rs == 0 ? a == b || a == b + 1 : b == UINT64_MAX);
	}
	/* A limit: the same, except that 2^64-1 (ML_NO_LIMIT) is refused. */
	uint64_t l = 7;
	int rl = ml__parse_limit(s, &l);
	if (rs != 0)
		CHECK(rl == -1 && l == 7);
	else if (a == UINT64_MAX)
		CHECK(rl == ML__PARSE_NO_LIMIT && l == 7);
	else
		CHECK(rl == 0 && l == a);

	/* A percentage, and the bytes it makes never above the total. */
	uint64_t pa = 7, pb = 0;
	int rp = ml__parse_percent(s, &pa);
	CHECK(rp == ref_percent(s, &pb));
	CHECK(rp == 0 ? pa == pb : pa == 7);
	if (rp == 0 && size >= 8) {
		uint64_t total;
		memcpy(&total, data, sizeof total);
		uint64_t of = ml__percent_of(total, pa);
		CHECK(of <= total);
		CHECK(pa != 100ull * ML__PERCENT_UNIT || of == total);
	}

	double d = -1;
	if (ml__parse_prob(s, &d) == 0)
		CHECK(d > 0 && d < 1 && !isnan(d));

	/* NULL is refused, never dereferenced. */
	CHECK(ml__parse_u64(NULL, &a) == -1 && ml__parse_size(NULL, &a) == -1 &&
	      ml__parse_limit(NULL, &a) == -1 &&
	      ml__parse_prob(NULL, &d) == -1 &&
	      ml__parse_percent(NULL, &a) == -1);
	free(s);
	return 0;
}
