/* ngx_http_memlimits_module: a memory limit per request (docs/nginx.md).
 *
 * Each request is a memlimits task object with FAIL delivery.  Everything
 * nginx runs for the request runs as a slice of that task: the rest of the
 * phases from PREACCESS on (content handler, filters, body reading started
 * there), and every later event of the request's client connection and of
 * its upstream connection (the connection's read and write handlers are
 * wrapped).  A stopped request's allocations fail (NULL, which nginx
 * answers with an error); the header filter answers memlimits_status if
 * the headers are not sent yet, the request is closed if they are, and the
 * log phase writes one line to the error log.  The task is freed by a
 * cleanup of the request's pool, never while a slice of it runs.  A request
 * refused at memlimits_pressure has a context without a task, for the
 * header filter.
 *
 * memlimits_shared_limit puts all the workers of one nginx under one
 * budget shared by processes (ml_shared_create(3)): the master makes it,
 * with no name, when it reads the configuration, before it forks the
 * workers, which inherit the mapping; requests are global tasks then, and
 * the one holding the most in any worker is stopped.  The library wakes
 * the chosen worker (its SIGCONT handler calls the module's callback,
 * which writes to the worker's eventfd): the event loop then ends the
 * stopped request at once, even while it waits for its client.
 *
 * memlimits_metrics answers the Prometheus text format for the whole
 * nginx: the request counters and each worker's heap live in a shared
 * memory zone, made by the master when it reads the configuration, so
 * that whichever worker answers counts every worker's requests and lists
 * every worker's heap.
 *
 * The library must be the process's allocator (LD_PRELOAD or memlimits
 * run): checked at start-up with ml_capabilities(), but not in the
 * processes that serve nothing (nginx -s, -t, -T). */
#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <sys/eventfd.h>

#include <memlimits.h>

/* The library's Prometheus writer, compiled into the module. */
#include "util/prom.h"

/* The module does not link with libmemlimits: it uses the one loaded
 * into the process (LD_PRELOAD, memlimits run), through weak references,
 * so that nginx without it fails at start-up with one clear line
 * (ngx_http_memlimits_init) instead of a loader error.  Each function used
 * has a single symbol version, which an unversioned reference binds to.
 * ml_task_describe (why and where a task was interrupted) is newer than
 * some libraries the module may meet: used when present. */
#pragma weak ml_capabilities
#pragma weak ml_global_memory_usage
#pragma weak ml_mask
#pragma weak ml_set_global_memory_limit
#pragma weak ml_status_str
#pragma weak ml_task_allocated
#pragma weak ml_task_current
#pragma weak ml_task_free
#pragma weak ml_task_held
#pragma weak ml_task_new
#pragma weak ml_task_run
#pragma weak ml_task_status
#pragma weak ml_unmask
#pragma weak ml_is_interrupted
int ml_task_describe(const ml_task *t, char *buf, size_t len)
    __attribute__((weak));
/* Shared budgets: libmemlimits 0.4 and later (ml_shared_create, a budget
 * with no name, and its wake callback), needed only with
 * memlimits_shared_limit. */
int ml_shared_create(uint64_t limit, uint32_t slots) __attribute__((weak));
int ml_shared_set_wake(int signo, ml_wake_fn fn, void *arg)
    __attribute__((weak));
int ml_shared_leave(void) __attribute__((weak));
uint64_t ml_shared_limit(void) __attribute__((weak));
uint64_t ml_shared_usage(void) __attribute__((weak));
/* memlimits_metrics: the worker's global limit (0.1's name). */
#pragma weak ml_global_memory_limit

typedef struct {
	ngx_flag_t enable;
	size_t request_limit; /* 0: none */
	size_t request_held;  /* 0: none */
	ngx_uint_t status;
} ngx_http_memlimits_loc_conf_t;

typedef struct {
	size_t global;      /* 0: none */
	ngx_int_t pressure; /* fraction in 1/10000; 0: none */
	size_t shared;      /* memlimits_shared_limit; 0: none */
	/* memlimits_metrics: the zone of the counters */
	ngx_shm_zone_t *metrics;
} ngx_http_memlimits_main_conf_t;

/* One slice running on this thread (on the C stack of the wrapper that
 * started it): the request's pool may be destroyed inside the slice, so
 * the wrapper learns it from here, never from the freed context. */
typedef struct ml_ngx_frame_s ml_ngx_frame_t;
struct ml_ngx_frame_s {
	ml_ngx_frame_t *prev;
	unsigned gone : 1;      /* the request's pool is gone */
	unsigned free_task : 1; /* free the task once the slice is over */
};

typedef struct {
	ml_task *task;
	ngx_http_request_t *r; /* the main request */
	ngx_queue_t live;      /* the worker's live tasks, for the sweep */
	ml_ngx_frame_t *frame; /* innermost slice of this task running */
	uint64_t alloc_limit, held_limit;
	uint64_t stop_allocated, stop_held; /* when it was seen stopped */
	ngx_uint_t status;
	unsigned stopped : 1;  /* seen stopped: no slice runs any more */
	unsigned answered : 1; /* the header filter gave the status */
	unsigned noted : 1;
	unsigned logged : 1;
	unsigned refused : 1; /* refused at memlimits_pressure: no task */
} ngx_http_memlimits_ctx_t;

typedef struct {
	ngx_event_handler_pt handler;
	ngx_event_t *ev;
} ml_ngx_call_t;

static ngx_int_t ngx_http_memlimits_add_variables(ngx_conf_t *cf);
static ngx_int_t ngx_http_memlimits_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_memlimits_init_process(ngx_cycle_t *cycle);
static ngx_int_t ngx_http_memlimits_init_module(ngx_cycle_t *cycle);
static void ngx_http_memlimits_exit_process(ngx_cycle_t *cycle);
static void *ngx_http_memlimits_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_memlimits_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_memlimits_merge_loc_conf(ngx_conf_t *cf, void *parent,
                                               void *child);
static char *ngx_http_memlimits_pressure(ngx_conf_t *cf, ngx_command_t *cmd,
                                         void *conf);
static char *ngx_http_memlimits_set_status(ngx_conf_t *cf, ngx_command_t *cmd,
                                           void *conf);
static char *ngx_http_memlimits_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
                                        void *conf);
static ngx_int_t ml_metrics_zone(ngx_conf_t *cf,
                                 ngx_http_memlimits_main_conf_t *mcf);

