/* Parsers for values from outside (environment, command line).  Shared by
 * the library and the memlimits command; no allocation, no locale. */
#ifndef ML_PARSE_H
#define ML_PARSE_H

#include <stdint.h>

/* "123", "64k", "64KB", "64KiB", "1.5M", "2GiB", "1T": binary multiples.
 * Leading/trailing blanks are not accepted.  0 on success; -1 on a
 * malformed value, a negative number or an overflow of uint64_t. */
int ml__parse_size(const char *s, uint64_t *out);
/* A decimal or 0x-hexadecimal unsigned 64-bit integer. */
int ml__parse_u64(const char *s, uint64_t *out);
/* A probability in (0, 1): "1e-9", "0.001". */
int ml__parse_prob(const char *s, double *out);

#endif
