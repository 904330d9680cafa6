/* --demo: run the server in a child process, drive it from this one with
 * well-behaved, runaway and bad clients over 127.0.0.1, and print what
 * happened.  Each phase gets a fresh server, so each column's peak RSS is
 * its own.  Every loop here is bounded in time (the phase length, plus a
 * per-request timeout) and every connection goes to loopback only. */
#define _GNU_SOURCE
#include "gs.h"

#include <errno.h>
#include <fcntl.h>
#include <memlimits.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- Phases and their results ----------------------------------------- */

struct result {
	const char *title;
	bool limits, load; /* load: runaway and bad clients too */
	double seconds;
	uint64_t well_ok, well_failed;
	char first_failure[160];
	double p50, p90, p99, pmax; /* ms */
	uint64_t run_sent, run_alloc, run_held, run_global, run_deadline,
	    run_not_stopped, run_unanswered;
	/* /stream: served, stopped by any limit, failed otherwise */
	uint64_t stream_ok, stream_stopped, stream_failed;
	unsigned stream_mb;
	char first_stream_failure[160];
	/* /leak: stopped by its held limit, by the global limit, otherwise
	 * (deadline), not stopped */
	uint64_t leak_sent, leak_held, leak_global, leak_other,
	    leak_not_stopped;
	/* well-behaved or streaming requests stopped by the global limit */
	uint64_t bystanders;
	uint64_t bad_sent, bad_expected;
	char first_bad[160];
	bool have_stats;
	uint64_t st[GS_NSTATS];
	bool exited_cleanly; /* answered SIGTERM with its counters */
	bool killed;
	double died_after; /* seconds into the phase; < 0 = did not die */
	uint64_t maxrss;   /* wait4's ru_maxrss, bytes */
};

struct phase {
	const struct gs_config *cfg;
	const struct gs_demo_opts *o;
	int port;
	atomic_bool stop;
	uint64_t t0;
	unsigned req_timeout_ms;
	pthread_mutex_t mu; /* guards the result */
	struct result *res;
	uint32_t *lat; /* well-behaved latencies, µs */
	size_t nlat, caplat;
};

/* ---- A tiny HTTP client ----------------------------------------------- */

struct client {
	struct phase *ph;
	unsigned id;
	uint64_t rng;
	int fd; /* keep-alive connection or -1 */
	char *buf;
	size_t cap, len;
	char *req;
	size_t reqcap, reqlen;
	char *expect; /* expected body */
	size_t expcap, explen;
};

struct resp {
	int status; /* 0: no response */
	bool close;
	char stopped[32];
	const char *body;
	size_t blen;
	const char *error; /* why there is no response */
};

static uint64_t rnd(struct client *c)
{
	/* xorshift64* */
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return c->rng * 2685821657736338717ull;
}

static unsigned below(struct client *c, unsigned n)
{
	return (unsigned)(rnd(c) % n);
}

static void grow(char **p, size_t *cap, size_t need)
{
	if (need <= *cap)
		return;
	size_t n = *cap ? *cap : 4096;
	while (n < need)
		n *= 2;
	char *q = realloc(*p, n);
	if (!q) {
		fprintf(stderr, "guarded-server demo: out of memory\n");
		exit(2);
	}
	*p = q;
	*cap = n;
}

static void req_add(struct client *c, const char *s, size_t n)
{
	grow(&c->req, &c->reqcap, c->reqlen + n + 1);
	memcpy(c->req + c->reqlen, s, n);
	c->reqlen += n;
	c->req[c->reqlen] = 0;
}

static void req_str(struct client *c, const char *s)
{
	req_add(c, s, strlen(s));
}

static void exp_add(struct client *c, const char *s, size_t n)
{
	grow(&c->expect, &c->expcap, c->explen + n + 1);
	memcpy(c->expect + c->explen, s, n);
	c->explen += n;
}

static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in sin = {.sin_family = AF_INET,
	                          .sin_port = htons((uint16_t)port),
	                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	struct timeval tv = {2, 0};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
	if (connect(fd, (struct sockaddr *)&sin, sizeof sin)) {
		close(fd);
		return -1;
	}
	return fd;
}

static void hang_up(struct client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->len = 0;
}

static bool send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		p += k;
		n -= (size_t)k;
	}
	return true;
}

/* Read more into c->buf before the deadline: >0, 0 EOF, -1 error/timeout. */
static ssize_t fill(struct client *c, uint64_t deadline)
{
	grow(&c->buf, &c->cap, c->len + 65536);
	for (;;) {
		uint64_t now = gs_now_ns();
		if (now >= deadline)
			return -1;
		struct pollfd p = {c->fd, POLLIN, 0};
		int r = poll(&p, 1, (int)((deadline - now) / 1000000 + 1));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		ssize_t k = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
		if (k < 0 && errno == EINTR)
			continue;
		if (k > 0)
			c->len += (size_t)k;
		return k;
	}
}

/* Read one response from c->fd into r (body points into c->buf). */
static void read_response(struct client *c, struct resp *r, uint64_t deadline)
{
	*r = (struct resp){0};
	char *end;
	for (;;) {
		end =
		    c->len >= 4 ? memmem(c->buf, c->len, "\r\n\r\n", 4) : NULL;
		if (end)
			break;
		ssize_t k = fill(c, deadline);
		if (k <= 0) {
			r->error =
			    k == 0 ? "connection closed" : "timeout or reset";
			return;
		}
	}
	size_t head = (size_t)(end + 4 - c->buf);
	c->buf[head - 1] = 0;
	if (sscanf(c->buf, "HTTP/1.1 %d", &r->status) != 1) {
		r->status = 0;
		r->error = "bad status line";
		return;
	}
	size_t clen = 0;
	for (char *l = strstr(c->buf, "\r\n"); l && l + 2 < c->buf + head;
	     l = strstr(l + 2, "\r\n")) {
		char *h = l + 2;
		unsigned long long v;
		if (sscanf(h, "Content-Length: %llu", &v) == 1)
			clen = (size_t)v;
		else if (!strncmp(h, "Connection: close", 17))
			r->close = true;
		else if (!strncmp(h, "X-Stopped-By: ", 14))
			sscanf(h + 14, "%31[a-z-]", r->stopped);
	}
	while (c->len < head + clen) {
		ssize_t k = fill(c, deadline);
		if (k <= 0) {
			r->status = 0;
			r->error = "truncated body";
			return;
		}
	}
	/* The caller consumes the response with consume(). */
	r->body = c->buf + head;
	r->blen = clen;
}