static ngx_command_t ngx_http_memlimits_commands[] = {
    {ngx_string("memlimits"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF | NGX_CONF_FLAG,
     ngx_conf_set_flag_slot, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_memlimits_loc_conf_t, enable), NULL},
    {ngx_string("memlimits_request_limit"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
         NGX_CONF_TAKE1,
     ngx_conf_set_size_slot, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_memlimits_loc_conf_t, request_limit), NULL},
    {ngx_string("memlimits_request_held"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
         NGX_CONF_TAKE1,
     ngx_conf_set_size_slot, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_memlimits_loc_conf_t, request_held), NULL},
    {ngx_string("memlimits_status"),
     NGX_HTTP_MAIN_CONF | NGX_HTTP_SRV_CONF | NGX_HTTP_LOC_CONF |
         NGX_CONF_TAKE1,
     ngx_http_memlimits_set_status, NGX_HTTP_LOC_CONF_OFFSET,
     offsetof(ngx_http_memlimits_loc_conf_t, status), NULL},
    {ngx_string("memlimits_global"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_size_slot, NGX_HTTP_MAIN_CONF_OFFSET,
     offsetof(ngx_http_memlimits_main_conf_t, global), NULL},
    {ngx_string("memlimits_pressure"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_http_memlimits_pressure, NGX_HTTP_MAIN_CONF_OFFSET, 0, NULL},
    {ngx_string("memlimits_shared_limit"), NGX_HTTP_MAIN_CONF | NGX_CONF_TAKE1,
     ngx_conf_set_size_slot, NGX_HTTP_MAIN_CONF_OFFSET,
     offsetof(ngx_http_memlimits_main_conf_t, shared), NULL},
    {ngx_string("memlimits_metrics"), NGX_HTTP_LOC_CONF | NGX_CONF_NOARGS,
     ngx_http_memlimits_metrics, 0, 0, NULL},
    ngx_null_command};

static ngx_http_module_t ngx_http_memlimits_module_ctx = {
    ngx_http_memlimits_add_variables,    /* preconfiguration */
    ngx_http_memlimits_init,             /* postconfiguration */
    ngx_http_memlimits_create_main_conf, /* create main configuration */
    NULL,                                /* init main configuration */
    NULL,                                /* create server configuration */
    NULL,                                /* merge server configuration */
    ngx_http_memlimits_create_loc_conf,  /* create location configuration */
    ngx_http_memlimits_merge_loc_conf    /* merge location configuration */
};

ngx_module_t ngx_http_memlimits_module = {
    NGX_MODULE_V1,
    &ngx_http_memlimits_module_ctx,  /* module context */
    ngx_http_memlimits_commands,     /* module directives */
    NGX_HTTP_MODULE,                 /* module type */
    NULL,                            /* init master */
    ngx_http_memlimits_init_module,  /* init module */
    ngx_http_memlimits_init_process, /* init process */
    NULL,                            /* init thread */
    NULL,                            /* exit thread */
    ngx_http_memlimits_exit_process, /* exit process */
    NULL,                            /* exit master */
    NGX_MODULE_V1_PADDING};

static ngx_http_output_header_filter_pt ngx_http_next_header_filter;

/* nginx's own handlers of request connections (ngx_http_request_handler)
 * and of upstream connections (ngx_http_upstream_handler) are static in
 * nginx: learned from the first request and upstream seen, and only
 * handlers equal to them are wrapped. */
static ngx_event_handler_pt ml_request_handler, ml_upstream_handler;

static ngx_queue_t ml_live; /* this worker's live tasks */
static ngx_event_t ml_sweep_ev;
static ngx_connection_t ml_sweep_conn; /* ngx_event_t wants a data */

#define ML_SWEEP_MS 50

/* ---- The request's context ----------------------------------------------- */

/* Tasks freed once the request's pool is gone.  nginx runs a pool's
 * cleanups before it frees the pool's large blocks (a request body
 * buffered in memory): a stopped task freed in its cleanup would stop
 * counting as memory on its way back while that memory is still there,
 * and a global or shared limit would stop a bystander for it.  So the
 * task is freed from a posted event, after the pool. */
typedef struct ml_ngx_dead_s ml_ngx_dead_t;
struct ml_ngx_dead_s {
	ml_ngx_dead_t *next;
	ml_task *task;
};
static ml_ngx_dead_t *ml_dead;
static ngx_event_t ml_dead_ev;
static ngx_connection_t ml_dead_conn;

static void ml_free_dead(ngx_event_t *ev)
{
	(void)ev;
	while (ml_dead) {
		ml_ngx_dead_t *d = ml_dead;
		ml_dead = d->next;
		ml_task_free(d->task);
		ngx_free(d);
	}
}

static void ml_task_free_later(ml_task *task)
{
	ml_ngx_dead_t *d = NULL;
	if (ml_dead_ev.handler)
		d = ngx_alloc(sizeof *d, ngx_cycle->log);
	if (!d) {
		ml_task_free(task);
		return;
	}
	d->task = task;
	d->next = ml_dead;
	ml_dead = d;
	ngx_post_event(&ml_dead_ev, &ngx_posted_events); /* once */
}

static void ngx_http_memlimits_cleanup(void *data)
{
	ngx_http_memlimits_ctx_t *ctx = data;
	if (!ctx->task)
		return; /* refused */
	if (ngx_queue_next(&ctx->live)) {
		ngx_queue_remove(&ctx->live);
	}
	if (ctx->frame) {
		/* A slice of the task runs: the outermost one frees it. */
		ml_ngx_frame_t *f, *outer = NULL;
		for (f = ctx->frame; f; f = f->prev) {
			f->gone = 1;
			outer = f;
		}
		outer->free_task = 1;
	} else
		ml_task_free_later(ctx->task);
	ctx->task = NULL;
}

/* The context survives internal redirects and filter finalization (which
 * clear r->ctx) through the pool cleanup that owns it. */
static ngx_http_memlimits_ctx_t *ml_get_ctx(ngx_http_request_t *r)
{
	ngx_http_request_t *mr = r->main;
	ngx_http_memlimits_ctx_t *ctx =
	    ngx_http_get_module_ctx(mr, ngx_http_memlimits_module);
	if (ctx)
		return ctx;
	for (ngx_pool_cleanup_t *c = mr->pool->cleanup; c; c = c->next)
		if (c->handler == ngx_http_memlimits_cleanup) {
			ctx = c->data;
			ngx_http_set_ctx(mr, ctx, ngx_http_memlimits_module);
			return ctx;
		}
	return NULL;
}

/* ---- Counters for memlimits_metrics -------------------------------------
 *
 * In a shared memory zone, as stub_status keeps its counters: the master
 * makes it when it reads the configuration, the workers inherit it, so
 * that the worker answering memlimits_metrics counts every worker's
 * requests.  A reload finds the zone by its name and keeps the counts.
 * nginx's atomics, never a lock: a worker may die at any instruction. */
typedef struct {
	ngx_atomic_t started; /* requests run as tasks */
	ngx_atomic_t refused; /* refused at memlimits_pressure */
	/* Stopped, by ml_status - 1: ML_ALLOC_LIMIT, ML_GLOBAL_LIMIT,
	 * ML_CANCELLED, ML_HELD_LIMIT. */
	ngx_atomic_t interrupted[4];
	/* Each worker's heap, in the slot of its number (ngx_worker), for
	 * memlimits_heap_bytes: the worker's pid (0: none yet) and its heap
	 * as it last published it (ml_publish_heap). */
	struct {
		ngx_atomic_t pid;
		ngx_atomic_t heap;
	} workers[NGX_MAX_PROCESSES];
} ml_ngx_counts_t;

/* Set in the master (the zone's init), inherited by the workers; NULL
 * until then, and nothing is counted. */
static ml_ngx_counts_t *ml_counts;

/* A worker publishes its heap at its start, when it answers
 * memlimits_metrics, and at the end of a request at most once a second
 * (ml_global_memory_usage may call mallinfo2 when no limit runs the
 * meter: not on every request).  At a reload the new worker of the same
 * number takes the slot at its start; the old one, still finishing its
 * requests, writes no more once the slot names another pid. */
#define ML_PUBLISH_MS 1000
static ngx_msec_t ml_published; /* ngx_current_msec of the last one */

static void ml_publish_heap(ngx_flag_t now)
{
	if (ml_counts == NULL || ngx_worker >= NGX_MAX_PROCESSES)
		return;
	if (!now && ngx_current_msec - ml_published < ML_PUBLISH_MS)
		return;
	if (ml_counts->workers[ngx_worker].pid != (ngx_atomic_uint_t)ngx_pid)
		return;
	ml_published = ngx_current_msec;
	ml_counts->workers[ngx_worker].heap =
	    (ngx_atomic_uint_t)ml_global_memory_usage();
}

#define ML_COUNT(field)                                                   \
	do {                                                              \
		if (ml_counts)                                            \
			(void)ngx_atomic_fetch_add(&ml_counts->field, 1); \
	} while (0)

/* Once per stopped request: from ml_note, the first time the module sees
 * it stopped (before its answer goes out). */
static void ml_count_stop(ngx_http_memlimits_ctx_t *ctx)
{
	ml_status st = ml_task_status(ctx->task);
	if (ml_counts && st >= ML_ALLOC_LIMIT && st <= ML_HELD_LIMIT)
		(void)ngx_atomic_fetch_add(&ml_counts->interrupted[st - 1], 1);
}

/* ---- Why and where, for the log ------------------------------------------ */

static void ml_note(ngx_http_memlimits_ctx_t *ctx)
{
	if (ctx->noted || !ctx->task)
		return;
	ctx->noted = 1;
	ml_count_stop(ctx);
	ctx->stop_allocated = ml_task_allocated(ctx->task);
	ctx->stop_held = ml_task_held(ctx->task);
}

static u_char *ml_size(u_char *p, u_char *last, uint64_t n)
{
	if (n == ML_NO_LIMIT || n == 0)
		return ngx_slprintf(p, last, "none");
	return ngx_slprintf(p, last, "%.1f MiB", (double)n / 1048576.0);
}

static void ml_log_stop(ngx_http_request_t *r, ngx_http_memlimits_ctx_t *ctx)
{
	char why[512];
	u_char line[768], *p = line, *last = line + sizeof line;
	ml_status st = ml_task_status(ctx->task);

	ml_note(ctx);
	if (ml_task_describe &&
	    ml_task_describe(ctx->task, why, sizeof why) > 0)
		p = ngx_slprintf(p, last, "%s", why);
	else {
		p = ngx_slprintf(p, last, "%s: request limit ",
		                 ml_status_str(st));
		p = ml_size(p, last, ctx->alloc_limit);
		p = ngx_slprintf(p, last, ", held limit ");
		p = ml_size(p, last, ctx->held_limit);
		p = ngx_slprintf(p, last, ", allocated ~");
		p = ml_size(p, last, ctx->stop_allocated);
		p = ngx_slprintf(p, last, ", held ~");
		p = ml_size(p, last, ctx->stop_held);
	}
	/* The error log's context adds the client and the request line. */
	ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
	              "memlimits: request stopped (%ui %s) in worker %P: %*s",
	              ctx->status, ctx->answered ? "answered" : "closed",
	              ngx_pid, p - line, line);
}

/* ---- Slices ---------------------------------------------------------------
 */

static void *ml_slice_event(void *arg)
{
	ml_ngx_call_t *call = arg;
	call->handler(call->ev);
	return arg;
}

static void *ml_slice_phases(void *arg)
{
	ngx_http_request_t *r = arg;
	ngx_connection_t *c = r->connection;
	ngx_http_core_run_phases(r);
	ngx_http_run_posted_requests(c);
	return arg;
}

/* Runs fn(arg) as a slice of ctx's task.  Returns the task's status, or
 * ML_EINVAL when the request's pool went away inside the slice (ctx is
 * freed then). */
static ml_status ml_slice(ngx_http_memlimits_ctx_t *ctx, void *(*fn)(void *),
                          void *arg)
{
	ml_ngx_frame_t frame = {ctx->frame, 0, 0};
	ml_task *task = ctx->task;
	ctx->frame = &frame;
	ml_status st = ml_task_run(task, fn, arg, NULL);
	if (frame.gone) {
		if (frame.free_task)
			ml_task_free(task);
		return ML_EINVAL;
	}
	ctx->frame = frame.prev;
	return st;
}

static void ml_client_handler(ngx_event_t *ev);
static void ml_upstream_handler_wrap(ngx_event_t *ev);

static void ml_wrap(ngx_event_t *ev, ngx_event_handler_pt *orig,
                    ngx_event_handler_pt wrapper)
{
	if (ev->handler == wrapper || ev->handler == NULL)
		return;
	if (*orig == NULL)
		*orig = ev->handler;
	if (ev->handler == *orig)
		ev->handler = wrapper;
}

/* Wraps the request's connection handlers and its upstream's: nginx sets
 * them anew at times (a special response, a new upstream), so again after
 * every slice. */
static void ml_arm(ngx_http_memlimits_ctx_t *ctx, ngx_http_request_t *cur)
{
	ngx_http_request_t *r = ctx->r;
	ngx_connection_t *c = r->connection;
#if (NGX_HTTP_V2)
	if (r->stream)
		return; /* HTTP/2: the connection serves many streams */
#endif
	if (ml_request_handler || c->read->handler == c->write->handler) {
		ml_wrap(c->read, &ml_request_handler, ml_client_handler);
		ml_wrap(c->write, &ml_request_handler, ml_client_handler);
	}
	ngx_http_request_t *rs[2] = {r, cur};
	for (int i = 0; i < 2; i++) {
		ngx_http_upstream_t *u = rs[i] ? rs[i]->upstream : NULL;
		ngx_connection_t *uc = u ? u->peer.connection : NULL;
		if (!uc || uc->data != rs[i])
			continue;
		if (ml_upstream_handler ||
		    uc->read->handler == uc->write->handler) {
			ml_wrap(uc->read, &ml_upstream_handler,
			        ml_upstream_handler_wrap);
			ml_wrap(uc->write, &ml_upstream_handler,
			        ml_upstream_handler_wrap);
		}
	}
}

/* The request is already on its way out (answered by the header filter,
 * finished, or closing; r->lingering_close only says how it will close). */
static int ml_finishing(ngx_http_memlimits_ctx_t *ctx)
{
	ngx_http_request_t *r = ctx->r;
	return ctx->answered || r->done || r->connection->error ||
	       r->connection->close;
}

/* Ends a stopped request from outside any slice: answered with the status
 * where nothing else holds it open, else closed.  Returns 0 when it did
 * (ctx may be gone then), 1 when the request was already on its way out
 * and its events go on, outside any slice. */
static int ml_end(ngx_http_memlimits_ctx_t *ctx)
{
	ngx_http_request_t *r = ctx->r;
	ngx_connection_t *c = r->connection;
	ml_note(ctx);
	ctx->stopped = 1;
	if (ml_finishing(ctx))
		return 1;
	r->keepalive = 0;
	if (!r->header_sent && r->count == 1 && !r->upstream)
		ngx_http_finalize_request(r, ctx->status);
	else {
		if (!r->header_sent)
			r->headers_out.status = ctx->status;
		ngx_http_finalize_request(r, NGX_ERROR);
	}
	ngx_http_run_posted_requests(c);
	return 0;
}

static void ml_event(ngx_event_t *ev, ngx_event_handler_pt orig)
{
	ngx_connection_t *c = ev->data;
	ngx_http_request_t *r = c->data;
	ngx_http_memlimits_ctx_t *ctx = NULL;

	if (r && r->signature == NGX_HTTP_MODULE)
		ctx = ml_get_ctx(r);
	if (!ctx || !ctx->task || ctx->stopped) {
		orig(ev);
		return;
	}
	if (ml_task_status(ctx->task) != ML_OK) {
		/* Stopped between callbacks (the global limit): its slices
		 * no longer run. */
		if (ml_end(ctx))
			orig(ev);
		return;
	}
	ml_ngx_call_t call = {orig, ev};
	ml_status st = ml_slice(ctx, ml_slice_event, &call);
	if (st == ML_EINVAL)
		return;
	if (st != ML_OK)
		ml_end(ctx);
	else
		ml_arm(ctx, c->data == r ? r : NULL);
}

static void ml_client_handler(ngx_event_t *ev)
{
	ml_event(ev, ml_request_handler);
}

static void ml_upstream_handler_wrap(ngx_event_t *ev)
{
	ml_event(ev, ml_upstream_handler);
}

/* Ends the requests stopped by the global limit between callbacks, not at
 * their next event, which may never come (a client that stalls). */
static void ml_end_stopped(void)
{
again:
	for (ngx_queue_t *q = ngx_queue_head(&ml_live);
	     q != ngx_queue_sentinel(&ml_live); q = ngx_queue_next(q)) {
		ngx_http_memlimits_ctx_t *ctx =
		    ngx_queue_data(q, ngx_http_memlimits_ctx_t, live);
		if (ctx->stopped || ctx->frame ||
		    ml_task_status(ctx->task) == ML_OK)
			continue;
		ml_end(ctx); /* may free ctx: start over */
		goto again;
	}
}

static void ml_sweep(ngx_event_t *ev)
{
	(void)ev;
	/* A safe point outside any slice (returns false there): a stop
	 * request of the shared budget that no wake signal brought (a
	 * library without one, a lost signal) is taken here. */
	if (ml_is_interrupted)
		(void)ml_is_interrupted();
	ml_end_stopped();
	if (!ngx_exiting)
		ngx_add_timer(&ml_sweep_ev, ML_SWEEP_MS);
}

/* ---- The wake of the shared budget ----------------------------------------
 *
 * The library's wake handler has already interrupted the chosen task
 * (ML_GLOBAL_LIMIT) when it calls ml_wake, in a signal handler: ml_wake
 * only writes to the worker's eventfd, which the event loop watches; its
 * read handler ends the stopped requests.  Set in the master, which has
 * no eventfd (-1: nothing to wake), inherited by the workers, each of
 * which makes its own at its start. */
static int ml_wake_fd = -1;
static ngx_connection_t ml_wake_conn;
static ngx_event_t ml_wake_rev, ml_wake_wev;

static void ml_wake(void *arg)
{
	uint64_t one = 1;
	int saved = errno, fd = ml_wake_fd;
	(void)arg;
	if (fd >= 0 && write(fd, &one, sizeof one) < 0) {
		/* full (2^64 - 2 wakes unread) or closed: the sweep takes it */
	}
	errno = saved;
}

static void ml_woken(ngx_event_t *ev)
{
	uint64_t n;
	(void)ev;
	while (read(ml_wake_fd, &n, sizeof n) > 0) {
	}
	ml_end_stopped();
}

static void ml_wake_start(ngx_cycle_t *cycle)
{
	int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (fd < 0) {
		ngx_log_error(NGX_LOG_ALERT, cycle->log, ngx_errno,
		              "memlimits: eventfd() failed: a request stopped "
		              "by the shared budget ends within %d ms instead",
		              ML_SWEEP_MS);
		return;
	}
	/* Not one of the cycle's connections: nginx neither counts nor
	 * closes it (as its own notify channel). */
	ml_wake_conn.fd = fd;
	ml_wake_conn.read = &ml_wake_rev;
	ml_wake_conn.write = &ml_wake_wev;
	ml_wake_conn.log = cycle->log;
	ml_wake_rev.data = &ml_wake_conn;
	ml_wake_rev.log = cycle->log;
	ml_wake_rev.handler = ml_woken;
	ml_wake_wev.data = &ml_wake_conn;
	ml_wake_wev.log = cycle->log;
	ml_wake_wev.write = 1;
	if (ngx_add_event(&ml_wake_rev, NGX_READ_EVENT, 0) != NGX_OK) {
		close(fd);
		ml_wake_conn.fd = -1;
		return;
	}
	ml_wake_fd = fd;
}

static void ngx_http_memlimits_exit_process(ngx_cycle_t *cycle)
{
	(void)cycle;
	if (ml_wake_fd >= 0) {
		ml_wake_fd = -1; /* before the close: the handler may run */
		close(ml_wake_conn.fd);
	}
}

/* ---- The request's start: PREACCESS -------------------------------------- */

static ngx_int_t ngx_http_memlimits_handler(ngx_http_request_t *r)
{
	ngx_http_memlimits_loc_conf_t *lcf;
	ngx_http_memlimits_main_conf_t *mcf;
	ngx_http_memlimits_ctx_t *ctx;

	if (r != r->main)
		return NGX_DECLINED;
	lcf = ngx_http_get_module_loc_conf(r, ngx_http_memlimits_module);
	ctx = ml_get_ctx(r);
	if (ctx) {
		/* An internal redirect inside a slice: it goes on. */
		if (!ctx->task || ml_task_current() == ctx->task)
			return NGX_DECLINED;
	} else {
		if (!lcf->enable)
			return NGX_DECLINED;
		mcf =
		    ngx_http_get_module_main_conf(r, ngx_http_memlimits_module);
		ctx = ngx_pcalloc(r->pool, sizeof *ctx);
		ngx_pool_cleanup_t *cln = ngx_pool_cleanup_add(r->pool, 0);
		if (!ctx || !cln)
			return NGX_HTTP_INTERNAL_SERVER_ERROR;
		ctx->r = r;
		ctx->status = lcf->status;
		cln->handler = ngx_http_memlimits_cleanup;
		cln->data = ctx;
		ngx_http_set_ctx(r, ctx, ngx_http_memlimits_module);
		if (mcf->global && mcf->pressure) {
			uint64_t usage = ml_global_memory_usage();
			if ((double)usage >= (double)mcf->global *
			                         (double)mcf->pressure /
			                         10000) {
				ngx_log_error(NGX_LOG_ERR, r->connection->log,
				              0,
				              "memlimits: request refused: "
				              "worker heap %.1f MiB over "
				              "memlimits_pressure of "
				              "memlimits_global %.1f MiB",
				              (double)usage / 1048576.0,
				              (double)mcf->global / 1048576.0);
				/* The header filter makes whatever answer
				 * reaches it the module's. */
				ctx->refused = 1;
				ML_COUNT(refused);
				r->keepalive = 0;
				return lcf->status;
			}
		}
		ml_limits l = ML_LIMITS_INIT;
		l.alloc_bytes =
		    lcf->request_limit ? lcf->request_limit : ML_NO_LIMIT;
		l.held_bytes =
		    lcf->request_held ? lcf->request_held : ML_NO_LIMIT;
		l.global = mcf->global != 0 || mcf->shared != 0;
		l.delivery = ML_DELIVER_FAIL;
		ctx->task = ml_task_new(&l);
		if (!ctx->task) {
			ngx_log_error(NGX_LOG_ERR, r->connection->log,
			              ngx_errno,
			              "memlimits: no task for the request, "
			              "served without limits");
			return NGX_DECLINED;
		}
		ML_COUNT(started);
		ctx->alloc_limit = l.alloc_bytes;
		ctx->held_limit = l.held_bytes;
		ngx_queue_insert_tail(&ml_live, &ctx->live);
	}
	ml_arm(ctx, NULL);
	/* The rest of the phases run as the request's first slice. */
	r->phase_handler++;
	ml_status st = ml_slice(ctx, ml_slice_phases, r);
	if (st != ML_OK && st != ML_EINVAL)
		ml_end(ctx);
	else if (st == ML_OK)
		ml_arm(ctx, NULL);
	return NGX_DONE;
}

/* ---- Answer and log --------------------------------------------------------
 */

/* The answer to a stopped or refused request: memlimits_status, an empty
 * body, Connection: close, whatever response nginx or another module was
 * about to send.  It must survive the other filters, which see the
 * special response nginx sends in its place (its error page): gzip would
 * compress a 403 or 404 page, sub_filter and ssi rewrite it, and
 * image_filter (on any status but 304) and xslt hold back the header
 * until the body, then answer a page they cannot convert with their own
 * error (415, 500) through ngx_http_filter_finalize_request.  Which
 * filters act, and on what (status, content type, length), is each
 * filter's own business; what nginx guarantees is the order of the filter
 * chain.  So the module sits below all of them (ngx_module_order in
 * config): whatever header comes out of them for this request, a
 * filter's own error included, reaches this filter last, right before
 * nginx writes it (HTTP/1 or HTTP/2), and is replaced here; the header
 * says there is no body (header_only), so no body follows through the
 * filters.  Filters keep their contexts; nothing of theirs is touched but
 * the headers they set (Content-Encoding). */
static ngx_int_t ngx_http_memlimits_header_filter(ngx_http_request_t *r)
{
	ngx_http_memlimits_ctx_t *ctx = ml_get_ctx(r);
	if (r != r->main || !ctx || ctx->answered || r->header_sent)
		return ngx_http_next_header_filter(r);
	if (!ctx->refused &&
	    (!ctx->task ||
	     (!ctx->stopped && ml_task_status(ctx->task) == ML_OK)))
		return ngx_http_next_header_filter(r);
	ml_note(ctx);
	ctx->stopped = 1;
	ctx->answered = 1;
	r->headers_out.status = ctx->status;
	r->headers_out.status_line.len = 0;
	r->err_status = 0;
	ngx_http_clear_content_length(r);
	ngx_http_clear_accept_ranges(r);
	ngx_http_clear_last_modified(r);
	ngx_http_clear_etag(r);
	ngx_http_clear_location(r);
	if (r->headers_out.content_encoding) { /* gzip's */
		r->headers_out.content_encoding->hash = 0;
		r->headers_out.content_encoding = NULL;
	}
	r->headers_out.content_length_n = 0;
	r->headers_out.content_type.len = 0;
	r->headers_out.content_type_len = 0;
	r->header_only = 1;
	r->keepalive = 0;
	/* The header's buffer is allocated below us: let it through the
	 * stopped task's failing allocations. */
	ml_mask();
	ngx_int_t rc = ngx_http_next_header_filter(r);
	ml_unmask();
	return rc;
}

static ngx_int_t ngx_http_memlimits_log_handler(ngx_http_request_t *r)
{
	ngx_http_memlimits_ctx_t *ctx = ml_get_ctx(r);
	ml_publish_heap(0);
	if (!ctx || !ctx->task || ctx->logged ||
	    ml_task_status(ctx->task) == ML_OK)
		return NGX_OK;
	ctx->logged = 1;
	ml_log_stop(r, ctx);
	return NGX_OK;
}

/* ---- Variables -------------------------------------------------------------
 */

static ngx_int_t ngx_http_memlimits_variable(ngx_http_request_t *r,
                                             ngx_http_variable_value_t *v,
                                             uintptr_t data)
{
	ngx_http_memlimits_ctx_t *ctx = ml_get_ctx(r);
	const char *s = NULL;
	uint64_t n = 0;
	u_char *p;

	if (!ctx || !ctx->task) {
		v->not_found = 1;
		return NGX_OK;
	}
	if (data == 0)
		n = ml_task_allocated(ctx->task);
	else if (data == 1)
		n = ml_task_held(ctx->task);
	else
		s = ml_task_status(ctx->task) == ML_OK
		        ? "ok"
		        : ml_status_str(ml_task_status(ctx->task));
	/* In the log phase of a stopped request: let the value through. */
	ml_mask();
	p = ngx_pnalloc(r->pool, s ? ngx_strlen(s) : NGX_INT64_LEN);
	ml_unmask();
	if (p == NULL)
		return NGX_ERROR;
	v->len = s ? ngx_sprintf(p, "%s", s) - p : ngx_sprintf(p, "%uL", n) - p;
	v->valid = 1;
	v->no_cacheable = 1;
	v->not_found = 0;
	v->data = p;
	return NGX_OK;
}

static ngx_http_variable_t ngx_http_memlimits_vars[] = {
    {ngx_string("memlimits_allocated"), NULL, ngx_http_memlimits_variable, 0,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("memlimits_held"), NULL, ngx_http_memlimits_variable, 1,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    {ngx_string("memlimits_status"), NULL, ngx_http_memlimits_variable, 2,
     NGX_HTTP_VAR_NOCACHEABLE, 0},
    ngx_http_null_variable};

static ngx_int_t ngx_http_memlimits_add_variables(ngx_conf_t *cf)
{
	for (ngx_http_variable_t *v = ngx_http_memlimits_vars; v->name.len;
	     v++) {
		ngx_http_variable_t *var =
		    ngx_http_add_variable(cf, &v->name, v->flags);
		if (var == NULL)
			return NGX_ERROR;
		var->get_handler = v->get_handler;
		var->data = v->data;
	}
	return NGX_OK;
}

/* ---- Configuration ------------------------------------------------------- */

static void *ngx_http_memlimits_create_main_conf(ngx_conf_t *cf)
{
	ngx_http_memlimits_main_conf_t *mcf =
	    ngx_pcalloc(cf->pool, sizeof *mcf);
	if (mcf) {
		mcf->global = NGX_CONF_UNSET_SIZE;
		mcf->shared = NGX_CONF_UNSET_SIZE;
	}
	return mcf;
}

static void *ngx_http_memlimits_create_loc_conf(ngx_conf_t *cf)
{
	ngx_http_memlimits_loc_conf_t *lcf = ngx_pcalloc(cf->pool, sizeof *lcf);
	if (lcf == NULL)
		return NULL;
	lcf->enable = NGX_CONF_UNSET;
	lcf->request_limit = NGX_CONF_UNSET_SIZE;
	lcf->request_held = NGX_CONF_UNSET_SIZE;
	lcf->status = NGX_CONF_UNSET_UINT;
	return lcf;
}

static char *ngx_http_memlimits_merge_loc_conf(ngx_conf_t *cf, void *parent,
                                               void *child)
{
	ngx_http_memlimits_loc_conf_t *prev = parent, *conf = child;
	(void)cf;
	ngx_conf_merge_value(conf->enable, prev->enable, 0);
	ngx_conf_merge_size_value(conf->request_limit, prev->request_limit, 0);
	ngx_conf_merge_size_value(conf->request_held, prev->request_held, 0);
	ngx_conf_merge_uint_value(conf->status, prev->status,
	                          NGX_HTTP_SERVICE_UNAVAILABLE);
	return NGX_CONF_OK;
}

static char *ngx_http_memlimits_set_status(ngx_conf_t *cf, ngx_command_t *cmd,
                                           void *conf)
{
	ngx_http_memlimits_loc_conf_t *lcf = conf;
	ngx_str_t *value = cf->args->elts;
	(void)cmd;
	if (lcf->status != NGX_CONF_UNSET_UINT)
		return "is duplicate";
	ngx_int_t n = ngx_atoi(value[1].data, value[1].len);
	if (n < 400 || n > 599) {
		ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
		                   "memlimits_status: \"%V\" is not a status "
		                   "from 400 to 599",
		                   &value[1]);
		return NGX_CONF_ERROR;
	}
	lcf->status = (ngx_uint_t)n;
	return NGX_CONF_OK;
}

static char *ngx_http_memlimits_pressure(ngx_conf_t *cf, ngx_command_t *cmd,
                                         void *conf)
{
	ngx_http_memlimits_main_conf_t *mcf = conf;
	ngx_str_t *value = cf->args->elts;
	(void)cmd;
	if (mcf->pressure)
		return "is duplicate";
	ngx_int_t n = ngx_atofp(value[1].data, value[1].len, 4);
	if (n <= 0 || n > 10000) {
		ngx_conf_log_error(
		    NGX_LOG_EMERG, cf, 0,
		    "memlimits_pressure: \"%V\" is not a fraction "
		    "in (0, 1], e.g. 0.85",
		    &value[1]);
		return NGX_CONF_ERROR;
	}
	mcf->pressure = n;
	return NGX_CONF_OK;
}

static ngx_int_t ngx_http_memlimits_init(ngx_conf_t *cf)
{
	ngx_http_core_main_conf_t *cmcf;
	ngx_http_handler_pt *h;
	ngx_http_memlimits_main_conf_t *mcf;

	/* Without the library as the process's allocator no request can be
	 * limited: refuse to start, with the fix.  Only a server: the
	 * processes that read the configuration and serve nothing (nginx -s,
	 * which signals the master; nginx -t and -T) run as the user typed
	 * them, most often without the preload, and a refusal there would
	 * fail a reload that the master, which has the library, would do. */
	if (!ml_capabilities || !(ml_capabilities() & ML_CAP_INTERPOSED)) {
		const char *what = ml_capabilities ? "" : " (not loaded)";
		if (ngx_process != NGX_PROCESS_SIGNALLER && !ngx_test_config) {
			ngx_log_error(
			    NGX_LOG_EMERG, cf->log, 0,
			    "memlimits: libmemlimits is not nginx's "
			    "allocator%s: start nginx with "
			    "LD_PRELOAD=libmemlimits.so.0 "
			    "(contrib/nginx/memlimits.conf for systemd) or "
			    "under \"memlimits run --\"",
			    what);
			return NGX_ERROR;
		}
		if (ngx_test_config)
			ngx_log_error(
			    NGX_LOG_WARN, cf->log, 0,
			    "memlimits: libmemlimits is not this "
			    "process's allocator%s: the test goes on, "
			    "but nginx itself must start with "
			    "LD_PRELOAD=libmemlimits.so.0 or under "
			    "\"memlimits run --\"",
			    what);
	}
	mcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_memlimits_module);
	if (mcf->global == NGX_CONF_UNSET_SIZE)
		mcf->global = 0;
	if (mcf->pressure && !mcf->global) {
		ngx_log_error(NGX_LOG_EMERG, cf->log, 0,
		              "memlimits_pressure needs memlimits_global");
		return NGX_ERROR;
	}
	if (mcf->shared == NGX_CONF_UNSET_SIZE)
		mcf->shared = 0;
	/* Not loaded at all (nginx -s, -t): no library to judge. */
	if (mcf->shared && ml_capabilities &&
	    (!ml_shared_create || !ml_shared_set_wake || !ml_shared_limit)) {
		ngx_log_error(
		    NGX_LOG_EMERG, cf->log, 0,
		    "memlimits_shared_limit: the libmemlimits loaded "
		    "has no shared budgets with no name "
		    "(ml_shared_create): it needs libmemlimits 0.4 or "
		    "later");
		return NGX_ERROR;
	}
	if (ml_metrics_zone(cf, mcf) != NGX_OK)
		return NGX_ERROR;

	cmcf = ngx_http_conf_get_module_main_conf(cf, ngx_http_core_module);
	h = ngx_array_push(&cmcf->phases[NGX_HTTP_PREACCESS_PHASE].handlers);
	if (h == NULL)
		return NGX_ERROR;
	*h = ngx_http_memlimits_handler;
	h = ngx_array_push(&cmcf->phases[NGX_HTTP_LOG_PHASE].handlers);
	if (h == NULL)
		return NGX_ERROR;
	*h = ngx_http_memlimits_log_handler;

	ngx_http_next_header_filter = ngx_http_top_header_filter;
	ngx_http_top_header_filter = ngx_http_memlimits_header_filter;
	return NGX_OK;
}

