/* The guarded server: shared declarations of the server (server.c), the
 * demo's load generator (demo.c) and main.c. */
#ifndef GS_H
#define GS_H

#include <stdbool.h>
#include <stdint.h>

#define MiB (1024ull * 1024)

struct gs_config {
	int port;         /* 0 = ephemeral */
	unsigned workers; /* fixed pool */
	bool limits;      /* false: --no-limits, handlers run bare */
	uint64_t global_limit;
	uint64_t json_limit;   /* per-request allocation limit, /json */
	uint64_t expand_limit; /* per-request allocation limit, /expand */
	uint64_t json_held;    /* per-request held limit, /json */
	uint64_t expand_held;  /* per-request held limit, /expand */
	uint64_t stream_held;  /* /stream: held limit, no allocation limit */
	uint64_t leak_held;    /* /leak: held limit, no allocation limit */
	unsigned deadline_ms;  /* per request, from the end of its reading */
	unsigned long_deadline_ms; /* the same for /stream and /leak */
	unsigned read_timeout_ms;  /* a request's head and body, from its first
	                              byte */
	unsigned idle_timeout_ms;  /* keep-alive, between requests */
	uint64_t watchdog_rss;     /* kill ourselves above this RSS; 0 = none */
	uint64_t rlimit_as;        /* RLIMIT_AS backstop; 0 = none */
	bool verbose;
};

void gs_default_config(struct gs_config *c);

/* Server-side counters, reported at shutdown as "name value" lines. */
#define GS_STATS(X)                                                          \
	X(requests)         /* requests answered or cancelled */             \
	X(ok)               /* 200 */                                        \
	X(stopped_alloc)    /* 413: per-request allocation limit */          \
	X(stopped_held)     /* 413: per-request held limit */                \
	X(stopped_global)   /* 503: global memory limit */                   \
	X(stopped_deadline) /* 503: deadline token */                        \
	X(stopped_gone)     /* token set: the client disconnected */         \
	X(stopped_shutdown) /* token set: the server is stopping */          \
	X(server_error)     /* 500: out of memory without an interruption */ \
	X(bad_malformed)    /* 400/411: HTTP syntax */                       \
	X(bad_headers)      /* 431: head larger than the buffer */           \
	X(bad_body_size)    /* 413: Content-Length above the maximum */      \
	X(bad_timeout)      /* 408: request not complete in time */          \
	X(bad_aborted)      /* client closed or reset mid-request */         \
	X(bad_unsupported)  /* 501: Transfer-Encoding */                     \
	X(bad_content)      /* 400: bad JSON, template, query */             \
	X(bad_route)        /* 404/405 */                                    \
	X(overloaded)       /* 503: accept queue full */                     \
	X(threads)          /* server threads */                             \
	X(workers)          /* of which workers (they run the tasks) */      \
	X(outside_bytes)    /* per worker: heap used outside any task */     \
	X(base_rss)  /* bytes resident once started, before any request */   \
	X(base_heap) /* metered heap then */                                 \
	X(peak_heap) /* highest metered heap seen by the timer */            \
	X(peak_rss_sampled) /* highest RSS seen by the timer */              \
	X(vm_hwm)           /* VmHWM at exit */                              \
	X(killed)           /* 1: the RSS watchdog fired */

enum gs_stat {
#define GS_ENUM(name) GS_##name,
	GS_STATS(GS_ENUM)
#undef GS_ENUM
	    GS_NSTATS
};
extern const char *const gs_stat_names[GS_NSTATS];

/* Serve until SIGTERM or SIGINT.  ready_fd (or -1) receives the port as
 * "port N\n" once listening; stats_fd (or -1) the counters at the end (and
 * from the watchdog, before it kills the process).  Returns 0, or 1 if the
 * server could not start. */
int gs_serve(const struct gs_config *cfg, int ready_fd, int stats_fd);

struct gs_demo_opts {
	bool quick;
	bool compare;              /* both halves */
	bool no_limits;            /* only the no-limits half */
	unsigned well, runaway;    /* clients */
	unsigned stream_mb;        /* MiB per /stream request */
	double baseline_s, load_s; /* phase lengths */
};

int gs_demo(const struct gs_config *cfg, const struct gs_demo_opts *o);

/* /stream?mb=N produces N MiB in chunks of this size, each one malloc'd,
 * filled, folded into the digest and freed: it allocates N MiB in total
 * and holds one chunk at a time. */
#define GS_STREAM_CHUNK 65536
#define GS_STREAM_MAX_MB 16384
/* Fill buf (GS_STREAM_CHUNK bytes) with chunk i of the stream and fold it
 * into the digest h; the demo's client computes the expected digest with
 * the same function. */
uint64_t gs_stream_step(uint64_t h, void *buf, uint64_t i);

/* Nanoseconds on CLOCK_MONOTONIC. */
uint64_t gs_now_ns(void);
/* Resident bytes of this process (/proc/self/statm), 0 if unknown. */
uint64_t gs_rss(void);

#endif