static void consume(struct client *c, const struct resp *r)
{
	if (!r->status)
		return;
	size_t used = (size_t)(r->body + r->blen - c->buf);
	memmove(c->buf, c->buf + used, c->len - used);
	c->len -= used;
}

/* Send c->req (on the open keep-alive connection, or a new one when
 * needed) and read the response. */
static void exchange(struct client *c, struct resp *r, unsigned timeout_ms)
{
	uint64_t deadline = gs_now_ns() + (uint64_t)timeout_ms * 1000000u;
	if (c->fd < 0 && (c->fd = dial(c->ph->port)) < 0) {
		*r = (struct resp){.error = "connect failed"};
		return;
	}
	if (!send_all(c->fd, c->req, c->reqlen)) {
		hang_up(c);
		*r = (struct resp){.error = "send failed"};
		return;
	}
	read_response(c, r, deadline);
	/* The caller hangs up after looking at the body, if it must. */
}

static void start_request(struct client *c, const char *method,
                          const char *target, size_t body_len, bool keep)
{
	char head[256];
	snprintf(head, sizeof head,
	         "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %zu\r\n"
	         "%s\r\n",
	         method, target, body_len, keep ? "" : "Connection: close\r\n");
	c->reqlen = 0;
	req_str(c, head);
}

/* ---- Well-behaved requests -------------------------------------------- */

static void gen_json(struct client *c, int depth)
{
	unsigned k = below(c, depth >= 3 ? 5 : 8);
	char tmp[64];
	switch (k) {
	case 0:
		req_str(c, below(c, 2) ? "true" : "null");
		return;
	case 1:
		snprintf(tmp, sizeof tmp, "%d",
		         (int)below(c, 2000000) - 1000000);
		req_str(c, tmp);
		return;
	case 2:
		snprintf(tmp, sizeof tmp, "%s%u.%03ue%d",
		         below(c, 2) ? "-" : "", below(c, 100000),
		         below(c, 1000), (int)below(c, 20) - 10);
		req_str(c, tmp);
		return;
	case 3:
	case 4: {
		static const char *const words[] = {
		    "alpha",      "\\\"quoted\\\"",
		    "caf\\u00e9", "line\\nbreak",
		    "memlimits",  "x",
		    "",           "tab\\there"};
		req_str(c, "\"");
		req_str(c, words[below(c, 8)]);
		req_str(c, "\"");
		return;
	}
	default: {
		bool obj = k >= 6;
		unsigned n = below(c, 8);
		req_str(c, obj ? "{" : "[");
		for (unsigned i = 0; i < n; i++) {
			if (i)
				req_str(c, ",");
			if (obj) {
				snprintf(tmp, sizeof tmp, "\"k%u\":", i);
				req_str(c, tmp);
			}
			gen_json(c, depth + 1);
		}
		req_str(c, obj ? "}" : "]");
	}
	}
}

/* A template and its expansion, built together. */
static void gen_tpl(struct client *c, int depth)
{
	unsigned items = 1 + below(c, 3);
	for (unsigned i = 0; i < items; i++) {
		if (depth < 3 && below(c, 3) == 0) {
			unsigned n = below(c, 6);
			char tmp[32];
			snprintf(tmp, sizeof tmp, "{%u:", n);
			req_str(c, tmp);
			size_t from = c->explen;
			gen_tpl(c, depth + 1);
			size_t one = c->explen - from;
			if (n == 0)
				c->explen = from;
			/* Room first: exp_add from c->expect itself must not
			 * see it move. */
			grow(&c->expect, &c->expcap, c->explen + one * n + 1);
			for (unsigned r = 1; r < n; r++)
				exp_add(c, c->expect + from, one);
			req_str(c, "}");
		} else {
			unsigned n = 1 + below(c, 8);
			for (unsigned k = 0; k < n; k++) {
				char ch = (char)('a' + below(c, 26));
				if (below(c, 16) == 0)
					ch = "{}\\"[below(c, 3)];
				if (ch == '{' || ch == '}' || ch == '\\')
					req_add(c, "\\", 1);
				req_add(c, &ch, 1);
				exp_add(c, &ch, 1);
			}
		}
	}
}

static void add_latency(struct phase *ph, uint64_t ns)
{
	pthread_mutex_lock(&ph->mu);
	if (ph->nlat < ph->caplat)
		ph->lat[ph->nlat++] = (uint32_t)(ns / 1000);
	pthread_mutex_unlock(&ph->mu);
}

static void well_failed(struct client *c, const char *what,
                        const struct resp *r)
{
	struct phase *ph = c->ph;
	pthread_mutex_lock(&ph->mu);
	if (!ph->res->well_failed++)
		snprintf(ph->res->first_failure, sizeof ph->res->first_failure,
		         "%s: status %d %s%.*s", what, r->status,
		         r->error ? r->error : "",
		         r->body ? (int)(r->blen < 60 ? r->blen : 60) : 0,
		         r->body ? r->body : "");
	pthread_mutex_unlock(&ph->mu);
}

