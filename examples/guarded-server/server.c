/* The guarded server: HTTP/1.1 on 127.0.0.1, an acceptor, a fixed pool of
 * workers that each serve one connection at a time (keep-alive), and a
 * timer thread that cancels requests whose deadline passed or whose client
 * went away.  Every request runs as a memlimits task, under an allocation
 * limit and a held limit (memory allocated and not freed yet):
 *   /json   FAIL delivery: the parser checks every malloc and unwinds by
 *           returning, freeing what it built (json.c);
 *   /expand JUMP delivery: everything lives in one arena, freed by a
 *           cleanup handler when the task is interrupted (expand.c);
 *   /stream FAIL delivery: a digest of N MiB made in 64 KiB chunks, each
 *           malloc'd and freed: it allocates a lot and holds little, so it
 *           has a held limit and no allocation limit;
 *   /leak   FAIL delivery: keeps 1 MiB blocks, slowly, until its held
 *           limit stops it (the demo's slow leak).
 * Reading requests and writing responses happen outside the task: only the
 * work whose size the client controls is limited. */
#define _GNU_SOURCE
#include "gs.h"
#include "expand.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <memlimits.h>
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
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

const char *const gs_stat_names[GS_NSTATS] = {
#define GS_NAME(name) #name,
    GS_STATS(GS_NAME)
#undef GS_NAME
};

#define HEAD_MAX 8192         /* request line and headers */
#define BODY_MAX (1u << 20)   /* Content-Length */
#define QUEUE_CAP 256         /* accepted connections waiting for a worker */
#define TICK_NS 5000000ull    /* timer thread period */
#define MAX_INDENT 10000000ul /* /json?indent=N */
#define LEAK_MAX_MB 1024      /* /leak?mb=N */
#define LEAK_MAX_MS 100       /* /leak?ms=M, the pause after each MiB */

void gs_default_config(struct gs_config *c)
{
	*c = (struct gs_config){
	    .port = 0,
	    .workers = 12,
	    .limits = true,
	    .global_limit = 256 * MiB,
	    .json_limit = 32 * MiB,
	    .expand_limit = 160 * MiB,
	    .json_held = 16 * MiB,
	    .expand_held = 128 * MiB,
	    .stream_held = 16 * MiB,
	    .leak_held = 64 * MiB,
	    .deadline_ms = 2000,
	    .long_deadline_ms = 20000,
	    .read_timeout_ms = 1000,
	    .idle_timeout_ms = 5000,
	    .watchdog_rss = 1024 * MiB,
	    .rlimit_as = 4096 * MiB,
	};
}

uint64_t gs_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t gs_rss(void)
{
	/* Opened once: a procfs file re-read from offset 0 is current. */
	static _Atomic int fd = -1;
	int f = atomic_load(&fd);
	if (f < 0) {
		int nf = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
		int expect = -1;
		if (nf >= 0 &&
		    !atomic_compare_exchange_strong(&fd, &expect, nf))
			close(nf);
		f = atomic_load(&fd);
		if (f < 0)
			return 0;
	}
	char buf[128];
	ssize_t n = pread(f, buf, sizeof buf - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	unsigned long long size, resident;
	if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
		return 0;
	return resident * (uint64_t)sysconf(_SC_PAGESIZE);
}

static uint64_t vm_hwm(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 0;
	char line[256];
	unsigned long long kb = 0;
	while (fgets(line, sizeof line, f))
		if (sscanf(line, "VmHWM: %llu kB", &kb) == 1)
			break;
	fclose(f);
	return kb * 1024;
}

/* ---- Server state ----------------------------------------------------- */

static const struct gs_config *cfg;
static _Atomic uint64_t stats[GS_NSTATS];
static _Atomic int stopping; /* lock-free: async-signal-safe */
static int stats_out = -1;
static atomic_bool timer_done;

static void count(enum gs_stat s)
{
	atomic_fetch_add_explicit(&stats[s], 1, memory_order_relaxed);
}

static void raise_to(enum gs_stat s, uint64_t v)
{
	uint64_t old = atomic_load_explicit(&stats[s], memory_order_relaxed);
	while (v > old && !atomic_compare_exchange_weak(&stats[s], &old, v))
		;
}

/* Formats into a stack buffer and write(2)s: the watchdog calls this from
 * the timer thread right before it kills the process. */
static void write_stats(int fd)
{
	if (fd < 0)
		return;
	char buf[2048];
	size_t n = 0;
	for (int i = 0; i < GS_NSTATS; i++)
		n += (size_t)snprintf(
		    buf + n, sizeof buf - n, "%s %llu\n", gs_stat_names[i],
		    (unsigned long long)atomic_load(&stats[i]));
	n += (size_t)snprintf(buf + n, sizeof buf - n, "end\n");
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, buf + off, n - off);
		if (w <= 0 && errno != EINTR)
			break;
		if (w > 0)
			off += (size_t)w;
	}
}