static ngx_int_t ngx_http_memlimits_init_process(ngx_cycle_t *cycle)
{
	ngx_http_memlimits_main_conf_t *mcf;

	ngx_queue_init(&ml_live);
	if (ml_counts && ngx_worker < NGX_MAX_PROCESSES) {
		ml_counts->workers[ngx_worker].pid = (ngx_atomic_uint_t)ngx_pid;
		ml_publish_heap(1);
	}
	ml_dead_ev.handler = ml_free_dead;
	ml_dead_ev.data = &ml_dead_conn;
	ml_dead_ev.log = cycle->log;
	mcf = ngx_http_cycle_get_module_main_conf(cycle,
	                                          ngx_http_memlimits_module);
	if (mcf == NULL || (!mcf->global && !mcf->shared))
		return NGX_OK;
	/* Per worker: each worker is its own heap. */
	if (mcf->global)
		ml_set_global_memory_limit(mcf->global);
	ml_sweep_ev.handler = ml_sweep;
	ml_sweep_ev.data = &ml_sweep_conn;
	ml_sweep_ev.log = cycle->log;
	ml_sweep_ev.cancelable = 1;
	ngx_add_timer(&ml_sweep_ev, ML_SWEEP_MS);
	if (mcf->shared)
		ml_wake_start(cycle);
	return NGX_OK;
}

