/* What the files of ngx_http_memlimits_module share: the library's
 * functions (weak), the configuration, a request's context, and what each
 * file offers the others.  The module as a whole (docs/nginx.md):
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
 * the chosen worker (the handler of its wake signal, ML_WAKE_DEFAULT,
 * calls the module's callback, which writes to the worker's eventfd):
 * the event loop then ends the
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
#ifndef NGX_HTTP_MEMLIMITS_H
#define NGX_HTTP_MEMLIMITS_H

#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_http.h>

#include <memlimits.h>

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
	/* The main request's live subrequests (SSI, addition, auth_request,
	 * mirror, slice), noted at their PREACCESS: their upstreams' events
	 * run as slices of the task too, whichever request is the
	 * connection's active one (ml_arm). */
	ngx_array_t *subs;
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

/* The sweep's period: requests stopped between their events are ended at
 * most this late (sooner by the shared budget's wake). */
#define ML_SWEEP_MS 50

extern ngx_module_t ngx_http_memlimits_module;
/* This worker's live requests with a task (ngx_http_memlimits_ctx_t.live). */
extern ngx_queue_t ml_ngx_live;

/* ngx_http_memlimits_request.c */
ngx_int_t ngx_http_memlimits_handler(ngx_http_request_t *r);
ngx_int_t ngx_http_memlimits_add_variables(ngx_conf_t *cf);
ngx_http_memlimits_ctx_t *ml_ngx_get_ctx(ngx_http_request_t *r);
void ml_ngx_request_init_process(ngx_cycle_t *cycle);

/* ngx_http_memlimits_stop.c */
ngx_int_t ml_ngx_refused(ngx_http_request_t *r, ngx_http_memlimits_ctx_t *ctx,
                         ngx_http_memlimits_main_conf_t *mcf);
int ml_ngx_end(ngx_http_memlimits_ctx_t *ctx);
void ml_ngx_end_stopped(void);
ngx_int_t ngx_http_memlimits_log_handler(ngx_http_request_t *r);
void ml_ngx_sweep_start(ngx_cycle_t *cycle);
void ml_ngx_filter_init(void);

/* ngx_http_memlimits_shared.c */
ngx_int_t ngx_http_memlimits_init_module(ngx_cycle_t *cycle);
void ml_ngx_wake_start(ngx_cycle_t *cycle);
void ml_ngx_wake_stop(void);

/* ngx_http_memlimits_metrics.c */
typedef enum { ML_NGX_STARTED, ML_NGX_REFUSED } ml_ngx_counter_e;
void ml_ngx_count(ml_ngx_counter_e what);
void ml_ngx_count_stop(ngx_http_memlimits_ctx_t *ctx);
void ml_ngx_publish_heap(ngx_flag_t now);
void ml_ngx_metrics_init_process(void);
ngx_int_t ml_ngx_metrics_zone(ngx_conf_t *cf,
                              ngx_http_memlimits_main_conf_t *mcf);
char *ngx_http_memlimits_metrics(ngx_conf_t *cf, ngx_command_t *cmd,
                                 void *conf);

#endif
