/* ngx_http_memlimits_module: a memory limit per request (docs/nginx.md).
 * This file is the module's glue: its directives, its configuration and
 * their checks, and its start in each process; the other files each do
 * one job: ngx_http_memlimits_request.c (requests as tasks),
 * ngx_http_memlimits_stop.c (pressure, sweeping, the answer and the log
 * of a stopped request), ngx_http_memlimits_shared.c (the shared budget
 * and its wake), ngx_http_memlimits_metrics.c (memlimits_metrics).
 */
#include "ngx_http_memlimits.h"

static ngx_int_t ngx_http_memlimits_init(ngx_conf_t *cf);
static ngx_int_t ngx_http_memlimits_init_process(ngx_cycle_t *cycle);
static void ngx_http_memlimits_exit_process(ngx_cycle_t *cycle);
static void *ngx_http_memlimits_create_main_conf(ngx_conf_t *cf);
static void *ngx_http_memlimits_create_loc_conf(ngx_conf_t *cf);
static char *ngx_http_memlimits_merge_loc_conf(ngx_conf_t *cf, void *parent,
                                               void *child);
static char *ngx_http_memlimits_pressure(ngx_conf_t *cf, ngx_command_t *cmd,
                                         void *conf);
static char *ngx_http_memlimits_set_status(ngx_conf_t *cf, ngx_command_t *cmd,
                                           void *conf);

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
	if (ml_ngx_metrics_zone(cf, mcf) != NGX_OK)
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

	ml_ngx_filter_init();
	return NGX_OK;
}

static ngx_int_t ngx_http_memlimits_init_process(ngx_cycle_t *cycle)
{
	ngx_http_memlimits_main_conf_t *mcf;

	ml_ngx_request_init_process(cycle);
	ml_ngx_metrics_init_process();
	mcf = ngx_http_cycle_get_module_main_conf(cycle,
	                                          ngx_http_memlimits_module);
	if (mcf == NULL || (!mcf->global && !mcf->shared))
		return NGX_OK;
	/* Per worker: each worker is its own heap. */
	if (mcf->global)
		ml_set_global_memory_limit(mcf->global);
	ml_ngx_sweep_start(cycle);
	if (mcf->shared)
		ml_ngx_wake_start(cycle);
	return NGX_OK;
}

static void ngx_http_memlimits_exit_process(ngx_cycle_t *cycle)
{
	(void)cycle;
	ml_ngx_wake_stop();
}