/* ---- The shared budget (memlimits_shared_limit) ---------------------------
 *
 * Made by the master in init_module, which runs when the configuration
 * is read, before the workers are forked: at the start and at every
 * reload (SIGHUP), never in the workers.  ml_shared_create gives a budget
 * with no name (an anonymous shared mapping): nothing in /dev/shm that
 * another user could take first or truncate, nothing to remove when
 * nginx stops or a reload drops the directive.  The workers forked from
 * then on are its members; the wake callback set here is inherited by
 * them.  A reload that keeps the limit keeps the budget (old and new
 * workers count together); one that changes or drops it leaves it (the
 * old workers keep it until they exit) and makes a new one, or none.
 * (nginx forks to daemonize after reading the configuration at the start:
 * that child, the master for good, is a member as its parent was.) */

static size_t ml_shared_made; /* the limit of this master's budget; 0: none */

static ngx_int_t ngx_http_memlimits_init_module(ngx_cycle_t *cycle)
{
	ngx_http_memlimits_main_conf_t *mcf;
	int rc;
	/* At the start, a failure stops nginx; at a reload (the master
	 * runs), it must not: nginx exits when init_module fails. */
	ngx_uint_t reload = ngx_process == NGX_PROCESS_MASTER;

	if (ngx_test_config)
		return NGX_OK; /* nginx -t makes nothing */
	mcf = ngx_http_cycle_get_module_main_conf(cycle,
	                                          ngx_http_memlimits_module);
	size_t want = mcf ? mcf->shared : 0;
	if (want == ml_shared_made)
		return NGX_OK;
	if (ml_shared_made && ml_shared_leave) {
		/* The workers forked from now on are not members of it
		 * (those of before stay until they exit). */
		ml_shared_leave();
		ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
		              "memlimits: left the shared budget of %uz bytes",
		              ml_shared_made);
		ml_shared_made = 0;
	}
	if (!want)
		return NGX_OK;
	rc = ml_shared_create(want, 0);
	if (rc == ML_OK)
		rc = ml_shared_set_wake(ML_WAKE_KEEP, ml_wake, NULL);
	if (rc != ML_OK) {
		ngx_uint_t level = reload ? NGX_LOG_ALERT : NGX_LOG_EMERG;
		ngx_log_error(level, cycle->log, 0,
		              "memlimits_shared_limit: cannot make the shared "
		              "budget: %s%s",
		              rc == ML_ENOMEM ? "no memory for its table"
		                              : "this process is a member of "
		                                "another budget "
		                                "(MEMLIMITS_SHARED?)",
		              reload ? "; the new workers have none" : "");
		if (ml_shared_leave)
			ml_shared_leave();
		return reload ? NGX_OK : NGX_ERROR;
	}
	ml_shared_made = want;
	ngx_log_error(NGX_LOG_NOTICE, cycle->log, 0,
	              "memlimits: the workers share a budget of %uz bytes",
	              want);
	return NGX_OK;
}

