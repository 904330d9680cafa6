/* An event-loop server (libuv) whose requests are tasks.
 *
 * One thread runs the server's loop; every connection is one request,
 * read in many callbacks interleaved with the other requests.  Each
 * request is a task object (ml_task_new) and each of its callbacks runs
 * as a slice of it (ml_task_run around the handler body): its allocation
 * and held limits hold across all of them.  A runaway request is stopped
 * (FAIL delivery: its allocations fail, the handler sees NULL and the
 * request is answered "STOPPED" and closed) while the other requests on
 * the same thread carry on.  One kind of request hands heavy work to the
 * loop's thread pool (uv_queue_work), carrying its task: the work runs as
 * a slice on the pool thread, and a runaway there is stopped too.
 *
 * --demo starts the server and, on a second thread with a loop of its
 * own, clients of four kinds, then prints a table; --quick is the short
 * run that `make check` does (tests/api/test-examples.sh).
 *
 * Protocol: a request is "KIND CHUNKS\n" then CHUNKS lines of data; the
 * answer is "OK <bytes>\n" or "STOPPED <reason>\n".  Kinds: small (keeps
 * its chunks until the end), leak (each chunk makes it keep 4 MiB more),
 * pool (hands a 2 MiB job to the pool), pool-leak (hands a job that keeps
 * allocating). */
#include <memlimits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

enum kind { K_SMALL, K_LEAK, K_POOL, K_POOL_LEAK, NKINDS };
static const char *const kind_name[NKINDS] = {"small", "leak", "pool",
                                              "pool-leak"};

/* ---- The server --------------------------------------------------------- */

struct request {
	uv_tcp_t tcp;
	ml_task *task; /* this request's limits, across all its callbacks */
	char line[256];
	size_t len;
	int kind, chunks, seen;
	void **kept; /* what the request holds while it runs */
	size_t nkept, capkept;
	size_t bytes;
	bool busy, done; /* a pool job is under way; answered */
	uv_work_t work;
	ml_status work_status;
};

static ml_limits request_limits(void)
{
	ml_limits l = ML_LIMITS_INIT;
	l.alloc_bytes = (uint64_t)256 << 20; /* work over the whole request */
	l.held_bytes = (uint64_t)16 << 20;   /* memory it may hold at once  */
	l.delivery = ML_DELIVER_FAIL;
	return l;
}

static bool keep(struct request *r, void *p)
{
	if (r->nkept == r->capkept) {
		size_t cap = r->capkept ? 2 * r->capkept : 16;
		void **k = realloc(r->kept, cap * sizeof *k);
		if (!k)
			return false;
		r->kept = k;
		r->capkept = cap;
	}
	r->kept[r->nkept++] = p;
	return true;
}

static void release(struct request *r)
{
	for (size_t i = 0; i < r->nkept; i++)
		free(r->kept[i]);
	free(r->kept);
	r->kept = NULL;
	r->nkept = r->capkept = 0;
}

static void on_closed(uv_handle_t *h)
{
	struct request *r = h->data;
	release(r);
	ml_task_free(r->task);
	free(r);
}

static void on_written(uv_write_t *w, int status)
{
	(void)status;
	free(w);
}

static void answer(struct request *r, const char *text)
{
	size_t n = strlen(text);
	uv_write_t *w = malloc(sizeof *w + n);
	if (w) {
		memcpy(w + 1, text, n);
		uv_buf_t b = uv_buf_init((char *)(w + 1), (unsigned)n);
		if (uv_write(w, (uv_stream_t *)&r->tcp, &b, 1, on_written))
			free(w);
	}
	r->done = true;
	uv_read_stop((uv_stream_t *)&r->tcp);
	uv_close((uv_handle_t *)&r->tcp, on_closed);
}

static void answer_status(struct request *r, ml_status st)
{
	char text[96];
	if (st == ML_OK)
		snprintf(text, sizeof text, "OK %zu\n", r->bytes);
	else
		snprintf(text, sizeof text, "STOPPED %s\n", ml_status_str(st));
	release(r); /* a stopped request gives back what it holds */
	answer(r, text);
}

/* Pool work, run as a slice of the request's task on a pool thread. */
static void *pool_job(void *arg)
{
	struct request *r = arg;
	size_t blocks = r->kind == K_POOL ? 2 : 1 << 14; /* 2 MiB / 16 GiB */
	for (size_t i = 0; i < blocks; i++) {
		char *p = malloc(1 << 20);
		if (!p)
			return NULL; /* stopped: its allocations fail */
		memset(p, 1, 4096);
		r->bytes += 1 << 20;
		if (r->kind == K_POOL)
			free(p);
		else if (!keep(r, p)) {
			free(p);
			return NULL;
		}
	}
	return r;
}

static void on_work(uv_work_t *w)
{
	struct request *r = w->data;
	r->work_status = ml_task_run(r->task, pool_job, r, NULL);
}