static void *well_client(void *arg)
{
	struct client *c = arg;
	struct phase *ph = c->ph;
	for (unsigned i = 0; !atomic_load(&ph->stop); i++) {
		bool json = i % 2 == 0;
		/* The body first (into req after a placeholder head). */
		c->reqlen = 0;
		c->explen = 0;
		if (json) {
			do {
				c->reqlen = 0;
				gen_json(c, 0);
			} while (c->reqlen < 16);
		} else {
			do {
				c->reqlen = 0;
				c->explen = 0;
				gen_tpl(c, 0);
			} while (c->explen > 16384);
		}
		char *body = strndup(c->req, c->reqlen);
		size_t blen = c->reqlen;
		if (!body)
			exit(2);
		start_request(c, "POST", json ? "/json" : "/expand", blen,
		              true);
		req_add(c, body, blen);
		if (json) { /* compact in, compact out */
			c->explen = 0;
			exp_add(c, body, blen);
		}
		free(body);
		uint64_t t = gs_now_ns();
		struct resp r;
		exchange(c, &r, ph->req_timeout_ms);
		uint64_t dt = gs_now_ns() - t;
		/* Counted even when the phase ended meanwhile: the server
		 * lives on until every client is done, so only a dead or
		 * stuck server leaves a request unanswered. */
		if (r.status == 200 && r.blen == c->explen &&
		    !memcmp(r.body, c->expect, r.blen)) {
			pthread_mutex_lock(&ph->mu);
			ph->res->well_ok++;
			pthread_mutex_unlock(&ph->mu);
			add_latency(ph, dt);
		} else {
			if (!strcmp(r.stopped, "global-limit")) {
				pthread_mutex_lock(&ph->mu);
				ph->res->bystanders++;
				pthread_mutex_unlock(&ph->mu);
			}
			well_failed(c, json ? "/json" : "/expand", &r);
			if (!r.status) { /* do not spin on a dead server */
				struct timespec ts = {0, 20000000};
				nanosleep(&ts, NULL);
			}
		}
		consume(c, &r);
		if (!r.status || r.close)
			hang_up(c);
	}
	hang_up(c);
	return NULL;
}

/* ---- Runaway requests ------------------------------------------------- */

static void *runaway_client(void *arg)
{
	struct client *c = arg;
	struct phase *ph = c->ph;
	for (unsigned i = c->id; !atomic_load(&ph->stop); i++) {
		c->reqlen = 0;
		const char *target;
		/* Twice as many expansion bombs: two at once take the heap
		 * over the global limit before either reaches its own. */
		static const unsigned mix[] = {0, 1, 0, 2};
		unsigned kind = mix[i % 4];
		if (kind == 0) {
			/* 8e12 bytes of output from 40 bytes of input */
			req_str(
			    c,
			    "{1000:{1000:{1000:{1000:runaway-expansion!}}}}");
			target = "/expand?summary=1";
		} else if (kind == 1) {
			/* A 5 KB document pretty-printed with a 1e6-space
			 * indent: gigabytes of output. */
			req_str(c, "[");
			for (int a = 0; a < 200; a++) {
				req_str(c, a ? ",[" : "[");
				for (int b = 0; b < 10; b++)
					req_str(c, b ? ",7" : "7");
				req_str(c, "]");
			}
			req_str(c, "]");
			target = "/json?indent=1000000";
		} else {
			/* 1e18 repetitions of nothing: CPU, no memory */
			req_str(c, "{1000000000:{1000000000:}}");
			target = "/expand?summary=1";
		}
		char *body = strndup(c->req, c->reqlen);
		size_t blen = c->reqlen;
		if (!body)
			exit(2);
		start_request(c, "POST", target, blen, false);
		req_add(c, body, blen);
		free(body);
		struct resp r;
		hang_up(c);
		/* Waited for even after the phase ends: an answer that does
		 * not come is a runaway nobody stopped. */
		exchange(c, &r, ph->cfg->deadline_ms + ph->req_timeout_ms);
		pthread_mutex_lock(&ph->mu);
		struct result *res = ph->res;
		res->run_sent++;
		if (!strcmp(r.stopped, "allocation-limit") && r.status == 413)
			res->run_alloc++;
		else if (!strcmp(r.stopped, "held-limit") && r.status == 413)
			res->run_held++;
		else if (!strcmp(r.stopped, "global-limit") && r.status == 503)
			res->run_global++;
		else if (!strcmp(r.stopped, "deadline") && r.status == 503)
			res->run_deadline++;
		else if (r.status)
			res->run_not_stopped++;
		else
			res->run_unanswered++;
		pthread_mutex_unlock(&ph->mu);
		hang_up(c);
		if (!r.status) {
			struct timespec ts = {0, 20000000};
			nanosleep(&ts, NULL);
		}
	}
	hang_up(c);
	return NULL;
}

/* ---- Streaming and leaking requests ---------------------------------- */

/* The answer /stream?mb=N must give, computed here once per size. */
static char stream_expect[64];
static unsigned stream_expect_mb;

static void stream_expected(unsigned mb)
{
	if (stream_expect_mb == mb && stream_expect[0])
		return;
	static _Alignas(16) char buf[GS_STREAM_CHUNK];
	uint64_t h = 1469598103934665603ull;
	uint64_t chunks = (uint64_t)mb * (MiB / GS_STREAM_CHUNK);
	for (uint64_t i = 0; i < chunks; i++)
		h = gs_stream_step(h, buf, i);
	snprintf(stream_expect, sizeof stream_expect,
	         "length=%llu digest=%016llx\n", (unsigned long long)mb * MiB,
	         (unsigned long long)h);
	stream_expect_mb = mb;
}

/* Well-behaved, but it allocates GiBs in total through a 64 KiB buffer:
 * never to be stopped by its held limit, nor chosen by the global limit
 * (it holds little), nor miss the deadline. */