/* ---- memlimits_metrics: the Prometheus text format 0.0.4 ------------------
 *
 * For the whole nginx: the request counters are the zone's (every
 * worker's requests); the heaps are the zone's too, one series for each
 * worker, labelled with its pid; the limits are the configuration's, the
 * same in every worker. */

static ngx_int_t ml_metrics_init_zone(ngx_shm_zone_t *zone, void *data)
{
	ngx_slab_pool_t *sp = (ngx_slab_pool_t *)zone->shm.addr;
	ml_ngx_counts_t *c = data; /* a reload: the old cycle's counts */

	if (c == NULL && zone->shm.exists)
		c = sp->data;
	if (c == NULL) {
		c = ngx_slab_calloc(sp, sizeof *c);
		if (c == NULL)
			return NGX_ERROR;
		sp->data = c;
	}
	zone->data = c;
	ml_counts = c;
	return NGX_OK;
}

/* Made whether or not a location has memlimits_metrics, so that the
 * counts are whole when a reload adds one. */
static ngx_int_t ml_metrics_zone(ngx_conf_t *cf,
                                 ngx_http_memlimits_main_conf_t *mcf)
{
	static ngx_str_t name = ngx_string("memlimits_metrics");
	/* The smallest zone nginx's own modules accept: the slab pool's
	 * header and page table take part of it. */
	mcf->metrics = ngx_shared_memory_add(cf, &name, 8 * ngx_pagesize,
	                                     &ngx_http_memlimits_module);
	if (mcf->metrics == NULL)
		return NGX_ERROR;
	mcf->metrics->init = ml_metrics_init_zone;
	return NGX_OK;
}