static void on_work_done(uv_work_t *w, int status)
{
	struct request *r = w->data;
	(void)status;
	r->busy = false;
	answer_status(r, r->work_status);
}

/* One line of the request: the handler body, run as a slice. */
static void *handle_line(void *arg)
{
	struct request *r = arg;
	if (r->kind < 0) {
		char name[32];
		if (sscanf(r->line, "%31s %d", name, &r->chunks) != 2)
			return NULL;
		for (int k = 0; k < NKINDS; k++)
			if (!strcmp(name, kind_name[k]))
				r->kind = k;
		return r->kind < 0 ? NULL : r;
	}
	r->seen++;
	size_t n = r->kind == K_LEAK ? (size_t)4 << 20 : r->len + 1;
	char *copy = malloc(n);
	if (!copy)
		return NULL; /* stopped */
	memcpy(copy, r->line, r->len + 1);
	if (r->kind == K_LEAK)
		memset(copy, 1, n);
	r->bytes += n;
	if (!keep(r, copy)) {
		free(copy);
		return NULL;
	}
	return r;
}

static void on_line(struct request *r)
{
	ml_outcome out;
	ml_status st = ml_task_run(r->task, handle_line, r, &out);
	if (st != ML_OK || !out.ret) {
		answer_status(r, st != ML_OK ? st : ML_EINVAL);
		return;
	}
	if (r->seen < r->chunks)
		return;
	if (r->kind == K_POOL || r->kind == K_POOL_LEAK) {
		/* The task goes with the work (ml_task_current() inside a
		 * slice would give the same task); the request frees it in
		 * its close callback, after the work is done. */
		r->busy = true;
		r->work.data = r;
		uv_queue_work(r->tcp.loop, &r->work, on_work, on_work_done);
		return;
	}
	answer_status(r, ML_OK);
}

static void on_alloc(uv_handle_t *h, size_t size, uv_buf_t *b)
{
	(void)h;
	static char buf[65536]; /* one loop thread: one read at a time */
	(void)size;
	*b = uv_buf_init(buf, sizeof buf);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct request *r = s->data;
	if (n < 0) {
		if (!r->done && !r->busy) {
			r->done = true;
			uv_close((uv_handle_t *)s, on_closed);
		}
		return;
	}
	for (ssize_t i = 0; i < n && !r->done && !r->busy; i++) {
		char c = b->base[i];
		if (c != '\n') {
			if (r->len < sizeof r->line - 1)
				r->line[r->len++] = c;
			continue;
		}
		r->line[r->len] = 0;
		on_line(r);
		r->len = 0;
	}
}

static void on_connection(uv_stream_t *server, int status)
{
	if (status < 0)
		return;
	struct request *r = calloc(1, sizeof *r);
	ml_limits l = request_limits();
	if (!r || !(r->task = ml_task_new(&l))) {
		free(r);
		return;
	}
	r->kind = -1;
	uv_tcp_init(server->loop, &r->tcp);
	r->tcp.data = r;
	if (uv_accept(server, (uv_stream_t *)&r->tcp) == 0)
		uv_read_start((uv_stream_t *)&r->tcp, on_alloc, on_read);
	else
		uv_close((uv_handle_t *)&r->tcp, on_closed);
}

/* ---- The demo's clients (a thread with a loop of its own) ---------------- */

struct client {
	uv_tcp_t tcp;
	uv_connect_t conn;
	uv_timer_t timer;
	int kind, chunks, sent;
	char reply[128];
	size_t rlen;
	bool closed;
};

static int port;
/* nclients is set by main before the client thread starts; finished is
 * counted on the client thread and read by the server's watch timer on the
 * loop thread, hence atomic.  The watch must not compare against a count
 * the client thread is still building: under load it ran before any
 * client existed (0 of 0 finished), closed the listening socket, and every
 * connection was refused. */
static int nclients;
static atomic_int finished;
static int served[NKINDS], stopped[NKINDS], sent_kind[NKINDS];
static uv_loop_t client_loop;

static void client_write(struct client *c, const char *text)
{
	size_t n = strlen(text);
	uv_write_t *w = malloc(sizeof *w + n);
	memcpy(w + 1, text, n);
	uv_buf_t b = uv_buf_init((char *)(w + 1), (unsigned)n);
	if (uv_write(w, (uv_stream_t *)&c->tcp, &b, 1, on_written))
		free(w);
}

static void client_closed(uv_handle_t *h)
{
	(void)h;
}

static void client_done(struct client *c)
{
	if (c->closed)
		return;
	c->closed = true;
	c->reply[c->rlen] = 0;
	if (!strncmp(c->reply, "OK", 2))
		served[c->kind]++;
	else
		stopped[c->kind]++;
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->timer, client_closed);
	uv_close((uv_handle_t *)&c->tcp, client_closed);
	atomic_fetch_add(&finished, 1);
}

