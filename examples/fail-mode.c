/* FAIL delivery: once a task reaches its limit, its allocations return NULL
 * (errno ENOMEM).  Code that already handles allocation failure needs
 * nothing more: here a tiny JSON writer reports the failure up, the task
 * frees what it built and returns an error, and the host carries on.
 * Unlike JUMP delivery nothing is abandoned: every frame returns normally,
 * so no cleanup handler is needed.
 * Build: cc fail-mode.c $(pkg-config --cflags --libs memlimits) */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <memlimits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- A JSON writer that propagates allocation failure ----------------- */

struct json {
	char *buf;
	size_t len, cap;
	int err; /* first errno met; every later call is a no-op */
};

static int json_reserve(struct json *j, size_t more)
{
	if (j->err)
		return -1;
	if (j->len + more <= j->cap)
		return 0;
	size_t cap = j->cap ? j->cap : 256;
	while (cap < j->len + more)
		cap *= 2;
	char *b = realloc(j->buf, cap); /* on failure j->buf stays valid */
	if (!b) {
		j->err = errno ? errno : ENOMEM;
		return -1;
	}
	j->buf = b;
	j->cap = cap;
	return 0;
}

static int json_raw(struct json *j, const char *s, size_t n)
{
	if (json_reserve(j, n + 1))
		return -1;
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = 0;
	return 0;
}

static int json_string(struct json *j, const char *s)
{
	if (json_raw(j, "\"", 1))
		return -1;
	for (; *s; s++) {
		char esc[8];
		int n = 1;
		esc[0] = *s;
		if (*s == '"' || *s == '\\')
			n = snprintf(esc, sizeof esc, "\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			n = snprintf(esc, sizeof esc, "\\u%04x", *s);
		if (json_raw(j, esc, (size_t)n))
			return -1;
	}
	return json_raw(j, "\"", 1);
}

static int json_number(struct json *j, long v)
{
	char num[24];
	int n = snprintf(num, sizeof num, "%ld", v);
	return json_raw(j, num, (size_t)n);
}

static void json_free(struct json *j)
{
	free(j->buf);
	*j = (struct json){0};
}

/* ---- The task: serialise a result set ---------------------------------- */

struct request {
	const char *name;
	long rows; /* how many rows the query returned: the input decides */
};

struct reply {
	char *json; /* the document, NULL on failure */
	size_t bytes;
	long rows_written;
	int err;
};

static void *serialise(void *arg)
{
	const struct request *rq = arg;
	struct reply *r = calloc(1, sizeof *r);
	if (!r)
		return NULL; /* even the reply could not be allocated */
	struct json j = {0};
	json_raw(&j, "[", 1);
	for (long i = 0; i < rq->rows && !j.err; i++) {
		json_raw(&j, i ? ",{\"id\":" : "{\"id\":", i ? 7 : 6);
		json_number(&j, i);
		json_raw(&j, ",\"name\":", 8);
		json_string(&j, "row \"quoted\" name");
		json_raw(&j, "}", 1);
		if (!j.err)
			r->rows_written = i + 1;
	}
	json_raw(&j, "]", 1);
	if (j.err) {
		/* The library's contract: free everything, report. */
		r->err = j.err;
		json_free(&j);
		return r;
	}
	r->json = j.buf;
	r->bytes = j.len;
	return r;
}

static size_t heap_in_use(void)
{
	struct mallinfo2 mi = mallinfo2();
	return mi.uordblks + mi.hblkhd;
}

int main(void)
{
	const struct request requests[] = {
	    {"small", 100},
	    {"huge", 100000000}, /* ~4 GB of JSON: would exhaust the host */
	    {"small again", 100},
	};
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = 16u << 20;
	l.delivery = ML_DELIVER_FAIL;
	int bad = 0;
	/* printf allocates its buffer once: do it before measuring. */
	printf("FAIL delivery, allocation limit 16 MiB per request\n");
	size_t before = heap_in_use();
	for (size_t i = 0; i < sizeof requests / sizeof requests[0]; i++) {
		ml_outcome out;
		ml_status s = ml_run(&l, serialise, (void *)&requests[i], &out);
		struct reply *r = out.ret;
		if (!r) {
			printf("%-12s %s, no reply at all\n", requests[i].name,
			       ml_status_str(s));
			bad = 1;
			continue;
		}
		if (r->json)
			printf("%-12s %s: %ld rows, %zu bytes of JSON\n",
			       requests[i].name, ml_status_str(s),
			       r->rows_written, r->bytes);
		else
			printf("%-12s %s: the writer failed (%s) after %ld "
			       "rows, partial document freed\n",
			       requests[i].name, ml_status_str(s),
			       strerror(r->err), r->rows_written);
		/* Expected: small requests succeed, the huge one fails cleanly.
		 */
		bool huge = requests[i].rows > 1000;
		if (huge ? (s != ML_ALLOC_LIMIT || r->json || r->err != ENOMEM)
		         : (s != ML_OK || !r->json))
			bad = 1;
		free(r->json);
		free(r);
	}
	size_t after = heap_in_use();
	printf("heap in use: %zu KiB before, %zu KiB after\n", before >> 10,
	       after >> 10);
	if (after > before + (64u << 10)) {
		printf("memory was not released\n");
		bad = 1;
	}
	return bad;
}