static void *stream_client(void *arg)
{
	struct client *c = arg;
	struct phase *ph = c->ph;
	char target[64];
	snprintf(target, sizeof target, "/stream?mb=%u", ph->o->stream_mb);
	size_t elen = strlen(stream_expect);
	while (!atomic_load(&ph->stop)) {
		start_request(c, "POST", target, 0, true);
		struct resp r;
		exchange(c, &r, ph->cfg->long_deadline_ms + ph->req_timeout_ms);
		pthread_mutex_lock(&ph->mu);
		struct result *res = ph->res;
		if (r.status == 200 && r.blen == elen &&
		    !memcmp(r.body, stream_expect, elen)) {
			res->stream_ok++;
		} else {
			if (r.stopped[0])
				res->stream_stopped++;
			else
				res->stream_failed++;
			if (!strcmp(r.stopped, "global-limit"))
				res->bystanders++;
			if (!res->first_stream_failure[0])
				snprintf(res->first_stream_failure,
				         sizeof res->first_stream_failure,
				         "status %d %s%s%.*s", r.status,
				         r.stopped, r.error ? r.error : "",
				         r.body
				             ? (int)(r.blen < 80 ? r.blen : 80)
				             : 0,
				         r.body ? r.body : "");
		}
		pthread_mutex_unlock(&ph->mu);
		consume(c, &r);
		if (!r.status || r.close)
			hang_up(c);
		if (!r.status) { /* do not spin on a dead server */
			struct timespec ts = {0, 20000000};
			nanosleep(&ts, NULL);
		}
	}
	hang_up(c);
	return NULL;
}

/* A slow leak: 1 MiB kept every 4 ms, up to 1 GiB.  Its allocation rate
 * is modest; what it holds grows until its held limit stops it. */
static void *leak_client(void *arg)
{
	struct client *c = arg;
	struct phase *ph = c->ph;
	while (!atomic_load(&ph->stop)) {
		start_request(c, "POST", "/leak?mb=1024&ms=4", 0, false);
		struct resp r;
		hang_up(c);
		exchange(c, &r, ph->cfg->long_deadline_ms + ph->req_timeout_ms);
		pthread_mutex_lock(&ph->mu);
		struct result *res = ph->res;
		res->leak_sent++;
		if (!strcmp(r.stopped, "held-limit") && r.status == 413)
			res->leak_held++;
		else if (!strcmp(r.stopped, "global-limit") && r.status == 503)
			res->leak_global++;
		else if (r.stopped[0])
			res->leak_other++;
		else
			res->leak_not_stopped++;
		pthread_mutex_unlock(&ph->mu);
		hang_up(c);
		if (!r.status) {
			struct timespec ts = {0, 20000000};
			nanosleep(&ts, NULL);
		}
	}
	hang_up(c);
	return NULL;
}

/* ---- Bad requests ----------------------------------------------------- */

struct bad {
	const char *name;
	int expect; /* status, or 0: the client hangs up, nothing to read */
};

static const struct bad bads[] = {
    {"malformed request line", 400}, {"oversized headers", 431},
    {"disconnect mid-request", 0},   {"slowloris", 408},
    {"disconnect while running", 0}, {"body too large", 413},
    {"invalid JSON", 400},           {"JSON nested too deeply", 400},
    {"unknown path", 404},           {"chunked body", 501},
    {"bad template", 400},           {"binary garbage", 400},
    {"bad Content-Length", 400},
};
#define NBAD (sizeof bads / sizeof *bads)
#define NBAD_CLIENTS 2

static void bad_request(struct client *c, unsigned kind, struct resp *r)
{
	struct phase *ph = c->ph;
	c->reqlen = 0;
	*r = (struct resp){0};
	switch (kind) {
	case 0:
		req_str(c, "HELLO WORLD\r\n\r\n");
		break;
	case 1:
		req_str(c, "GET /health HTTP/1.1\r\nX-Junk: ");
		for (int i = 0; i < 10000; i++)
			req_add(c, "a", 1);
		req_str(c, "\r\n\r\n");
		break;
	case 2:
		req_str(c, "POST /json HTTP/1.1\r\nContent-Length: 100\r\n\r\n"
		           "{\"a\":");
		break;
	case 3: { /* a byte at a time, never finishing the head */
		if ((c->fd = dial(ph->port)) < 0) {
			r->error = "connect failed";
			return;
		}
		const char *line = "GET /health HTTP/1.1\r\n";
		uint64_t deadline =
		    gs_now_ns() +
		    (uint64_t)(ph->cfg->read_timeout_ms + 3000) * 1000000u;
		for (size_t i = 0; i < 200 && !atomic_load(&ph->stop); i++) {
			char ch = i < strlen(line) ? line[i] : 'x';
			if (!send_all(c->fd, &ch, 1))
				break;
			struct pollfd p = {c->fd, POLLIN, 0};
			if (poll(&p, 1, 50) > 0)
				break; /* the server answered */
		}
		read_response(c, r, deadline);
		hang_up(c);
		return;
	}
	case 4: {
		const char *b = "{1000000000:{1000000000:}}";
		start_request(c, "POST", "/expand?summary=1", strlen(b), false);
		req_str(c, b);
		break;
	}
	case 5:
		req_str(
		    c,
		    "POST /json HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n");
		break;
	case 6: {
		const char *b = "{\"a\":[1,2,],}";
		start_request(c, "POST", "/json", strlen(b), false);
		req_str(c, b);
		break;
	}
	case 7: {
		start_request(c, "POST", "/json", 5000, false);
		for (int i = 0; i < 5000; i++)
			req_add(c, "[", 1);
		break;
	}
	case 8:
		req_str(c, "GET /nope HTTP/1.1\r\n\r\n");
		break;
	case 9:
		req_str(c,
		        "POST /json HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
		        "\r\n2\r\n{}\r\n0\r\n\r\n");
		break;
	case 10: {
		const char *b = "{12:abc";
		start_request(c, "POST", "/expand", strlen(b), false);
		req_str(c, b);
		break;
	}
	case 11:
		for (int i = 0; i < 200; i++) {
			char ch = (char)(1 + below(c, 255));
			req_add(c, &ch, 1);
		}
		req_str(c, "\r\n\r\n");
		break;
	case 12:
		req_str(
		    c,
		    "POST /json HTTP/1.1\r\nContent-Length: 12abc\r\n\r\n{}");
		break;
	}
	if ((c->fd = dial(ph->port)) < 0) {
		r->error = "connect failed";
		return;
	}
	/* The server may answer and close before taking it all: the
	 * answer is what counts. */
	send_all(c->fd, c->req, c->reqlen);
	if (!bads[kind].expect) {
		struct timespec ts = {0, 50000000};
		nanosleep(&ts, NULL); /* let the server start on it */
		hang_up(c);
		return;
	}
	read_response(c, r, gs_now_ns() + 5000000000ull);
	hang_up(c);
}

