/* JSON tree: see json.h.  Recursive descent with an explicit depth limit
 * (a deep document must be a 400, not a stack overflow). */
#include "json.h"

#include <memlimits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum jtype { J_NULL, J_TRUE, J_FALSE, J_NUM, J_STR, J_ARR, J_OBJ };

struct json {
	enum jtype type;
	size_t len; /* J_NUM, J_STR: bytes of text (J_STR: without quotes) */
	char *text; /* J_NUM, J_STR */
	size_t n;   /* J_ARR: values; J_OBJ: 2 * members (key, value) */
	size_t cap;
	struct json **kids;
};

struct parser {
	const char *s, *end, *p;
	int depth;
};

void json_free(struct json *j)
{
	if (!j)
		return;
	for (size_t i = 0; i < j->n; i++)
		json_free(j->kids[i]);
	free(j->kids);
	free(j->text);
	free(j);
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' ||
	                           *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

static struct json *node(enum jtype t)
{
	struct json *j = calloc(1, sizeof *j);
	if (j)
		j->type = t;
	return j;
}

static int push(struct json *parent, struct json *kid)
{
	if (parent->n == parent->cap) {
		size_t cap = parent->cap ? 2 * parent->cap : 4;
		struct json **k = realloc(parent->kids, cap * sizeof *k);
		if (!k)
			return JSON_ENOMEM;
		parent->kids = k;
		parent->cap = cap;
	}
	parent->kids[parent->n++] = kid;
	return JSON_OK;
}

static int copy_text(struct json *j, const char *from, size_t n)
{
	j->text = malloc(n + 1);
	if (!j->text)
		return JSON_ENOMEM;
	memcpy(j->text, from, n);
	j->text[n] = 0;
	j->len = n;
	return JSON_OK;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static bool is_hex(char c)
{
	return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* ps->p at the opening quote; validates and returns the raw text. */
static int scan_string(struct parser *ps, const char **start, size_t *n)
{
	const char *p = ps->p + 1;
	*start = p;
	while (p < ps->end && *p != '"') {
		unsigned char c = (unsigned char)*p;
		if (c < 0x20)
			return JSON_ESYNTAX;
		if (c == '\\') {
			if (++p >= ps->end)
				return JSON_ESYNTAX;
			if (*p == 'u') {
				for (int i = 1; i <= 4; i++)
					if (p + i >= ps->end || !is_hex(p[i]))
						return JSON_ESYNTAX;
				p += 4;
			} else if (!strchr("\"\\/bfnrt", *p) || !*p) {
				return JSON_ESYNTAX;
			}
		}
		p++;
	}
	if (p >= ps->end)
		return JSON_ESYNTAX;
	*n = (size_t)(p - *start);
	ps->p = p + 1;
	return JSON_OK;
}

static int scan_number(struct parser *ps, const char **start, size_t *n)
{
	const char *p = ps->p, *e = ps->end;
	*start = p;
	if (p < e && *p == '-')
		p++;
	if (p < e && *p == '0')
		p++;
	else if (p < e && is_digit(*p))
		while (p < e && is_digit(*p))
			p++;
	else
		return JSON_ESYNTAX;
	if (p < e && *p == '.') {
		if (++p >= e || !is_digit(*p))
			return JSON_ESYNTAX;
		while (p < e && is_digit(*p))
			p++;
	}
	if (p < e && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < e && (*p == '+' || *p == '-'))
			p++;
		if (p >= e || !is_digit(*p))
			return JSON_ESYNTAX;
		while (p < e && is_digit(*p))
			p++;
	}
	*n = (size_t)(p - *start);
	ps->p = p;
	return JSON_OK;
}

static int parse_value(struct parser *ps, struct json **out);

static int parse_container(struct parser *ps, struct json *j, char close)
{
	bool obj = close == '}';
	ps->p++; /* the opening bracket */
	skip_ws(ps);
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		return JSON_OK;
	}
	for (;;) {
		struct json *kid;
		int e;
		skip_ws(ps);
		if (obj) {
			const char *s;
			size_t n;
			if (ps->p >= ps->end || *ps->p != '"')
				return JSON_ESYNTAX;
			if ((e = scan_string(ps, &s, &n)))
				return e;
			if (!(kid = node(J_STR)))
				return JSON_ENOMEM;
			if ((e = push(j, kid))) {
				json_free(kid);
				return e;
			}
			if ((e = copy_text(kid, s, n)))
				return e;
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != ':')
				return JSON_ESYNTAX;
			ps->p++;
		}
		if ((e = parse_value(ps, &kid)))
			return e;
		if ((e = push(j, kid))) {
			json_free(kid);
			return e;
		}
		skip_ws(ps);
		if (ps->p >= ps->end)
			return JSON_ESYNTAX;
		if (*ps->p == close) {
			ps->p++;
			return JSON_OK;
		}
		if (*ps->p != ',')
			return JSON_ESYNTAX;
		ps->p++;
	}
}

