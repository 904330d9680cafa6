/* A small JSON parser and serialiser for the guarded server's /json.
 *
 * Numbers and strings keep their source text (validated, escapes left as
 * written), so compact output reproduces a compact input byte for byte and
 * no libc conversion (strtod may allocate) runs inside a task.  Every
 * allocation is checked: this code is written for FAIL delivery, where an
 * interrupted request sees NULL from malloc and unwinds by returning. */
#ifndef GS_JSON_H
#define GS_JSON_H

#include <stddef.h>

enum json_err {
	JSON_OK = 0,
	JSON_ESYNTAX = -1,   /* not JSON */
	JSON_EDEPTH = -2,    /* nested deeper than JSON_MAX_DEPTH */
	JSON_ENOMEM = -3,    /* an allocation failed */
	JSON_ECANCELED = -4, /* the task was interrupted (polled) */
};

#define JSON_MAX_DEPTH 256

struct json;

/* Parse s[0..len) into a tree; *out is NULL on error.  *errpos (optional)
 * receives the offset of a syntax error. */
int json_parse(const char *s, size_t len, struct json **out, size_t *errpos);
void json_free(struct json *j);

struct json_buf {
	char *data;
	size_t len, cap;
};

/* Serialise j into b (appended; b may start zeroed).  indent 0 = compact;
 * otherwise one value per line, indent spaces per level.  On error b keeps
 * what it had and the caller frees b->data. */
int json_write(const struct json *j, unsigned long indent, struct json_buf *b);

const char *json_strerror(int err);

#endif