static void *bad_client(void *arg)
{
	struct client *c = arg;
	struct phase *ph = c->ph;
	for (unsigned i = c->id * 5; !atomic_load(&ph->stop); i++) {
		unsigned kind = i % NBAD;
		struct resp r;
		bad_request(c, kind, &r);
		bool fine = r.status == bads[kind].expect &&
		            (bads[kind].expect || !r.error);
		pthread_mutex_lock(&ph->mu);
		ph->res->bad_sent++;
		if (fine)
			ph->res->bad_expected++;
		else if (!ph->res->first_bad[0])
			snprintf(ph->res->first_bad, sizeof ph->res->first_bad,
			         "%s: got %d%s%s", bads[kind].name, r.status,
			         r.error ? " " : "", r.error ? r.error : "");
		pthread_mutex_unlock(&ph->mu);
		struct timespec ts = {0, 20000000};
		nanosleep(&ts, NULL);
	}
	return NULL;
}

/* ---- Running a phase -------------------------------------------------- */

static bool read_line_by(int fd, char *buf, size_t n, uint64_t deadline)
{
	size_t len = 0;
	while (len + 1 < n) {
		uint64_t now = gs_now_ns();
		if (now >= deadline)
			return false;
		struct pollfd p = {fd, POLLIN, 0};
		if (poll(&p, 1, (int)((deadline - now) / 1000000 + 1)) <= 0)
			continue;
		ssize_t k = read(fd, buf + len, 1);
		if (k <= 0)
			return false;
		if (buf[len++] == '\n')
			break;
	}
	buf[len] = 0;
	return true;
}

