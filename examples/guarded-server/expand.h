/* Template expansion for the guarded server's /expand.
 *
 *   template := item*
 *   item     := a character other than '{' '}' '\'   (itself)
 *             | '\' any character                    (that character)
 *             | '{' COUNT ':' template '}'           (template, COUNT times)
 *
 * The output size is the client's choice: "{1000:{1000:{1000:x}}}" is a
 * gigabyte.  That is the point: like any real template, macro or
 * decompression format, validating every way a small input can grow large
 * is hard, and memlimits is the backstop for what validation misses.
 *
 * Written for JUMP delivery: every byte (syntax tree and output) lives in
 * one arena, which a cleanup handler frees when the request is interrupted,
 * so no path needs to unwind by hand.  NULL is still checked (a genuine
 * out-of-memory outside any task). */
#ifndef GS_EXPAND_H
#define GS_EXPAND_H

#include <stdint.h>
#include <stddef.h>

struct arena_chunk;
struct arena {
	struct arena_chunk *head;
	size_t next_size; /* geometric chunk sizes, 4 KiB .. 1 MiB */
};

void arena_free(struct arena *a); /* idempotent: leaves an empty arena */

/* The output: a list of segments in the arena. */
struct seg {
	struct seg *next;
	size_t len, cap;
	char data[];
};

struct expansion {
	struct seg *head, *tail;
	uint64_t len;
	uint64_t steps; /* repetitions done: ml_check() every 2^16 */
};

enum expand_err {
	EXPAND_OK = 0,
	EXPAND_ESYNTAX = -1,
	EXPAND_EDEPTH = -2,
	EXPAND_ENOMEM = -3,
};

#define EXPAND_MAX_DEPTH 64
#define EXPAND_MAX_COUNT 1000000000ul

int expand(struct arena *a, const char *tpl, size_t len, struct expansion *x);
const char *expand_strerror(int err);
uint64_t fnv1a(const struct expansion *x);

#endif