/* The text is written by the library's one Prometheus writer
 * (lib/util/prom.c, compiled into the module) into a sink that copies
 * what fits and counts what it was given: made once to measure it, then
 * into a buffer of that size, again into a bigger one in the rare case
 * that it grew in between (a counter gained a digit, a worker started). */
typedef struct {
	u_char *p, *end; /* p NULL: measuring */
	size_t size;     /* the whole text's, fitting or not */
} ml_text_t;

static void ml_text_put(void *sink, const char *s, size_t n)
{
	ml_text_t *t = sink;
	t->size += n;
	if (t->p != NULL && n <= (size_t)(t->end - t->p))
		t->p = ngx_cpymem(t->p, s, n);
	else
		t->end = t->p; /* nothing more once a piece did not fit */
}

/* The workers of this configuration (single process: this one). */
static ngx_uint_t ml_metrics_workers(void)
{
	ngx_core_conf_t *ccf = (ngx_core_conf_t *)ngx_get_conf(
	    ngx_cycle->conf_ctx, ngx_core_module);
	if (ngx_process == NGX_PROCESS_SINGLE || ccf == NULL ||
	    ccf->worker_processes < 1)
		return 1;
	return ngx_min((ngx_uint_t)ccf->worker_processes, NGX_MAX_PROCESSES);
}

