/* memlimits_metrics: the request counters and each worker's heap in a
 * shared memory zone, and the Prometheus text for the whole nginx,
 * written by the library's one writer (lib/util/prom.c, compiled in). */
#include "ngx_http_memlimits.h"

#include "util/prom.h"

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
	 * as it last published it (ml_ngx_publish_heap). */
	struct {
		ngx_atomic_t pid;
		ngx_atomic_t heap;
	} workers[NGX_MAX_PROCESSES];
} ml_ngx_counts_t;

/* Set in the master (the zone's init), inherited by the workers; NULL
 * until then, and nothing is counted. */
static ml_ngx_counts_t *ml_ngx_counts;

/* A worker publishes its heap at its start, when it answers
 * memlimits_metrics, and at the end of a request at most once a second
 * (ml_global_memory_usage may call mallinfo2 when no limit runs the
 * meter: not on every request).  At a reload the new worker of the same
 * number takes the slot at its start; the old one, still finishing its
 * requests, writes no more once the slot names another pid. */
#define ML_PUBLISH_MS 1000
static ngx_msec_t ml_published; /* ngx_current_msec of the last one */

void ml_ngx_publish_heap(ngx_flag_t now)
{
	if (ml_ngx_counts == NULL || ngx_worker >= NGX_MAX_PROCESSES)
		return;
	if (!now && ngx_current_msec - ml_published < ML_PUBLISH_MS)
		return;
	if (ml_ngx_counts->workers[ngx_worker].pid !=
	    (ngx_atomic_uint_t)ngx_pid)
		return;
	ml_published = ngx_current_msec;
	ml_ngx_counts->workers[ngx_worker].heap =
	    (ngx_atomic_uint_t)ml_global_memory_usage();
}

void ml_ngx_count(ml_ngx_counter_e what)
{
	if (ml_ngx_counts)
		(void)ngx_atomic_fetch_add(what == ML_NGX_STARTED
		                               ? &ml_ngx_counts->started
		                               : &ml_ngx_counts->refused,
		                           1);
}

/* A worker's slot, from its start. */
void ml_ngx_metrics_init_process(void)
{
	if (ml_ngx_counts && ngx_worker < NGX_MAX_PROCESSES) {
		ml_ngx_counts->workers[ngx_worker].pid =
		    (ngx_atomic_uint_t)ngx_pid;
		ml_ngx_publish_heap(1);
	}
}

/* Once per stopped request: from ml_note, the first time the module sees
 * it stopped (before its answer goes out). */
void ml_ngx_count_stop(ngx_http_memlimits_ctx_t *ctx)
{
	ml_status st = ml_task_status(ctx->task);
	if (ml_ngx_counts && st >= ML_ALLOC_LIMIT && st <= ML_HELD_LIMIT)
		(void)ngx_atomic_fetch_add(&ml_ngx_counts->interrupted[st - 1],
		                           1);
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
	ml_ngx_counts = c;
	return NGX_OK;
}

/* Made whether or not a location has memlimits_metrics, so that the
 * counts are whole when a reload adds one. */
ngx_int_t ml_ngx_metrics_zone(ngx_conf_t *cf,
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
	             ml_ngx_counts->started);
	ml__prom_family(t, stopped, "counter",
	                "Requests stopped by their limits or a global or "
	                "shared limit, by the reason, by all the workers.");
	l[0].name = "reason";
	for (int i = 0; i < 4; i++) {
		l[0].value = reasons[i].reason;
		ml__prom_sample(t, stopped, l,
		                ml_ngx_counts->interrupted[reasons[i].st - 1]);
	}
	ml__prom_one(t, "memlimits_requests_refused_total", "counter",
	             "Requests refused at memlimits_pressure, before they "
	             "ran, by all the workers.",
	             ml_ngx_counts->refused);
	ml__prom_family(t, heap, "gauge",
	                "Heap in use by each worker (its pid), as libmemlimits "
	                "measures it: the answering worker's now, the others' "
	                "as they last published it.");
	l[0].name = "pid";
	l[0].value = (const char *)pid;
	for (ngx_uint_t i = 0; i < n; i++) {
		ngx_atomic_uint_t w = ml_ngx_counts->workers[i].pid;
		if (w == 0)
			continue;
		ngx_sprintf(pid, "%uA%Z", w);
		ml__prom_sample(t, heap, l, ml_ngx_counts->workers[i].heap);
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
	if (ml_ngx_counts == NULL)
		return NGX_HTTP_INTERNAL_SERVER_ERROR;
	mcf = ngx_http_get_module_main_conf(r, ngx_http_memlimits_module);
	ml_ngx_publish_heap(1); /* this worker's heap: now */
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

char *ngx_http_memlimits_metrics(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
	ngx_http_core_loc_conf_t *clcf =
	    ngx_http_conf_get_module_loc_conf(cf, ngx_http_core_module);
	(void)cmd;
	(void)conf;
	clcf->handler = ngx_http_memlimits_metrics_handler;
	return NGX_CONF_OK;
}