/* Accepted connections waiting for a worker. */
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int fds[QUEUE_CAP];
	unsigned head, n;
} queue = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

/* What the timer thread sees of each worker's running request. */
enum reason { R_NONE, R_DEADLINE, R_GONE, R_SHUTDOWN };
struct slot {
	pthread_mutex_t mu;
	ml_token *tok; /* NULL: no request running */
	int fd;
	uint64_t deadline;
	enum reason reason;
};
static struct slot *slots;

static bool push_fd(int fd)
{
	pthread_mutex_lock(&queue.mu);
	bool ok = queue.n < QUEUE_CAP;
	if (ok) {
		queue.fds[(queue.head + queue.n++) % QUEUE_CAP] = fd;
		pthread_cond_signal(&queue.cv);
	}
	pthread_mutex_unlock(&queue.mu);
	return ok;
}

static int pop_fd(void)
{
	int fd = -1;
	pthread_mutex_lock(&queue.mu);
	if (!queue.n && !stopping) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 100000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&queue.cv, &queue.mu, &ts);
	}
	if (queue.n) {
		fd = queue.fds[queue.head];
		queue.head = (queue.head + 1) % QUEUE_CAP;
		queue.n--;
	}
	pthread_mutex_unlock(&queue.mu);
	return fd;
}

/* ---- Timer thread ----------------------------------------------------- */

static bool peer_gone(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
	                  errno != EINTR);
}

static void *timer_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&stats[GS_killed])) {
		uint64_t now = gs_now_ns();
		for (unsigned i = 0; i < cfg->workers; i++) {
			struct slot *s = &slots[i];
			pthread_mutex_lock(&s->mu);
			if (s->tok && !ml_token_is_set(s->tok)) {
				enum reason r = R_NONE;
				if (stopping)
					r = R_SHUTDOWN;
				else if (now >= s->deadline)
					r = R_DEADLINE;
				else if (peer_gone(s->fd))
					r = R_GONE;
				if (r) {
					s->reason = r;
					ml_token_set(s->tok);
				}
			}
			pthread_mutex_unlock(&s->mu);
		}
		uint64_t rss = gs_rss();
		raise_to(GS_peak_rss_sampled, rss);
		raise_to(GS_peak_heap, ml_global_memory_usage());
		if (cfg->watchdog_rss && rss > cfg->watchdog_rss) {
			/* Stands in for the kernel's OOM killer (or a cgroup
			 * limit): the whole process goes, every request with
			 * it.  The counters go out first, for the demo. */
			atomic_store(&stats[GS_killed], 1);
			atomic_store(&stats[GS_vm_hwm], rss);
			write_stats(stats_out);
			fprintf(stderr,
			        "guarded-server: RSS %llu MiB above %llu MiB: "
			        "killed by the watchdog\n",
			        (unsigned long long)(rss / MiB),
			        (unsigned long long)(cfg->watchdog_rss / MiB));
			kill(getpid(), SIGKILL);
		}
		struct timespec ts = {0, (long)TICK_NS};
		nanosleep(&ts, NULL);
		if (atomic_load(&timer_done))
			break;
	}
	return NULL;
}

/* ---- I/O helpers ------------------------------------------------------ */

/* recv with an absolute deadline, in slices so that shutdown is noticed.
 * >0 bytes, 0 EOF, -1 error, -2 timeout or shutdown. */
static ssize_t recv_by(int fd, char *buf, size_t n, uint64_t deadline)
{
	for (;;) {
		uint64_t now = gs_now_ns();
		if (now >= deadline || stopping)
			return -2;
		uint64_t left_ms = (deadline - now) / 1000000 + 1;
		struct pollfd p = {fd, POLLIN, 0};
		int r = poll(&p, 1, left_ms > 100 ? 100 : (int)left_ms);
		if (r < 0 && errno != EINTR)
			return -1;
		if (r <= 0)
			continue;
		ssize_t k = recv(fd, buf, n, 0);
		if (k >= 0)
			return k;
		if (errno != EINTR && errno != EAGAIN)
			return -1;
	}
}

/* Send everything in iov (the socket has SO_SNDTIMEO).  false on error. */
static bool send_iov(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
		ssize_t k = sendmsg(fd, &m, MSG_NOSIGNAL);
		if (k < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		while (n > 0 && (size_t)k >= iov->iov_len) {
			k -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + k;
			iov->iov_len -= (size_t)k;
		}
	}
	return true;
}

static const char *status_text(int code)
{
	switch (code) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 411:
		return "Length Required";
	case 413:
		return "Content Too Large";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	}
	return "Unknown";
}