static void ml_metrics_text(const struct ml__prom *t,
                            ngx_http_memlimits_main_conf_t *mcf)
{
	/* In the order of the label values the docs give. */
	static const struct {
		const char *reason;
		int st;
	} reasons[4] = {{"alloc_limit", ML_ALLOC_LIMIT},
	                {"held_limit", ML_HELD_LIMIT},
	                {"global_limit", ML_GLOBAL_LIMIT},
	                {"cancelled", ML_CANCELLED}};
	static const char *const stopped = "memlimits_tasks_interrupted_total";
	static const char *const heap = "memlimits_heap_bytes";
	static const char *const glimit = "memlimits_global_limit_bytes";
	ngx_uint_t n = ml_metrics_workers();
	u_char pid[NGX_INT64_LEN + 1];
	struct ml__prom_label l[2] = {{NULL, NULL}, {NULL, NULL}};
	uint64_t limit;

	ml__prom_one(t, "memlimits_tasks_started_total", "counter",
	             "Requests run as memlimits tasks, by all the workers.",
	             ml_counts->started);
	ml__prom_family(t, stopped, "counter",
	                "Requests stopped by their limits or a global or "
	                "shared limit, by the reason, by all the workers.");
	l[0].name = "reason";
	for (int i = 0; i < 4; i++) {
		l[0].value = reasons[i].reason;
		ml__prom_sample(t, stopped, l,
		                ml_counts->interrupted[reasons[i].st - 1]);
	}
	ml__prom_one(t, "memlimits_requests_refused_total", "counter",
	             "Requests refused at memlimits_pressure, before they "
	             "ran, by all the workers.",
	             ml_counts->refused);
	ml__prom_family(t, heap, "gauge",
	                "Heap in use by each worker (its pid), as libmemlimits "
	                "measures it: the answering worker's now, the others' "
	                "as they last published it.");
	l[0].name = "pid";
	l[0].value = (const char *)pid;
	for (ngx_uint_t i = 0; i < n; i++) {
		ngx_atomic_uint_t w = ml_counts->workers[i].pid;
		if (w == 0)
			continue;
		ngx_sprintf(pid, "%uA%Z", w);
		ml__prom_sample(t, heap, l, ml_counts->workers[i].heap);
	}
	/* ml_write_metrics' convention: +Inf when there is no limit. */
	limit = ml_global_memory_limit ? ml_global_memory_limit() : ML_NO_LIMIT;
	ml__prom_family(t, glimit, "gauge",
	                "memlimits_global, each worker's limit on its heap; "
	                "+Inf when none is set.");
	if (limit == ML_NO_LIMIT)
		ml__prom_sample_text(t, glimit, NULL, "+Inf");
	else
		ml__prom_sample(t, glimit, NULL, limit);
	if (mcf->shared && ml_shared_usage && ml_shared_limit) {
		ml__prom_one(t, "memlimits_shared_usage_bytes", "gauge",
		             "The heap of all the processes of this nginx's "
		             "shared budget (memlimits_shared_limit).",
		             ml_shared_usage());
		ml__prom_one(
		    t, "memlimits_shared_limit_bytes", "gauge",
		    "memlimits_shared_limit, the shared budget's limit.",
		    ml_shared_limit());
	}
}

