/* Requests as tasks (ngx_http_memlimits_module, docs/nginx.md): each
 * request is a memlimits task object with FAIL delivery, made at
 * PREACCESS; the rest of its phases and every later event of its client
 * and upstream connections run as slices of it (their handlers are
 * wrapped); the task is freed after the request's pool.  Also the
 * variables $memlimits_allocated, $memlimits_held, $memlimits_status. */
#include "ngx_http_memlimits.h"

/* nginx's own handlers of request connections (ngx_http_request_handler)
 * and of upstream connections (ngx_http_upstream_handler) are static in
 * nginx: learned from the first request and upstream seen, and only
 * handlers equal to them are wrapped. */
static ngx_event_handler_pt ml_request_handler, ml_upstream_handler;

ngx_queue_t ml_ngx_live; /* this worker's live tasks */

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
ngx_http_memlimits_ctx_t *ml_ngx_get_ctx(ngx_http_request_t *r)
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

void ml_ngx_request_init_process(ngx_cycle_t *cycle)
{
	ngx_queue_init(&ml_ngx_live);
	ml_dead_ev.handler = ml_free_dead;
	ml_dead_ev.data = &ml_dead_conn;
	ml_dead_ev.log = cycle->log;
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
	/* The frame is unlinked before return, or ctx is gone with the pool. */
	// cppcheck-suppress autoVariables
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

/* Wraps the handlers of r's upstream connection, if it has one. */
static void ml_arm_upstream(ngx_http_request_t *r)
{
	ngx_http_upstream_t *u = r ? r->upstream : NULL;
	ngx_connection_t *uc = u ? u->peer.connection : NULL;
	if (!uc || uc->data != r)
		return;
	if (ml_upstream_handler || uc->read->handler == uc->write->handler) {
		ml_wrap(uc->read, &ml_upstream_handler,
		        ml_upstream_handler_wrap);
		ml_wrap(uc->write, &ml_upstream_handler,
		        ml_upstream_handler_wrap);
	}
}

/* Notes a subrequest of ctx's request, once, so that ml_arm wraps its
 * upstream.  Subrequests live in the main request's pool: a pointer to a
 * finished one stays valid memory until the pool goes, with the task. */
static void ml_note_sub(ngx_http_memlimits_ctx_t *ctx, ngx_http_request_t *sr)
{
	ngx_http_request_t **e;
	ngx_uint_t i;
	if (!ctx->subs) {
		ctx->subs = ngx_array_create(ctx->r->pool, 4, sizeof sr);
		if (!ctx->subs)
			return;
	}
	e = ctx->subs->elts;
	for (i = 0; i < ctx->subs->nelts; i++)
		if (e[i] == sr)
			return; /* an internal redirect of a noted one */
	e = ngx_array_push(ctx->subs);
	if (e)
		*e = sr;
}

/* Wraps the request's connection handlers and its upstream's, and those of
 * its live subrequests' upstreams: nginx sets them anew at times (a
 * special response, a new upstream), so again after every slice.  The
 * subrequests that are done are dropped from the list on the way, so that
 * the walk costs what is live (one SSI page's includes, not every slice
 * a slice module ever made). */
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
	ml_arm_upstream(r);
	/* cur: the request whose slice just ended (NULL before the first). */
	if (cur && cur != r)
		ml_arm_upstream(cur);
	if (ctx->subs) {
		ngx_http_request_t **e = ctx->subs->elts;
		ngx_uint_t i, live = 0;
		for (i = 0; i < ctx->subs->nelts; i++) {
			if (e[i]->done)
				continue;
			ml_arm_upstream(e[i]);
			e[live++] = e[i];
		}
		ctx->subs->nelts = live;
	}
}

static void ml_event(ngx_event_t *ev, ngx_event_handler_pt orig)
{
	ngx_connection_t *c = ev->data;
	ngx_http_request_t *r = c->data;
	ngx_http_memlimits_ctx_t *ctx = NULL;

	if (r && r->signature == NGX_HTTP_MODULE)
		ctx = ml_ngx_get_ctx(r);
	if (!ctx || !ctx->task || ctx->stopped) {
		orig(ev);
		return;
	}
	if (ml_task_status(ctx->task) != ML_OK) {
		/* Stopped between callbacks (the global limit): its slices
		 * no longer run. */
		if (ml_ngx_end(ctx))
			orig(ev);
		return;
	}
	ml_ngx_call_t call = {orig, ev};
	ml_status st = ml_slice(ctx, ml_slice_event, &call);
	if (st == ML_EINVAL)
		return;
	if (st != ML_OK)
		ml_ngx_end(ctx);
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

/* ---- The request's start: PREACCESS -------------------------------------- */

ngx_int_t ngx_http_memlimits_handler(ngx_http_request_t *r)
{
	ngx_http_memlimits_loc_conf_t *lcf;
	ngx_http_memlimits_main_conf_t *mcf;
	ngx_http_memlimits_ctx_t *ctx;

	if (r != r->main) {
		/* A subrequest runs its phases inside a slice of its main
		 * request (posted requests run at the end of the main's
		 * slices): noted, so that its upstream's later events run as
		 * slices too (ml_arm). */
		ctx = ml_ngx_get_ctx(r);
		if (ctx && ctx->task)
			ml_note_sub(ctx, r);
		return NGX_DECLINED;
	}
	lcf = ngx_http_get_module_loc_conf(r, ngx_http_memlimits_module);
	ctx = ml_ngx_get_ctx(r);
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
		if (ml_ngx_refused(r, ctx, mcf))
			return ctx->status;
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
		ml_ngx_count(ML_NGX_STARTED);
		ctx->alloc_limit = l.alloc_bytes;
		ctx->held_limit = l.held_bytes;
		ngx_queue_insert_tail(&ml_ngx_live, &ctx->live);
	}
	ml_arm(ctx, NULL);
	/* The rest of the phases run as the request's first slice. */
	r->phase_handler++;
	ml_status st = ml_slice(ctx, ml_slice_phases, r);
	if (st != ML_OK && st != ML_EINVAL)
		ml_ngx_end(ctx);
	else if (st == ML_OK)
		ml_arm(ctx, NULL);
	return NGX_DONE;
}

/* ---- Variables -------------------------------------------------------------
 */

static ngx_int_t ngx_http_memlimits_variable(ngx_http_request_t *r,
                                             ngx_http_variable_value_t *v,
                                             uintptr_t data)
{
	ngx_http_memlimits_ctx_t *ctx = ml_ngx_get_ctx(r);
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

ngx_int_t ngx_http_memlimits_add_variables(ngx_conf_t *cf)
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