/* Head plus body pieces.  stopped: the X-Stopped-By value, or NULL. */
static bool respond_iov(int fd, int code, bool keep, const char *stopped,
                        struct iovec *body, int nbody, size_t len)
{
	char head[512];
	int h = snprintf(
	    head, sizeof head,
	    "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\n"
	    "Content-Length: %zu\r\nConnection: %s\r\n%s%s%s%s\r\n",
	    code, status_text(code), len, keep ? "keep-alive" : "close",
	    stopped ? "X-Stopped-By: " : "", stopped ? stopped : "",
	    stopped ? "\r\n" : "", code == 503 ? "Retry-After: 1\r\n" : "");
	struct iovec iov[64];
	int n = 0;
	iov[n++] = (struct iovec){head, (size_t)h};
	for (int i = 0; i < nbody; i++) {
		iov[n++] = body[i];
		if (n == 64) {
			if (!send_iov(fd, iov, n))
				return false;
			n = 0;
		}
	}
	return send_iov(fd, iov, n);
}

static bool respond(int fd, int code, bool keep, const char *stopped,
                    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static bool respond(int fd, int code, bool keep, const char *stopped,
                    const char *fmt, ...)
{
	char body[256];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(body, sizeof body, fmt, ap);
	va_end(ap);
	if (n < 0)
		n = 0;
	if ((size_t)n >= sizeof body)
		n = sizeof body - 1;
	struct iovec iov = {body, (size_t)n};
	return respond_iov(fd, code, keep, stopped, &iov, 1, (size_t)n);
}

/* ---- Requests --------------------------------------------------------- */

enum route { ROUTE_JSON, ROUTE_EXPAND, ROUTE_STREAM, ROUTE_LEAK };

struct request {
	char method[16];
	const char *path, *query;
	size_t path_len, query_len;
	bool keep;
	long long content_length; /* -1: none */
	bool chunked;
};

static bool is_tchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || strchr("!#$%&'*+-.^_`|~", c);
}

/* Parse the head buf[0..n) (ending in CRLF CRLF).  Returns 0 or an HTTP
 * status for the error. */
static int parse_head(char *buf, size_t n, struct request *rq)
{
	*rq = (struct request){.content_length = -1};
	char *p = buf, *end = buf + n;
	size_t m = 0;
	while (p < end && *p >= 'A' && *p <= 'Z' && m < sizeof rq->method - 1)
		rq->method[m++] = *p++;
	if (!m || p >= end || *p++ != ' ')
		return 400;
	rq->path = p;
	while (p<end && * p> ' ' && *p < 0x7f)
		p++;
	if (p == rq->path || *rq->path != '/' || p >= end || *p != ' ')
		return 400;
	char *q = memchr(rq->path, '?', (size_t)(p - rq->path));
	rq->path_len = (size_t)((q ? q : p) - rq->path);
	if (q) {
		rq->query = q + 1;
		rq->query_len = (size_t)(p - q - 1);
	}
	p++;
	if (end - p < 10 || memcmp(p, "HTTP/1.", 7) ||
	    (p[7] != '0' && p[7] != '1') || p[8] != '\r' || p[9] != '\n')
		return 400;
	rq->keep = p[7] == '1';
	p += 10;
	while (p < end) {
		char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol || eol == p || eol[-1] != '\r')
			return 400;
		if (eol == p + 1) /* the empty line */
			return 0;
		char *colon = p;
		while (colon < eol && is_tchar(*colon))
			colon++;
		if (colon == p || *colon != ':')
			return 400;
		size_t name_len = (size_t)(colon - p);
		char *v = colon + 1, *ve = eol - 1;
		while (v < ve && (*v == ' ' || *v == '\t'))
			v++;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		size_t vl = (size_t)(ve - v);
		if (name_len == 14 && !strncasecmp(p, "Content-Length", 14)) {
			long long cl = 0;
			if (!vl || vl > 12)
				return 400;
			for (size_t i = 0; i < vl; i++) {
				if (v[i] < '0' || v[i] > '9')
					return 400;
				cl = cl * 10 + (v[i] - '0');
			}
			if (rq->content_length >= 0 && rq->content_length != cl)
				return 400;
			rq->content_length = cl;
		} else if (name_len == 17 &&
		           !strncasecmp(p, "Transfer-Encoding", 17)) {
			rq->chunked = true;
		} else if (name_len == 10 &&
		           !strncasecmp(p, "Connection", 10)) {
			if (vl == 5 && !strncasecmp(v, "close", 5))
				rq->keep = false;
			else if (vl == 10 && !strncasecmp(v, "keep-alive", 10))
				rq->keep = true;
		}
		p = eol + 1;
	}
	return 400;
}

