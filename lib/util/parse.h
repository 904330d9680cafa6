/* Parsers for values from outside (environment, command line), and how
 * such a value is shown in a message.  Shared by the library and the
 * memlimits command; no allocation, no locale. */
#ifndef ML_PARSE_H
#define ML_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* "123", "64k", "64KB", "64KiB", "1.5M", "2GiB", "1T": binary multiples;
 * a fraction rounds down to a whole byte (exactly, whatever its length).
 * Leading/trailing blanks are not accepted.  0 on success; -1 on a
 * malformed value, a negative number or an overflow of uint64_t. */
int ml__parse_size(const char *s, uint64_t *out);
/* A limit: a size as above, but not 2^64-1, which is ML_NO_LIMIT ("no
 * limit") and would silently turn the limit off.  0 on success; -1 on a
 * malformed value; ML__PARSE_NO_LIMIT for exactly 2^64-1 bytes. */
#define ML__PARSE_NO_LIMIT (-2)
int ml__parse_limit(const char *s, uint64_t *out);
/* A percentage: "80%", "12.5%", more than 0 and at most 100, with at most
 * 9 decimals (what it is a percentage of, the caller knows).  Counted
 * exactly in billionths of a percent: *out = P * ML__PERCENT_UNIT.  0 on
 * success; -1 on anything else ("0%", "101%", "x%", "%", " 5%"). */
#define ML__PERCENT_UNIT 1000000000u /* 1% */
int ml__parse_percent(const char *s, uint64_t *out);
/* floor(total * pct / 100%), exactly: pct from ml__parse_percent. */
uint64_t ml__percent_of(uint64_t total, uint64_t pct);
/* A decimal or 0x-hexadecimal unsigned 64-bit integer. */
int ml__parse_u64(const char *s, uint64_t *out);
/* A probability in (0, 1): "1e-9", "0.001". */
int ml__parse_prob(const char *s, double *out);

/* v as text in base 10 or 16 (lower case, no prefix), without stdio or
 * locale: written at the end of buf, NUL-terminated; returns where the
 * digits start.  The library's one integer-to-text loop. */
#define ML__UTOA_BYTES 24
char *ml__utoa(uint64_t v, unsigned base, char buf[ML__UTOA_BYTES]);

/* The next character of a value from outside (s, NUL-terminated) as shown
 * in a message: itself, or \xHH for each of its bytes when it is a control
 * character (C0, DEL, or C1: U+0080-U+009F, whose CSI acts on terminals as
 * ESC [ does) or not UTF-8 (a lone byte 0x80-0x9f is a C1 control to an
 * 8-bit terminal).  Sets *used to the bytes of s it took (1 to 4); writes
 * at most 8 bytes to out; returns how many. */
unsigned ml__show_char(const char *s, char out[8], unsigned *used);

/* Shared budgets' names (lib/shared, and `memlimits run
 * --tree-heap-limit`, which makes the object itself): 1 to 64 characters
 * of [A-Za-z0-9._-]. */
#define ML__SHARED_NAME_MAX 64
bool ml__shared_name_ok(const char *name);
/* The shared-memory object of `name` for this user ("/memlimits.UID.NAME")
 * into buf (at least 96 bytes); false for a bad name. */
bool ml__shared_object_name(const char *name, char *buf, size_t len);

#endif
