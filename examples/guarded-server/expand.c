/* Template expansion: see expand.h. */
#include "expand.h"

#include <memlimits.h>
#include <stdlib.h>
#include <string.h>

struct arena_chunk {
	struct arena_chunk *next;
	size_t used, cap;
	_Alignas(16) char data[];
};

#define ARENA_MIN 4096
#define ARENA_MAX (1u << 20)

void arena_free(struct arena *a)
{
	struct arena_chunk *c = a->head;
	a->head = NULL;
	a->next_size = 0;
	while (c) {
		struct arena_chunk *next = c->next;
		free(c);
		c = next;
	}
}

/* Chunks double up to 1 MiB: small requests stay small, and a large one's
 * bytes sit in blocks above glibc's mmap threshold, so that freeing them
 * gives the pages back to the kernel at once (peak RSS tracks the live
 * heap; see README, "Peak RSS and the slack"). */
static void *arena_alloc(struct arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct arena_chunk *c = a->head;
	if (!c || c->cap - c->used < n) {
		size_t size = a->next_size ? a->next_size : ARENA_MIN;
		if (size < ARENA_MAX)
			a->next_size = 2 * size;
		if (size < n)
			size = n;
		/* A JUMP can land inside this malloc: the arena is
		 * consistent before it and updated only after it. */
		c = malloc(sizeof *c + size);
		if (!c)
			return NULL;
		c->cap = size;
		c->used = 0;
		c->next = a->head;
		a->head = c;
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

/* ---- Syntax tree ------------------------------------------------------ */

struct tnode {
	struct tnode *next;
	const char *text; /* text node; NULL for a repetition */
	size_t len;
	uint64_t count; /* repetition: body, count times */
	struct tnode *body;
};

struct tparser {
	struct arena *a;
	const char *p, *end;
	int depth;
};

static int parse_list(struct tparser *ps, struct tnode **out, int nested);

static int parse_repeat(struct tparser *ps, struct tnode *t)
{
	uint64_t count = 0;
	const char *digits = ++ps->p; /* past '{' */
	while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
		count = count * 10 + (uint64_t)(*ps->p++ - '0');
		if (count > EXPAND_MAX_COUNT)
			return EXPAND_ESYNTAX;
	}
	if (ps->p == digits || ps->p >= ps->end || *ps->p != ':')
		return EXPAND_ESYNTAX;
	ps->p++;
	if (++ps->depth > EXPAND_MAX_DEPTH)
		return EXPAND_EDEPTH;
	t->count = count;
	int e = parse_list(ps, &t->body, 1);
	ps->depth--;
	if (e)
		return e;
	if (ps->p >= ps->end) /* parse_list stopped at '}' */
		return EXPAND_ESYNTAX;
	ps->p++;
	return EXPAND_OK;
}

static int parse_text(struct tparser *ps, struct tnode *t)
{
	/* The unescaped text is at most as long as the source run. */
	const char *q = ps->p;
	while (q < ps->end && *q != '{' && *q != '}')
		q += *q == '\\' ? 2 : 1;
	if (q > ps->end)
		return EXPAND_ESYNTAX; /* a trailing backslash */
	char *s = arena_alloc(ps->a, (size_t)(q - ps->p));
	if (!s)
		return EXPAND_ENOMEM;
	size_t n = 0;
	while (ps->p < q) {
		if (*ps->p == '\\')
			ps->p++;
		s[n++] = *ps->p++;
	}
	t->text = s;
	t->len = n;
	return EXPAND_OK;
}

static int parse_list(struct tparser *ps, struct tnode **out, int nested)
{
	struct tnode **tail = out;
	*out = NULL;
	while (ps->p < ps->end && *ps->p != '}') {
		struct tnode *t = arena_alloc(ps->a, sizeof *t);
		if (!t)
			return EXPAND_ENOMEM;
		memset(t, 0, sizeof *t);
		int e = *ps->p == '{' ? parse_repeat(ps, t) : parse_text(ps, t);
		if (e)
			return e;
		*tail = t;
		tail = &t->next;
	}
	if (!nested && ps->p < ps->end)
		return EXPAND_ESYNTAX; /* an unmatched '}' */
	return EXPAND_OK;
}

/* ---- Expansion -------------------------------------------------------- */

struct expander {
	struct arena *a;
	struct expansion *x;
	size_t next_seg;
};

static int emit(struct expander *ex, const char *s, size_t n)
{
	struct expansion *x = ex->x;
	while (n) {
		struct seg *g = x->tail;
		if (!g || g->len == g->cap) {
			size_t cap = ex->next_seg;
			if (cap < ARENA_MAX)
				ex->next_seg = 2 * cap;
			g = arena_alloc(ex->a, sizeof *g + cap);
			if (!g)
				return EXPAND_ENOMEM;
			g->next = NULL;
			g->len = 0;
			g->cap = cap;
			if (x->tail)
				x->tail->next = g;
			else
				x->head = g;
			x->tail = g;
		}
		size_t k = g->cap - g->len < n ? g->cap - g->len : n;
		memcpy(g->data + g->len, s, k);
		g->len += k;
		x->len += k;
		s += k;
		n -= k;
	}
	return EXPAND_OK;
}

static int run(struct expander *ex, const struct tnode *t)
{
	for (; t; t = t->next) {
		if (t->text) {
			int e = emit(ex, t->text, t->len);
			if (e)
				return e;
			continue;
		}
		for (uint64_t i = 0; i < t->count; i++) {
			/* A repetition of nothing allocates nothing, so no
			 * sample would ever notice a cancelled token: this
			 * safe point makes the deadline reach such loops. */
			if ((++ex->x->steps & 0xffff) == 0)
				ml_check();
			int e = run(ex, t->body);
			if (e)
				return e;
		}
	}
	return EXPAND_OK;
}

int expand(struct arena *a, const char *tpl, size_t len, struct expansion *x)
{
	memset(x, 0, sizeof *x);
	struct tparser ps = {a, tpl, tpl + len, 0};
	struct tnode *root;
	int e = parse_list(&ps, &root, 0);
	if (e)
		return e;
	struct expander ex = {a, x, 1024};
	return run(&ex, root);
}

const char *expand_strerror(int err)
{
	switch (err) {
	case EXPAND_OK:
		return "ok";
	case EXPAND_ESYNTAX:
		return "template syntax error";
	case EXPAND_EDEPTH:
		return "template nested too deeply";
	case EXPAND_ENOMEM:
		return "out of memory";
	}
	return "?";
}

uint64_t fnv1a(const struct expansion *x)
{
	uint64_t h = 1469598103934665603ull;
	for (const struct seg *g = x->head; g; g = g->next)
		for (size_t i = 0; i < g->len; i++)
			h = (h ^ (unsigned char)g->data[i]) * 1099511628211ull;
	return h;
}