/* The value of key in a query string: true if present. */
static bool query_get(const struct request *rq, const char *key, const char **v,
                      size_t *vl)
{
	size_t kl = strlen(key);
	const char *p = rq->query, *end = p ? p + rq->query_len : NULL;
	while (p && p < end) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *e = amp ? amp : end;
		if ((size_t)(e - p) > kl && !memcmp(p, key, kl) &&
		    p[kl] == '=') {
			*v = p + kl + 1;
			*vl = (size_t)(e - *v);
			return true;
		}
		p = amp ? amp + 1 : end;
	}
	return false;
}

static bool query_ulong(const struct request *rq, const char *key,
                        unsigned long max, unsigned long *out)
{
	const char *v;
	size_t vl;
	*out = 0;
	if (!query_get(rq, key, &v, &vl))
		return true;
	if (!vl || vl > 12)
		return false;
	unsigned long x = 0;
	for (size_t i = 0; i < vl; i++) {
		if (v[i] < '0' || v[i] > '9')
			return false;
		x = x * 10 + (unsigned long)(v[i] - '0');
	}
	*out = x;
	return x <= max;
}

/* ---- Handlers (the tasks) --------------------------------------------- */

struct job {
	enum route route;
	const char *body;
	size_t blen;
	unsigned long indent, summary, mb, ms;
	int err;
	uint64_t digest;     /* /stream */
	struct json_buf out; /* /json */
	struct arena arena;  /* /expand: everything it allocates */
	struct expansion x;
};

/* FAIL delivery: once interrupted, malloc returns NULL and the parser and
 * writer return JSON_ENOMEM, freeing the tree on their way out. */
static void *json_task(void *arg)
{
	struct job *j = arg;
	struct json *tree = NULL;
	j->err = json_parse(j->body, j->blen, &tree, NULL);
	if (!j->err)
		j->err = json_write(tree, j->indent, &j->out);
	json_free(tree);
	if (j->err) {
		free(j->out.data);
		j->out = (struct json_buf){0};
	}
	return NULL;
}

static void free_arena(void *a)
{
	arena_free(a);
}

/* JUMP delivery: the task may be abandoned at any allocation or at the
 * ml_check() in the expansion loop; the cleanup handler then frees the
 * arena.  On success the arena outlives the task: the worker sends the
 * output from it and frees it afterwards. */
static void *expand_task(void *arg)
{
	struct job *j = arg;
	ml_cleanup_push(free_arena, &j->arena);
	j->err = expand(&j->arena, j->body, j->blen, &j->x);
	ml_cleanup_pop(false);
	return NULL;
}

uint64_t gs_stream_step(uint64_t h, void *buf, uint64_t i)
{
	/* Cheap to make and to fold (four independent lanes): the request
	 * is about allocating, not about CPU. */
	uint64_t w = (i + 1) * 0x9e3779b97f4a7c15ull;
	uint64_t *p = buf;
	for (size_t k = 0; k < GS_STREAM_CHUNK / 8; k++)
		p[k] = w + k;
	uint64_t lane[4] = {h, h ^ 1, h ^ 2, h ^ 3};
	for (size_t k = 0; k < GS_STREAM_CHUNK / 8; k += 4)
		for (int l = 0; l < 4; l++)
			lane[l] =
			    (lane[l] ^ p[k + (size_t)l]) * 1099511628211ull;
	return lane[0] ^ (lane[1] << 1) ^ (lane[2] << 2) ^ (lane[3] << 3);
}

/* FAIL delivery: once interrupted, malloc returns NULL and the loop ends
 * (it holds nothing else). */
static void *stream_task(void *arg)
{
	struct job *j = arg;
	uint64_t h = 1469598103934665603ull;
	uint64_t chunks = (uint64_t)j->mb * (MiB / GS_STREAM_CHUNK);
	for (uint64_t i = 0; i < chunks; i++) {
		void *buf = malloc(GS_STREAM_CHUNK);
		if (!buf) {
			j->err = EXPAND_ENOMEM;
			return NULL;
		}
		h = gs_stream_step(h, buf, i);
		free(buf);
	}
	j->digest = h;
	return NULL;
}

/* FAIL delivery: a slow leak.  Keeps a 1 MiB block (touched: resident)
 * every ms milliseconds, mb times, and frees them all at the end, or as
 * soon as malloc fails once the task is interrupted: its held limit is
 * what stops it. */
static void *leak_task(void *arg)
{
	struct job *j = arg;
	void **blocks = NULL; /* a list through each block's first word */
	for (unsigned long i = 0; i < j->mb; i++) {
		void **b = malloc(MiB);
		if (!b) {
			j->err = EXPAND_ENOMEM;
			break;
		}
		memset(b, 0x5a, MiB);
		*b = blocks;
		blocks = b;
		struct timespec ts = {0, (long)j->ms * 1000000};
		nanosleep(&ts, NULL);
	}
	while (blocks) {
		void **next = *blocks;
		free(blocks);
		blocks = next;
	}
	return NULL;
}