/* On error *out is NULL and everything this call allocated is freed. */
static int parse_value(struct parser *ps, struct json **out)
{
	*out = NULL;
	skip_ws(ps);
	if (ps->p >= ps->end)
		return JSON_ESYNTAX;
	static const struct {
		const char *word;
		enum jtype type;
	} words[] = {{"null", J_NULL}, {"true", J_TRUE}, {"false", J_FALSE}};
	for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
		size_t n = strlen(words[i].word);
		if ((size_t)(ps->end - ps->p) >= n &&
		    !memcmp(ps->p, words[i].word, n)) {
			ps->p += n;
			*out = node(words[i].type);
			return *out ? JSON_OK : JSON_ENOMEM;
		}
	}
	char c = *ps->p;
	struct json *j;
	int e;
	if (c == '"' || c == '-' || is_digit(c)) {
		const char *s;
		size_t n;
		e = c == '"' ? scan_string(ps, &s, &n)
		             : scan_number(ps, &s, &n);
		if (e)
			return e;
		if (!(j = node(c == '"' ? J_STR : J_NUM)))
			return JSON_ENOMEM;
		if ((e = copy_text(j, s, n))) {
			json_free(j);
			return e;
		}
		*out = j;
		return JSON_OK;
	}
	if (c != '[' && c != '{')
		return JSON_ESYNTAX;
	if (ps->depth >= JSON_MAX_DEPTH)
		return JSON_EDEPTH;
	if (!(j = node(c == '[' ? J_ARR : J_OBJ)))
		return JSON_ENOMEM;
	ps->depth++;
	e = parse_container(ps, j, c == '[' ? ']' : '}');
	ps->depth--;
	if (e) {
		json_free(j);
		return e;
	}
	*out = j;
	return JSON_OK;
}

int json_parse(const char *s, size_t len, struct json **out, size_t *errpos)
{
	struct parser ps = {s, s + len, s, 0};
	int e = parse_value(&ps, out);
	if (!e) {
		skip_ws(&ps);
		if (ps.p != ps.end) {
			json_free(*out);
			*out = NULL;
			e = JSON_ESYNTAX;
		}
	}
	if (e && errpos)
		*errpos = (size_t)(ps.p - s);
	return e;
}

/* ---- Output ----------------------------------------------------------- */

static int reserve(struct json_buf *b, size_t more)
{
	if (b->cap - b->len >= more)
		return JSON_OK;
	size_t cap = b->cap ? b->cap : 4096;
	while (cap - b->len < more) {
		if (cap > SIZE_MAX / 2)
			return JSON_ENOMEM;
		cap *= 2;
	}
	char *d = realloc(b->data, cap);
	if (!d)
		return JSON_ENOMEM;
	b->data = d;
	b->cap = cap;
	return JSON_OK;
}

static int put(struct json_buf *b, const char *s, size_t n)
{
	int e = reserve(b, n);
	if (!e) {
		memcpy(b->data + b->len, s, n);
		b->len += n;
	}
	return e;
}

static int newline(struct json_buf *b, unsigned long indent, int depth)
{
	if (!indent)
		return JSON_OK;
	size_t n = 1 + (size_t)indent * (size_t)depth;
	int e = reserve(b, n);
	if (!e) {
		b->data[b->len] = '\n';
		memset(b->data + b->len + 1, ' ', n - 1);
		b->len += n;
	}
	return e;
}

struct writer {
	struct json_buf *b;
	unsigned long indent;
	unsigned long nodes;
};

static int write_value(struct writer *w, const struct json *j, int depth)
{
	/* FAIL delivery only shows at allocations; a cancelled token must
	 * also stop a writer that is filling an already large buffer. */
	if ((++w->nodes & 1023) == 0 && ml_is_interrupted())
		return JSON_ECANCELED;
	struct json_buf *b = w->b;
	switch (j->type) {
	case J_NULL:
		return put(b, "null", 4);
	case J_TRUE:
		return put(b, "true", 4);
	case J_FALSE:
		return put(b, "false", 5);
	case J_NUM:
		return put(b, j->text, j->len);
	case J_STR: {
		int e = put(b, "\"", 1);
		if (!e)
			e = put(b, j->text, j->len);
		return e ? e : put(b, "\"", 1);
	}
	case J_ARR:
	case J_OBJ:
		break;
	}
	bool obj = j->type == J_OBJ;
	int e = put(b, obj ? "{" : "[", 1);
	for (size_t i = 0; !e && i < j->n; i++) {
		if (i && !(obj && (i & 1)))
			e = put(b, ",", 1);
		if (!e && !(obj && (i & 1)))
			e = newline(b, w->indent, depth + 1);
		if (!e)
			e = write_value(w, j->kids[i], depth + 1);
		if (!e && obj && !(i & 1))
			e = w->indent ? put(b, ": ", 2) : put(b, ":", 1);
	}
	if (!e && j->n)
		e = newline(b, w->indent, depth);
	return e ? e : put(b, obj ? "}" : "]", 1);
}

int json_write(const struct json *j, unsigned long indent, struct json_buf *b)
{
	struct writer w = {b, indent, 0};
	return write_value(&w, j, 0);
}

const char *json_strerror(int err)
{
	switch (err) {
	case JSON_OK:
		return "ok";
	case JSON_ESYNTAX:
		return "not valid JSON";
	case JSON_EDEPTH:
		return "JSON nested too deeply";
	case JSON_ENOMEM:
		return "out of memory";
	case JSON_ECANCELED:
		return "cancelled";
	}
	return "?";
}
