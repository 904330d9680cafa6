/* Stopped and refused requests (ngx_http_memlimits_module): the refusal
 * at memlimits_pressure, the sweep that ends requests stopped between
 * their events, the answer (memlimits_status, by the header filter, or a
 * close) and the one error-log line. */
#include "ngx_http_memlimits.h"

static ngx_http_output_header_filter_pt ngx_http_next_header_filter;
static ngx_event_t ml_sweep_ev;
static ngx_connection_t ml_sweep_conn; /* ngx_event_t wants a data */

/* ---- Why and where, for the log ------------------------------------------ */

static void ml_note(ngx_http_memlimits_ctx_t *ctx)
{
	if (ctx->noted || !ctx->task)
		return;
	ctx->noted = 1;
	ml_ngx_count_stop(ctx);
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
int ml_ngx_end(ngx_http_memlimits_ctx_t *ctx)
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

/* Ends the requests stopped by the global limit between callbacks, not at
 * their next event, which may never come (a client that stalls). */
void ml_ngx_end_stopped(void)
{
again:
	for (ngx_queue_t *q = ngx_queue_head(&ml_ngx_live);
	     q != ngx_queue_sentinel(&ml_ngx_live); q = ngx_queue_next(q)) {
		ngx_http_memlimits_ctx_t *ctx =
		    ngx_queue_data(q, ngx_http_memlimits_ctx_t, live);
		if (ctx->stopped || ctx->frame ||
		    ml_task_status(ctx->task) == ML_OK)
			continue;
		ml_ngx_end(ctx); /* may free ctx: start over */
		goto again;
	}
}

/* ---- Pressure: refusing a request -------------------------------------- */

/* memlimits_pressure: a new request is refused while the worker's heap is
 * over that fraction of memlimits_global.  Returns 1 when it is. */
ngx_int_t ml_ngx_refused(ngx_http_request_t *r, ngx_http_memlimits_ctx_t *ctx,
                         ngx_http_memlimits_main_conf_t *mcf)
{
	if (!mcf->global || !mcf->pressure)
		return 0;
	uint64_t usage = ml_global_memory_usage();
	if ((double)usage < (double)mcf->global * (double)mcf->pressure / 10000)
		return 0;
	ngx_log_error(NGX_LOG_ERR, r->connection->log, 0,
	              "memlimits: request refused: "
	              "worker heap %.1f MiB over "
	              "memlimits_pressure of "
	              "memlimits_global %.1f MiB",
	              (double)usage / 1048576.0,
	              (double)mcf->global / 1048576.0);
	/* The header filter makes whatever answer reaches it the module's. */
	ctx->refused = 1;
	ml_ngx_count(ML_NGX_REFUSED);
	r->keepalive = 0;
	return 1;
}

/* ---- Sweeping ----------------------------------------------------------- */

static void ml_sweep(ngx_event_t *ev)
{
	(void)ev;
	/* A safe point outside any slice (returns false there): a stop
	 * request of the shared budget that no wake signal brought (a
	 * library without one, a lost signal) is taken here. */
	if (ml_is_interrupted)
		(void)ml_is_interrupted();
	ml_ngx_end_stopped();
	if (!ngx_exiting)
		ngx_add_timer(&ml_sweep_ev, ML_SWEEP_MS);
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
	ngx_http_memlimits_ctx_t *ctx = ml_ngx_get_ctx(r);
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

ngx_int_t ngx_http_memlimits_log_handler(ngx_http_request_t *r)
{
	ngx_http_memlimits_ctx_t *ctx = ml_ngx_get_ctx(r);
	ml_ngx_publish_heap(0);
	if (!ctx || !ctx->task || ctx->logged ||
	    ml_task_status(ctx->task) == ML_OK)
		return NGX_OK;
	ctx->logged = 1;
	ml_log_stop(r, ctx);
	return NGX_OK;
}

void ml_ngx_sweep_start(ngx_cycle_t *cycle)
{
	ml_sweep_ev.handler = ml_sweep;
	ml_sweep_ev.data = &ml_sweep_conn;
	ml_sweep_ev.log = cycle->log;
	ml_sweep_ev.cancelable = 1;
	ngx_add_timer(&ml_sweep_ev, ML_SWEEP_MS);
}

/* Below the filters that come before it in ngx_module_order (config). */
void ml_ngx_filter_init(void)
{
	ngx_http_next_header_filter = ngx_http_top_header_filter;
	ngx_http_top_header_filter = ngx_http_memlimits_header_filter;
}