static void job_release(struct job *j)
{
	free(j->out.data);
	j->out = (struct json_buf){0};
	arena_free(&j->arena);
	memset(&j->x, 0, sizeof j->x);
}

/* The limits of a route's task. */
static ml_limits route_limits(enum route r, ml_token *tok)
{
	ml_limits l = ML_LIMITS_INIT;
	switch (r) {
	case ROUTE_JSON:
		/* Parsing and writing back a document the client sent is
		 * work the request's size decides: an exact budget, never a
		 * false stop.  Its 16 MiB held limit is only 210 samples at
		 * the default interval (+-35 % at 1e-9): the request samples
		 * at the interval that makes it +-10 % (4359 bytes), which
		 * costs only while it runs. */
		l.alloc_bytes = cfg->json_limit;
		l.exact_alloc = true;
		l.held_bytes = cfg->json_held;
		l.interval = ml_bound_interval_for(cfg->json_held, 0.1, 1e-9);
		l.delivery = ML_DELIVER_FAIL;
		break;
	case ROUTE_EXPAND:
		/* Sampled, at the process's interval: 160 MiB is 2097
		 * samples (+-13 % at 1e-9), and the expansion's big arena
		 * chunks cost a sample each anyway. */
		l.alloc_bytes = cfg->expand_limit;
		l.held_bytes = cfg->expand_held;
		l.delivery = ML_DELIVER_JUMP;
		break;
	case ROUTE_STREAM: /* allocates GiBs on purpose: held limit only */
		l.held_bytes = cfg->stream_held;
		l.delivery = ML_DELIVER_FAIL;
		break;
	case ROUTE_LEAK:
		l.held_bytes = cfg->leak_held;
		l.delivery = ML_DELIVER_FAIL;
		break;
	}
	l.global = true;
	l.token = tok;
	return l;
}

/* Run the job as a task (or bare, with --no-limits).  Returns its status.
 * No rerun when the global limit interrupts it: the library interrupts
 * the task that holds the most memory, so a small request is not hit. */
static ml_status run_job(struct job *j, ml_token *tok, ml_outcome *out)
{
	static void *(*const fns[])(void *) = {
	    [ROUTE_JSON] = json_task,
	    [ROUTE_EXPAND] = expand_task,
	    [ROUTE_STREAM] = stream_task,
	    [ROUTE_LEAK] = leak_task,
	};
	*out = (ml_outcome){.status = ML_OK};
	if (!cfg->limits) {
		fns[j->route](j);
		return ML_OK;
	}
	ml_limits l = route_limits(j->route, tok);
	ml_status s = ml_run(&l, fns[j->route], j, out);
	if (s != ML_OK)
		job_release(j);
	return s;
}

/* Long requests (a stream, a long poll) get the longer deadline. */
static unsigned deadline_of(enum route r)
{
	return r == ROUTE_STREAM || r == ROUTE_LEAK ? cfg->long_deadline_ms
	                                            : cfg->deadline_ms;
}

static void slot_arm(struct slot *s, ml_token *tok, int fd, unsigned ms)
{
	pthread_mutex_lock(&s->mu);
	s->tok = tok;
	s->fd = fd;
	s->deadline = gs_now_ns() + (uint64_t)ms * 1000000u;
	s->reason = R_NONE;
	pthread_mutex_unlock(&s->mu);
}