static ngx_int_t ngx_http_memlimits_metrics_handler(ngx_http_request_t *r)
{
	static const char *const ctype = "text/plain; version=0.0.4; "
	                                 "charset=utf-8";
	ngx_http_memlimits_main_conf_t *mcf;
	ml_text_t t = {NULL, NULL, 0};
	struct ml__prom prom = {ml_text_put, &t};
	ngx_chain_t out;
	ngx_buf_t *b = NULL;
	ngx_int_t rc;

	if (!(r->method & (NGX_HTTP_GET | NGX_HTTP_HEAD)))
		return NGX_HTTP_NOT_ALLOWED;
	rc = ngx_http_discard_request_body(r);
	if (rc != NGX_OK)
		return rc;
	if (ml_counts == NULL)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	mcf = ngx_http_get_module_main_conf(r, ngx_http_memlimits_module);
	ml_publish_heap(1); /* this worker's heap: now */
	ml_metrics_text(&prom, mcf);
	for (int tries = 0; tries < 4 && b == NULL; tries++) {
		size_t want = t.size + 256; /* room for a few more digits */
		b = ngx_create_temp_buf(r->pool, want);
		if (b == NULL)
			return NGX_HTTP_INTERNAL_SERVER_ERROR;
		t = (ml_text_t){b->pos, b->end, 0};
		ml_metrics_text(&prom, mcf);
		if (t.size > want)
			b = NULL; /* it grew past that: again, at its size */
	}
	if (b == NULL)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	b->last = t.p;
	b->last_buf = (r == r->main) ? 1 : 0;
	b->last_in_chain = 1;

	r->headers_out.status = NGX_HTTP_OK;
	r->headers_out.content_length_n = b->last - b->pos;
	r->headers_out.content_type.len = ngx_strlen(ctype);
	r->headers_out.content_type.data = (u_char *)ctype;
	/* Shorter than the type: nginx appends no second charset. */
	r->headers_out.content_type_len = sizeof("text/plain") - 1;
	r->headers_out.content_type_lowcase = NULL;
	rc = ngx_http_send_header(r);
	if (rc == NGX_ERROR || rc > NGX_OK || r->header_only)
		return rc;
	out.buf = b;
	out.next = NULL;
	return ngx_http_output_filter(r, &out);
}

static char *ngx_http_memlimits_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
                                        void *conf)
{
	ngx_http_core_loc_conf_t *clcf =
	    ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
	(void)cmd;
	(void)conf;
	clcf->handler = ngx_http_memlimits_metrics_handler;
	return NGX_CONF_OK;
}