static void read_stats(int fd, struct result *res, uint64_t deadline)
{
	char line[128];
	while (read_line_by(fd, line, sizeof line, deadline)) {
		if (!strcmp(line, "end\n")) {
			res->have_stats = true;
			return;
		}
		char name[64];
		unsigned long long v;
		if (sscanf(line, "%63s %llu", name, &v) != 2)
			continue;
		for (int i = 0; i < GS_NSTATS; i++)
			if (!strcmp(name, gs_stat_names[i]))
				res->st[i] = v;
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static double pct(const uint32_t *v, size_t n, double p)
{
	if (!n)
		return NAN;
	size_t i = (size_t)ceil(p * (double)n) - 1;
	if (i >= n)
		i = n - 1;
	return v[i] / 1000.0;
}

static int run_phase(const struct gs_config *cfg, const struct gs_demo_opts *o,
                     struct result *res)
{
	int ready[2], st[2];
	if (pipe2(ready, O_CLOEXEC) || pipe2(st, O_CLOEXEC))
		return -1;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(ready[0]);
		close(st[0]);
		struct gs_config c = *cfg;
		c.limits = res->limits;
		int rc = gs_serve(&c, ready[1], st[1]);
		fflush(NULL);
		_exit(rc);
	}
	close(ready[1]);
	close(st[1]);
	char line[64];
	int port = 0;
	if (!read_line_by(ready[0], line, sizeof line,
	                  gs_now_ns() + 10000000000ull) ||
	    sscanf(line, "port %d", &port) != 1) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		close(ready[0]);
		close(st[0]);
		return -1;
	}
	close(ready[0]);

	struct phase ph = {.cfg = cfg,
	                   .o = o,
	                   .port = port,
	                   .req_timeout_ms = 5000,
	                   .mu = PTHREAD_MUTEX_INITIALIZER,
	                   .res = res};
	ph.caplat = 1u << 20;
	ph.lat = malloc(ph.caplat * sizeof *ph.lat);
	/* Clients, in this order: well-behaved, streaming, runaway, leaking,
	 * bad. */
	unsigned nwell = o->well, nstream = 1,
	         nrun = res->load ? o->runaway : 0, nleak = res->load ? 1 : 0,
	         nbad = res->load ? NBAD_CLIENTS : 0,
	         n = nwell + nstream + nrun + nleak + nbad;
	struct client *cl = calloc(n, sizeof *cl);
	pthread_t *tid = calloc(n, sizeof *tid);
	if (!ph.lat || !cl || !tid)
		exit(2);
	res->stream_mb = o->stream_mb;
	ph.t0 = gs_now_ns();
	for (unsigned i = 0; i < n; i++) {
		cl[i] = (struct client){.ph = &ph,
		                        .id = i,
		                        .rng = 0x9e3779b97f4a7c15ull * (i + 1),
		                        .fd = -1};
		unsigned first = 0;
		void *(*fn)(void *) = bad_client;
		if (i < nwell)
			fn = well_client;
		else if (i < (first = nwell) + nstream)
			fn = stream_client;
		else if (i < (first = nwell + nstream) + nrun)
			fn = runaway_client;
		else if (i < (first = nwell + nstream + nrun) + nleak)
			fn = leak_client;
		else
			first = nwell + nstream + nrun + nleak;
		cl[i].id = i - first;
		pthread_create(&tid[i], NULL, fn, &cl[i]);
	}
	double secs = res->load ? o->load_s : o->baseline_s;
	uint64_t end = ph.t0 + (uint64_t)(secs * 1e9);
	int status = 0;
	struct rusage ru = {0};
	bool dead = false;
	res->died_after = -1;
	while (gs_now_ns() < end) {
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
		if (wait4(pid, &status, WNOHANG, &ru) == pid) {
			dead = true;
			res->died_after = (double)(gs_now_ns() - ph.t0) / 1e9;
			break;
		}
	}
	atomic_store(&ph.stop, true);
	for (unsigned i = 0; i < n; i++)
		pthread_join(tid[i], NULL);
	res->seconds = (double)((dead ? gs_now_ns() : end) - ph.t0) / 1e9;
	if (dead)
		res->seconds = res->died_after;

	if (!dead)
		kill(pid, SIGTERM);
	read_stats(st[0], res, gs_now_ns() + 8000000000ull);
	close(st[0]);
	if (!dead) {
		uint64_t give_up = gs_now_ns() + 5000000000ull;
		while (wait4(pid, &status, WNOHANG, &ru) != pid) {
			if (gs_now_ns() > give_up) {
				kill(pid, SIGKILL);
				wait4(pid, &status, 0, &ru);
				break;
			}
			struct timespec ts = {0, 10000000};
			nanosleep(&ts, NULL);
		}
	}
	res->exited_cleanly = WIFEXITED(status) && WEXITSTATUS(status) == 0 &&
	                      res->have_stats && !dead;
	res->killed = res->st[GS_killed] ||
	              (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	res->maxrss = (uint64_t)ru.ru_maxrss * 1024;

	qsort(ph.lat, ph.nlat, sizeof *ph.lat, cmp_u32);
	res->p50 = pct(ph.lat, ph.nlat, 0.50);
	res->p90 = pct(ph.lat, ph.nlat, 0.90);
	res->p99 = pct(ph.lat, ph.nlat, 0.99);
	res->pmax = pct(ph.lat, ph.nlat, 1.0);
	for (unsigned i = 0; i < n; i++) {
		free(cl[i].buf);
		free(cl[i].req);
		free(cl[i].expect);
	}
	free(cl);
	free(tid);
	free(ph.lat);
	return 0;
}

/* ---- The report ------------------------------------------------------- */

static double mib(uint64_t b)
{
	return (double)b / (double)MiB;
}

/* Peak RSS allowed above the global limit; see README, "Peak RSS and the
 * slack".  Components are printed with the table. */
struct slack {
	uint64_t nonheap, batching, unwinding, overshoot, outside, glibc, total;
};

static struct slack slack_for(const struct result *r, uint64_t limit)
{
	struct slack s;
	uint64_t threads = r->st[GS_threads], workers = r->st[GS_workers];
	uint64_t interval = ml_sample_interval();
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	uint64_t arenas = 8 * (uint64_t)(cpus > 0 ? cpus : 1);
	if (arenas > threads)
		arenas = threads;
	/* What was resident before the first request and is not heap: code,
	 * libraries, touched stacks. */
	s.nonheap = r->st[GS_base_rss] > r->st[GS_base_heap]
	                ? r->st[GS_base_rss] - r->st[GS_base_heap]
	                : 0;
	/* The meter folds each thread's count in every 32 KiB. */
	s.batching = threads * 32768;
	/* The global limit interrupts the largest holder, which may be on
	 * another thread and notices at its next sample; meanwhile the other
	 * tasks go on, up to the library's margin of limit / 8 over it, where
	 * every task that samples stops too (docs/statistics.md, "The global
	 * limit"). */
	s.unwinding = limit / 8;
	/* A task allocates on past the limit until its next sample:
	 * P(more than 16 S) = e^-16 per worker. */
	s.overshoot = workers * 16 * interval;
	/* The head buffer and body of each worker's request are allocated
	 * outside any task: never interrupted, they may land on a full heap. */
	s.outside = workers * r->st[GS_outside_bytes];
	/* Freed memory glibc keeps resident, per arena: the top pad and the
	 * trim threshold (128 KiB each) and the freed small blocks of the
	 * requests it served (well-behaved ones allocate < 100 KiB; after an
	 * interrupted one the server calls malloc_trim). */
	s.glibc = arenas * 2 * MiB;
	s.total = s.nonheap + s.batching + s.unwinding + s.overshoot +
	          s.outside + s.glibc;
	return s;
}

static void row(const char *label, struct result *rs, int n,
                void (*cell)(const struct result *, char *, size_t))
{
	printf("%-34s", label);
	for (int i = 0; i < n; i++) {
		char buf[64];
		cell(&rs[i], buf, sizeof buf);
		printf(" %18s", buf);
	}
	printf("\n");
}

#define CELL(name, ...)                                             \
	static void name(const struct result *r, char *b, size_t n) \
	{                                                           \
		snprintf(b, n, __VA_ARGS__);                        \
	}
CELL(c_secs, "%.1f", r->seconds)
CELL(c_served, "%llu", (unsigned long long)r->st[GS_requests])
CELL(c_ok, "%llu", (unsigned long long)r->well_ok)
CELL(c_failed, "%llu", (unsigned long long)r->well_failed)
CELL(c_tput, "%.0f", r->seconds > 0 ? (double)r->well_ok / r->seconds : 0)
CELL(c_lat, "%.2f/%.2f/%.1f", r->p50, r->p90, r->p99)
CELL(c_max, "%.1f", r->pmax)
CELL(c_rsent, "%llu", (unsigned long long)r->run_sent)
CELL(c_ralloc, "%llu", (unsigned long long)r->run_alloc)
CELL(c_rheld, "%llu", (unsigned long long)r->run_held)
CELL(c_rglobal, "%llu", (unsigned long long)r->run_global)
CELL(c_rdead, "%llu", (unsigned long long)r->run_deadline)
CELL(c_rnot, "%llu",
     (unsigned long long)(r->run_not_stopped + r->run_unanswered))
CELL(c_bad, "%llu/%llu", (unsigned long long)r->bad_expected,
     (unsigned long long)r->bad_sent)
CELL(c_gone, "%llu", (unsigned long long)r->st[GS_stopped_gone])
CELL(c_sok, "%llu", (unsigned long long)r->stream_ok)
CELL(c_sgib, "%.1f", (double)r->stream_ok * r->stream_mb / 1024.0)
CELL(c_sstop, "%llu", (unsigned long long)r->stream_stopped)
CELL(c_slost, "%llu", (unsigned long long)r->stream_failed)
CELL(c_lsent, "%llu", (unsigned long long)r->leak_sent)
CELL(c_lheld, "%llu", (unsigned long long)r->leak_held)
CELL(c_lglobal, "%llu", (unsigned long long)r->leak_global)
CELL(c_lnot, "%llu", (unsigned long long)(r->leak_other + r->leak_not_stopped))
CELL(c_bystanders, "%llu", (unsigned long long)r->bystanders)
CELL(c_heap, "%.1f", mib(r->st[GS_peak_heap]))
CELL(c_hwm, "%.1f", mib(r->st[GS_vm_hwm] ? r->st[GS_vm_hwm] : r->maxrss))

/* What the server counted of the bad clients' requests: its bad_* counters,
 * and the cancellations of clients that went away while their request
 * ran (one of the bad clients' tricks). */
static uint64_t server_bad(const struct result *r)
{
	uint64_t s = r->st[GS_stopped_gone];
	for (int i = GS_bad_malformed; i <= GS_bad_route; i++)
		s += r->st[i];
	return s;
}

static void c_srvbad(const struct result *r, char *b, size_t n)
{
	snprintf(b, n, "%llu", (unsigned long long)server_bad(r));
}

static void c_fate(const struct result *r, char *b, size_t n)
{
	if (r->killed)
		snprintf(b, n, "KILLED at %.1fs", r->died_after);
	else if (r->died_after >= 0)
		snprintf(b, n, "died at %.1fs", r->died_after);
	else
		snprintf(b, n, r->exited_cleanly ? "alive" : "no clean exit");
}

static void table(struct result *rs, int n)
{
	printf("\n%-34s", "");
	for (int i = 0; i < n; i++)
		printf(" %18s", rs[i].limits ? "memlimits" : "no limits");
	printf("\n%-34s", "");
	for (int i = 0; i < n; i++)
		printf(" %18s",
		       rs[i].load ? "+runaway +bad" : "well-behaved only");
	printf("\n");
	row("phase length (s)", rs, n, c_secs);
	row("requests served (server count)", rs, n, c_served);
	row("well-behaved ok", rs, n, c_ok);
	row("well-behaved failed", rs, n, c_failed);
	row("throughput (ok req/s)", rs, n, c_tput);
	row("latency p50/p90/p99 (ms)", rs, n, c_lat);
	row("latency max (ms)", rs, n, c_max);
	row("runaway requests sent", rs, n, c_rsent);
	row("  stopped: allocation limit 413", rs, n, c_ralloc);
	row("  stopped: held limit 413", rs, n, c_rheld);
	row("  stopped: global limit 503", rs, n, c_rglobal);
	row("  stopped: deadline 503", rs, n, c_rdead);
	row("  not stopped / no answer", rs, n, c_rnot);
	row("bad requests as expected/sent", rs, n, c_bad);
	row("  counted by the server", rs, n, c_srvbad);
	row("cancelled: client went away", rs, n, c_gone);
	row("streaming requests served", rs, n, c_sok);
	row("  streamed through 64 KiB (GiB)", rs, n, c_sgib);
	row("  streaming stopped (must be 0)", rs, n, c_sstop);
	row("  streaming failed otherwise", rs, n, c_slost);
	row("slow leak requests sent", rs, n, c_lsent);
	row("  stopped: held limit 413", rs, n, c_lheld);
	row("  stopped: global limit 503", rs, n, c_lglobal);
	row("  deadline / not stopped", rs, n, c_lnot);
	row("bystanders hit (global limit)", rs, n, c_bystanders);
	row("peak heap (MiB)", rs, n, c_heap);
	row("peak RSS, VmHWM (MiB)", rs, n, c_hwm);
	row("server", rs, n, c_fate);
	for (int i = 0; i < n; i++) {
		if (rs[i].first_failure[0])
			printf("  [%d] first well-behaved failure: %s\n", i + 1,
			       rs[i].first_failure);
		if (rs[i].first_stream_failure[0])
			printf("  [%d] first streaming failure: %s\n", i + 1,
			       rs[i].first_stream_failure);
		if (rs[i].first_bad[0])
			printf(
			    "  [%d] first unexpected bad-request answer: %s\n",
			    i + 1, rs[i].first_bad);
	}
}

static bool check(bool ok, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static bool check(bool ok, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	printf("check: %s ", ok ? "PASS" : "FAIL");
	vprintf(fmt, ap);
	printf("\n");
	va_end(ap);
	return ok;
}

int gs_demo(const struct gs_config *cfg, const struct gs_demo_opts *o)
{
	struct result rs[4];
	int n = 0;
	stream_expected(o->stream_mb);
	bool with = !o->no_limits || o->compare,
	     without = o->no_limits || o->compare;
	const char *titles[] = {"limits", "limits+load", "none", "none+load"};
	for (int half = 0; half < 2; half++) {
		if ((half == 0 && !with) || (half == 1 && !without))
			continue;
		for (int load = 0; load < 2; load++) {
			struct result *r = &rs[n++];
			*r = (struct result){.title = titles[2 * half + load],
			                     .limits = half == 0,
			                     .load = load};
			fprintf(stderr,
			        "guarded-server demo: phase %d: %s, %s ...\n",
			        n, r->limits ? "memlimits" : "no limits",
			        load ? "well-behaved + runaway + bad clients"
			             : "well-behaved clients only");
			if (run_phase(cfg, o, r)) {
				fprintf(stderr, "guarded-server demo: cannot "
				                "start the server\n");
				return 2;
			}
		}
	}

	printf("guarded-server demo: 127.0.0.1, %u workers; %u well-behaved, "
	       "1 streaming, %u runaway, 1 leaking, 2 bad clients\n",
	       cfg->workers, o->well, o->runaway);
	printf("memlimits: global limit %.0f MiB; per request, allocated/held: "
	       "/json %.0f/%.0f MiB (FAIL),\n  /expand %.0f/%.0f MiB (JUMP), "
	       "/stream -/%.0f MiB, /leak -/%.0f MiB (FAIL); deadline %u ms "
	       "(/stream, /leak %u ms);\n  sample interval %llu B\n",
	       mib(cfg->global_limit), mib(cfg->json_limit),
	       mib(cfg->json_held), mib(cfg->expand_limit),
	       mib(cfg->expand_held), mib(cfg->stream_held),
	       mib(cfg->leak_held), cfg->deadline_ms, cfg->long_deadline_ms,
	       (unsigned long long)ml_sample_interval());
	if (without)
		printf("no limits: handlers run bare; an RSS watchdog at %.0f "
		       "MiB stands in for the OOM killer\n",
		       mib(cfg->watchdog_rss));
	printf("runaway mix, in turn: expansion bomb (/expand, 8e12 bytes), "
	       "indent bomb (/json?indent=1e6),\n  expansion bomb, CPU spin "
	       "(/expand, 1e18 empty repetitions); bad requests: %zu kinds\n",
	       NBAD);
	printf("streaming: /stream?mb=%u (%u MiB through one 64 KiB buffer); "
	       "slow leak: /leak?mb=1024&ms=4 (keeps 1 MiB every 4 ms)\n",
	       o->stream_mb, o->stream_mb);
	double load[3];
	if (getloadavg(load, 3) == 3)
		printf("machine: %ld CPUs, load average %.1f at the end (other "
		       "work shares them: latency and throughput are noisy)\n",
		       sysconf(_SC_NPROCESSORS_ONLN), load[0]);
	table(rs, n);
	if (without)
		printf(
		    "peak heap: the meter with memlimits; glibc's mallinfo2() "
		    "without (it counts blocks not yet touched)\n");

	printf("\n");
	bool pass = true;
	for (int i = 0; i < n; i++) {
		struct result *r = &rs[i];
		if (!r->limits)
			continue;
		char tag[48];
		snprintf(tag, sizeof tag, "[%d %s]", i + 1, r->title);
		pass &=
		    check(r->well_ok > 0 && r->well_failed == 0,
		          "%s no well-behaved request failed (%llu ok, %llu "
		          "failed)",
		          tag, (unsigned long long)r->well_ok,
		          (unsigned long long)r->well_failed);
		if (r->load)
			pass &= check(
			    r->run_sent > 0 &&
			        r->run_sent == r->run_alloc + r->run_held +
			                           r->run_global +
			                           r->run_deadline,
			    "%s every runaway request was stopped (%llu "
			    "of %llu)",
			    tag,
			    (unsigned long long)(r->run_alloc + r->run_held +
			                         r->run_global +
			                         r->run_deadline),
			    (unsigned long long)r->run_sent);
		pass &= check(r->bystanders == 0,
		              "%s no bystander hit: no well-behaved or "
		              "streaming request was stopped by the global "
		              "limit (%llu)",
		              tag, (unsigned long long)r->bystanders);
		pass &=
		    check(r->stream_ok > 0 && r->stream_stopped == 0 &&
		              r->stream_failed == 0,
		          "%s every streaming request was served (%llu "
		          "of %u MiB each, %llu stopped, %llu failed)",
		          tag, (unsigned long long)r->stream_ok, r->stream_mb,
		          (unsigned long long)r->stream_stopped,
		          (unsigned long long)r->stream_failed);
		if (r->load)
			pass &= check(
			    r->leak_held > 0 &&
			        r->leak_held + r->leak_global == r->leak_sent,
			    "%s every slow leak was stopped by a "
			    "memory limit (%llu of %llu: %llu by its "
			    "held limit, %llu by the global limit)",
			    tag,
			    (unsigned long long)(r->leak_held + r->leak_global),
			    (unsigned long long)r->leak_sent,
			    (unsigned long long)r->leak_held,
			    (unsigned long long)r->leak_global);
		struct slack s = slack_for(r, cfg->global_limit);
		uint64_t hwm = r->st[GS_vm_hwm];
		pass &=
		    check(hwm > 0 && hwm <= cfg->global_limit + s.total,
		          "%s peak RSS %.1f MiB <= global limit %.0f MiB + "
		          "slack %.1f MiB (non-heap at start %.1f, meter "
		          "batching %.1f, largest holder unwinding %.1f, "
		          "sampling overshoot %.1f, buffers outside tasks "
		          "%.1f, glibc arenas %.1f)",
		          tag, mib(hwm), mib(cfg->global_limit), mib(s.total),
		          mib(s.nonheap), mib(s.batching), mib(s.unwinding),
		          mib(s.overshoot), mib(s.outside), mib(s.glibc));
		if (r->load) {
			/* The last request of each bad client may still be
			 * unseen when the server is told to stop. */
			uint64_t counted = server_bad(r);
			pass &= check(
			    r->exited_cleanly && r->bad_sent > 0 &&
			        r->bad_expected == r->bad_sent &&
			        counted <= r->bad_sent &&
			        counted + NBAD_CLIENTS >= r->bad_sent,
			    "%s the server survived %llu bad requests, "
			    "answered each as expected (%llu) and counted "
			    "%llu",
			    tag, (unsigned long long)r->bad_sent,
			    (unsigned long long)r->bad_expected,
			    (unsigned long long)counted);
		} else {
			pass &= check(r->exited_cleanly,
			              "%s the server exited "
			              "cleanly",
			              tag);
		}
	}
	if (!with) {
		/* Only the no-limits half: report what the same checks say. */
		for (int i = 0; i < n; i++) {
			struct result *r = &rs[i];
			bool ok =
			    r->well_failed == 0 && !r->killed &&
			    r->stream_failed == 0 &&
			    (!r->load ||
			     (r->run_sent == r->run_alloc + r->run_held +
			                         r->run_global +
			                         r->run_deadline &&
			      r->leak_sent == r->leak_held + r->leak_global));
			pass &=
			    check(ok, "[%d %s] no limits: %s", i + 1, r->title,
			          ok ? "all served" : "requests lost");
		}
	}
	printf("guarded-server demo: %s\n", pass ? "PASS" : "FAIL");
	return pass ? 0 : 1;
}