static enum reason slot_disarm(struct slot *s)
{
	pthread_mutex_lock(&s->mu);
	enum reason r = s->reason;
	s->tok = NULL;
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* Run a task's request and answer it.  false: close. */
static bool handle(struct slot *slot, int fd, const struct request *rq,
                   enum route route, const char *body, size_t blen)
{
	struct job j = {.route = route, .body = body, .blen = blen};
	if (!query_ulong(rq, "indent", MAX_INDENT, &j.indent) ||
	    !query_ulong(rq, "summary", 1, &j.summary) ||
	    !query_ulong(rq, "mb",
	                 route == ROUTE_LEAK ? LEAK_MAX_MB : GS_STREAM_MAX_MB,
	                 &j.mb) ||
	    !query_ulong(rq, "ms", LEAK_MAX_MS, &j.ms)) {
		count(GS_bad_content);
		return respond(fd, 400, rq->keep, NULL, "bad query\n") &&
		       rq->keep;
	}
	ml_token *tok = cfg->limits ? ml_token_new() : NULL;
	if (cfg->limits && !tok) {
		count(GS_server_error);
		respond(fd, 500, false, NULL, "out of memory\n");
		return false;
	}
	slot_arm(slot, tok, fd, deadline_of(route));
	ml_outcome out;
	ml_status s = run_job(&j, tok, &out);
	enum reason why = slot_disarm(slot);
	ml_token_free(tok);
	unsigned long long mib = (unsigned long long)(out.allocated / MiB);
	ml_limits lim = route_limits(j.route, NULL);
	switch (s) {
	case ML_OK:
		break;
	case ML_ALLOC_LIMIT:
		count(GS_stopped_alloc);
		respond(fd, 413, false, "allocation-limit",
		        "stopped: allocation limit of %llu MiB reached "
		        "(~%llu MiB allocated)\n",
		        (unsigned long long)(lim.alloc_bytes / MiB), mib);
		break;
	case ML_HELD_LIMIT:
		count(GS_stopped_held);
		respond(fd, 413, false, "held-limit",
		        "stopped: held memory limit of %llu MiB reached "
		        "(~%llu MiB held)\n",
		        (unsigned long long)(lim.held_bytes / MiB),
		        (unsigned long long)(out.held_peak / MiB));
		break;
	case ML_GLOBAL_LIMIT:
		count(GS_stopped_global);
		respond(fd, 503, false, "global-limit",
		        "stopped: server memory limit of %llu MiB "
		        "reached (~%llu MiB allocated)\n",
		        (unsigned long long)(cfg->global_limit / MiB), mib);
		break;
	case ML_CANCELLED:
		if (why == R_DEADLINE) {
			count(GS_stopped_deadline);
			respond(fd, 503, false, "deadline",
			        "stopped: deadline of %u ms passed\n",
			        deadline_of(route));
		} else if (why == R_SHUTDOWN) {
			count(GS_stopped_shutdown);
			respond(fd, 503, false, "shutdown",
			        "stopped: server shutting down\n");
		} else {
			count(GS_stopped_gone); /* nobody to answer */
		}
		break;
	default:
		count(GS_server_error);
		respond(fd, 500, false, NULL, "ml_run: %s\n", ml_status_str(s));
		break;
	}
	if (s != ML_OK) {
		job_release(&j);
		/* An interrupted request may have grown a thread arena: give
		 * its free pages back now (see README, "Peak RSS"). */
		malloc_trim(0);
		return false; /* close: the client may still be sending */
	}
	int err = j.err;
	const char *msg =
	    j.route == ROUTE_JSON ? json_strerror(err) : expand_strerror(err);
	if (err == JSON_ENOMEM || err == JSON_ECANCELED ||
	    err == EXPAND_ENOMEM) {
		/* Out of memory with no limit reached: --no-limits, or the
		 * machine itself. */
		count(GS_server_error);
		job_release(&j);
		respond(fd, 500, false, NULL, "%s\n", msg);
		return false;
	}
	if (err) {
		count(GS_bad_content);
		job_release(&j);
		return respond(fd, 400, rq->keep, NULL, "%s\n", msg) &&
		       rq->keep;
	}
	count(GS_ok);
	bool alive;
	if (j.route == ROUTE_STREAM) {
		alive = respond(fd, 200, rq->keep, NULL,
		                "length=%llu digest=%016llx\n",
		                (unsigned long long)(j.mb * MiB),
		                (unsigned long long)j.digest);
	} else if (j.route == ROUTE_LEAK) {
		alive =
		    respond(fd, 200, rq->keep, NULL, "kept %lu MiB\n", j.mb);
	} else if (j.route == ROUTE_JSON) {
		struct iovec iov = {j.out.data, j.out.len};
		alive =
		    respond_iov(fd, 200, rq->keep, NULL, &iov, 1, j.out.len);
	} else if (j.summary) {
		alive = respond(fd, 200, rq->keep, NULL,
		                "length=%llu fnv1a=%016llx\n",
		                (unsigned long long)j.x.len,
		                (unsigned long long)fnv1a(&j.x));
	} else {
		struct iovec iov[256];
		int n = 0;
		for (struct seg *g = j.x.head; g && n < 256; g = g->next)
			iov[n++] = (struct iovec){g->data, g->len};
		if (n == 256) { /* too many pieces: summary instead */
			alive = respond(fd, 200, rq->keep, NULL,
			                "length=%llu fnv1a=%016llx\n",
			                (unsigned long long)j.x.len,
			                (unsigned long long)fnv1a(&j.x));
		} else {
			alive = respond_iov(fd, 200, rq->keep, NULL, iov, n,
			                    (size_t)j.x.len);
		}
	}
	job_release(&j);
	return alive && rq->keep;
}

/* ---- Connections ------------------------------------------------------ */

static char *find_head_end(char *buf, size_t n)
{
	for (size_t i = 3; i < n; i++)
		if (buf[i] == '\n' && buf[i - 1] == '\r' &&
		    buf[i - 2] == '\n' && buf[i - 3] == '\r')
			return buf + i + 1;
	return NULL;
}

/* A bad request: count it, answer it (unless code is 0) and close. */
static void refuse(int fd, enum gs_stat st, int code, const char *why)
{
	count(st);
	count(GS_requests);
	if (code)
		respond(fd, code, false, NULL, "%s\n", why);
}

static void serve_conn(struct slot *slot, int fd)
{
	char *buf = malloc(HEAD_MAX);
	size_t len = 0;
	if (!buf)
		return;
	for (;;) {
		/* The head: wait for its first byte up to the idle timeout,
		 * then for all of it up to the read timeout. */
		uint64_t deadline =
		    gs_now_ns() + (uint64_t)cfg->idle_timeout_ms * 1000000u;
		bool started = len > 0;
		if (started)
			deadline = gs_now_ns() +
			           (uint64_t)cfg->read_timeout_ms * 1000000u;
		char *head_end;
		while (!(head_end = find_head_end(buf, len))) {
			if (len == HEAD_MAX) {
				refuse(fd, GS_bad_headers, 431,
				       "request head too large");
				goto out;
			}
			ssize_t k =
			    recv_by(fd, buf + len, HEAD_MAX - len, deadline);
			if (k > 0 && !started) {
				started = true;
				deadline =
				    gs_now_ns() +
				    (uint64_t)cfg->read_timeout_ms * 1000000u;
			}
			if (k > 0) {
				len += (size_t)k;
				continue;
			}
			if (!started)
				goto out; /* closed or idle between requests */
			if (k == -2 && !stopping)
				refuse(fd, GS_bad_timeout, 408,
				       "request not complete in time");
			else if (k != -2)
				refuse(fd, GS_bad_aborted, 0, "");
			goto out;
		}
		size_t head_len = (size_t)(head_end - buf);
		struct request rq;
		int code = parse_head(buf, head_len, &rq);
		if (code) {
			refuse(fd, GS_bad_malformed, code, "malformed request");
			goto out;
		}
		if (rq.chunked) {
			refuse(fd, GS_bad_unsupported, 501,
			       "Transfer-Encoding not supported");
			goto out;
		}
		if (rq.content_length > (long long)BODY_MAX) {
			refuse(fd, GS_bad_body_size, 413, "body too large");
			goto out;
		}
		bool is_post = !strcmp(rq.method, "POST");
		if (is_post && rq.content_length < 0) {
			refuse(fd, GS_bad_malformed, 411,
			       "Content-Length required");
			goto out;
		}
		/* The body: what followed the head, then the rest. */
		size_t blen =
		    rq.content_length > 0 ? (size_t)rq.content_length : 0;
		char *body = malloc(blen + 1);
		if (!body) {
			refuse(fd, GS_server_error, 500, "out of memory");
			goto out;
		}
		size_t have = len - head_len < blen ? len - head_len : blen;
		memcpy(body, head_end, have);
		while (have < blen) {
			ssize_t k =
			    recv_by(fd, body + have, blen - have, deadline);
			if (k <= 0) {
				if (k == -2 && !stopping)
					refuse(fd, GS_bad_timeout, 408,
					       "request not complete in time");
				else if (k != -2)
					refuse(fd, GS_bad_aborted, 0, "");
				free(body);
				goto out;
			}
			have += (size_t)k;
		}
		/* Keep what was pipelined after this request. */
		size_t used =
		    head_len + (len - head_len < blen ? len - head_len : blen);
		memmove(buf, buf + used, len - used);
		len -= used;

		count(GS_requests);
		bool keep;
		static const struct {
			const char *path;
			enum route route;
		} routes[] = {{"/json", ROUTE_JSON},
		              {"/expand", ROUTE_EXPAND},
		              {"/stream", ROUTE_STREAM},
		              {"/leak", ROUTE_LEAK}};
		int route = -1;
		for (size_t i = 0; i < sizeof routes / sizeof *routes; i++)
			if (rq.path_len == strlen(routes[i].path) &&
			    !memcmp(rq.path, routes[i].path, rq.path_len))
				route = (int)routes[i].route;
		if (rq.path_len == 7 && !memcmp(rq.path, "/health", 7)) {
			count(GS_ok);
			keep =
			    respond(fd, 200, rq.keep, NULL, "ok\n") && rq.keep;
		} else if (route < 0) {
			count(GS_bad_route);
			keep =
			    respond(fd, 404, rq.keep, NULL, "no such path\n") &&
			    rq.keep;
		} else if (!is_post) {
			count(GS_bad_route);
			keep = respond(fd, 405, rq.keep, NULL, "POST only\n") &&
			       rq.keep;
		} else {
			keep = handle(slot, fd, &rq, (enum route)route, body,
			              blen);
		}
		free(body);
		if (!keep || stopping)
			break;
	}
out:
	free(buf);
}

static _Atomic unsigned live_workers;

/* Close after an answer the client may not have finished sending behind:
 * closing with unread input makes the kernel send a reset, which can
 * destroy the answer before the client reads it.  So stop writing, drain
 * for a bounded time (250 ms, 64 KiB), then close. */
static void close_gracefully(int fd)
{
	shutdown(fd, SHUT_WR);
	char sink[4096];
	uint64_t deadline = gs_now_ns() + 250000000u;
	for (size_t total = 0; total < 65536;) {
		ssize_t k = recv_by(fd, sink, sizeof sink, deadline);
		if (k <= 0)
			break;
		total += (size_t)k;
	}
	close(fd);
}

static void *worker_main(void *arg)
{
	struct slot *slot = arg;
	while (!stopping) {
		int fd = pop_fd();
		if (fd < 0)
			continue;
		serve_conn(slot, fd);
		close_gracefully(fd);
	}
	atomic_fetch_sub(&live_workers, 1);
	return NULL;
}

static void on_signal(int sig)
{
	(void)sig;
	stopping = 1;
}

int gs_serve(const struct gs_config *c, int ready_fd, int stats_fd)
{
	cfg = c;
	stats_out = stats_fd;
	if (c->rlimit_as) {
		/* A backstop for the machine, whatever goes wrong here. */
		struct rlimit rl = {c->rlimit_as, c->rlimit_as};
		setrlimit(RLIMIT_AS, &rl);
	}
	/* A fixed mmap threshold: glibc would otherwise raise it after the
	 * first large free and keep later large blocks in its arenas, where
	 * freed pages stay resident.  Same setting with and without limits. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	if (c->limits)
		ml_set_global_limit(c->global_limit);
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	struct sockaddr_in sin = {.sin_family = AF_INET,
	                          .sin_port = htons((uint16_t)c->port),
	                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof sin;
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof sin) ||
	    listen(lfd, 128) ||
	    getsockname(lfd, (struct sockaddr *)&sin, &sl)) {
		perror("guarded-server: listen on 127.0.0.1");
		return 1;
	}

	slots = calloc(c->workers, sizeof *slots);
	pthread_t *tids = calloc(c->workers, sizeof *tids);
	pthread_t timer;
	if (!slots || !tids)
		return 1;
	atomic_store(&live_workers, c->workers);
	for (unsigned i = 0; i < c->workers; i++) {
		pthread_mutex_init(&slots[i].mu, NULL);
		if (pthread_create(&tids[i], NULL, worker_main, &slots[i])) {
			fprintf(stderr,
			        "guarded-server: pthread_create failed\n");
			return 1;
		}
	}
	atomic_store(&stats[GS_threads], c->workers + 2);
	atomic_store(&stats[GS_workers], c->workers);
	/* Never interrupted: the head buffer and the body, per worker. */
	atomic_store(&stats[GS_outside_bytes], HEAD_MAX + BODY_MAX + 1);
	pthread_create(&timer, NULL, timer_main, NULL);
	struct timespec settle = {0, 20000000};
	nanosleep(&settle, NULL); /* let the threads reach their loops */
	atomic_store(&stats[GS_base_rss], gs_rss());
	atomic_store(&stats[GS_base_heap], ml_global_memory_usage());

	int port = ntohs(sin.sin_port);
	if (ready_fd >= 0) {
		char msg[32];
		int n = snprintf(msg, sizeof msg, "port %d\n", port);
		if (write(ready_fd, msg, (size_t)n) != n)
			return 1;
	} else {
		fprintf(stderr,
		        "guarded-server: listening on 127.0.0.1:%d (%s)\n",
		        port, c->limits ? "limits on" : "no limits");
	}

	while (!stopping) {
		struct pollfd p = {lfd, POLLIN, 0};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		struct timeval tv = {2, 0}; /* a client that does not read */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
		if (!push_fd(fd)) {
			count(GS_overloaded);
			respond(fd, 503, false, NULL, "overloaded\n");
			close(fd);
		}
	}
	close(lfd);
	/* Workers finish their request (the timer thread cancels running
	 * tasks with R_SHUTDOWN); a --no-limits worker stuck in a runaway
	 * request cannot be stopped, so wait a bounded time only. */
	pthread_cond_broadcast(&queue.cv);
	uint64_t give_up = gs_now_ns() + 3000000000ull;
	while (atomic_load(&live_workers) && gs_now_ns() < give_up) {
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	bool all = atomic_load(&live_workers) == 0;
	if (all) {
		for (unsigned i = 0; i < c->workers; i++)
			pthread_join(tids[i], NULL);
		atomic_store(&timer_done, true);
		pthread_join(timer, NULL);
	}
	atomic_store(&stats[GS_vm_hwm], vm_hwm());
	write_stats(stats_fd);
	if (stats_fd < 0 || c->verbose)
		for (int i = 0; i < GS_NSTATS; i++)
			fprintf(stderr, "%-20s %llu\n", gs_stat_names[i],
			        (unsigned long long)atomic_load(&stats[i]));
	if (!all)
		_exit(
		    0); /* stuck workers: do not run exit handlers under them */
	return 0;
}