static void client_alloc(uv_handle_t *h, size_t size, uv_buf_t *b)
{
	struct client *c = h->data;
	(void)size;
	*b = uv_buf_init(c->reply + c->rlen,
	                 (unsigned)(sizeof c->reply - 1 - c->rlen));
}

static void client_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	struct client *c = s->data;
	(void)b;
	if (n > 0)
		c->rlen += (size_t)n;
	if (n < 0 || memchr(c->reply, '\n', c->rlen))
		client_done(c);
}

/* One chunk per tick: the server sees each request in many callbacks,
 * interleaved with the others. */
static void client_tick(uv_timer_t *t)
{
	struct client *c = t->data;
	if (c->sent == c->chunks) {
		uv_timer_stop(t);
		return;
	}
	client_write(c, "some data of the request, one chunk\n");
	c->sent++;
}

static void client_connected(uv_connect_t *req, int status)
{
	struct client *c = req->data;
	if (status < 0) {
		client_done(c);
		return;
	}
	char head[64];
	snprintf(head, sizeof head, "%s %d\n", kind_name[c->kind], c->chunks);
	client_write(c, head);
	uv_read_start((uv_stream_t *)&c->tcp, client_alloc, client_read);
	uv_timer_start(&c->timer, client_tick, 1, 1);
}

/* Mostly small requests, some runaways of each kind. */
static void client_counts(int per, int counts[NKINDS])
{
	counts[K_SMALL] = 8 * per;
	counts[K_LEAK] = counts[K_POOL] = counts[K_POOL_LEAK] = per;
}

static void clients(void *arg)
{
	int per = *(int *)arg;
	int counts[NKINDS];
	client_counts(per, counts);
	struct sockaddr_in addr;
	uv_ip4_addr("127.0.0.1", port, &addr);
	uv_loop_init(&client_loop);
	for (int k = 0; k < NKINDS; k++)
		for (int i = 0; i < counts[k]; i++) {
			struct client *c = calloc(1, sizeof *c);
			c->kind = k;
			c->chunks = 20;
			c->tcp.data = c;
			c->conn.data = c;
			c->timer.data = c;
			uv_tcp_init(&client_loop, &c->tcp);
			uv_timer_init(&client_loop, &c->timer);
			uv_tcp_connect(&c->conn, &c->tcp,
			               (const struct sockaddr *)&addr,
			               client_connected);
			sent_kind[k]++;
		}
	uv_run(&client_loop, UV_RUN_DEFAULT);
}

static uv_tcp_t server;
static uv_timer_t watch;

static void watch_done(uv_timer_t *t)
{
	if (atomic_load(&finished) < nclients)
		return;
	uv_timer_stop(t);
	uv_close((uv_handle_t *)t, NULL);
	uv_close((uv_handle_t *)&server, NULL);
}

int main(int argc, char **argv)
{
	bool demo = argc > 1 &&
	            (!strcmp(argv[1], "--demo") || !strcmp(argv[1], "--quick"));
	int per = argc > 1 && !strcmp(argv[1], "--quick") ? 2 : 5;
	uv_loop_t *loop = uv_default_loop();
	struct sockaddr_in addr;
	uv_ip4_addr("127.0.0.1", demo ? 0 : 7070, &addr);
	uv_tcp_init(loop, &server);
	if (uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0) ||
	    uv_listen((uv_stream_t *)&server, 128, on_connection)) {
		fprintf(stderr, "event-loop: cannot listen\n");
		return 1;
	}
	struct sockaddr_in bound;
	int len = sizeof bound;
	uv_tcp_getsockname(&server, (struct sockaddr *)&bound, &len);
	port = ntohs(bound.sin_port);
	if (!demo) {
		printf("listening on 127.0.0.1:%d\n", port);
		return uv_run(loop, UV_RUN_DEFAULT);
	}
	int counts[NKINDS];
	client_counts(per, counts);
	for (int k = 0; k < NKINDS; k++)
		nclients += counts[k];
	uv_thread_t th;
	uv_thread_create(&th, clients, &per);
	uv_timer_init(loop, &watch);
	uv_timer_start(&watch, watch_done, 10, 10);
	uv_run(loop, UV_RUN_DEFAULT);
	uv_thread_join(&th);
	printf("%-10s %6s %7s %8s  %s\n", "kind", "sent", "served", "stopped",
	       "expected");
	int bad = 0;
	for (int k = 0; k < NKINDS; k++) {
		bool runaway = k == K_LEAK || k == K_POOL_LEAK;
		bool ok = runaway ? stopped[k] == sent_kind[k]
		                  : served[k] == sent_kind[k];
		bad += !ok;
		printf("%-10s %6d %7d %8d  %s%s\n", kind_name[k], sent_kind[k],
		       served[k], stopped[k],
		       runaway ? "all stopped" : "all served",
		       ok ? "" : "  <- NOT MET");
	}
	printf("%s: every runaway request stopped, no other request "
	       "failed, on one loop thread\n",
	       bad ? "FAILED" : "ok");
	return bad ? 1 : 0;
}
