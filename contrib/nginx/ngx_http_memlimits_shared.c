/* The shared budget (memlimits_shared_limit): made by the master with no
 * name before it forks the workers, and the wake of a worker the budget
 * asks to stop one of its requests (an eventfd its event loop watches). */
#include "ngx_http_memlimits.h"

#include <sys/eventfd.h>

/* ---- The wake of the shared budget ----------------------------------------
 *
 * The library's wake handler has already interrupted the chosen task
 * (ML_GLOBAL_LIMIT) when it calls ml_wake, in a signal handler: ml_wake
 * only writes to the worker's eventfd, which the event loop watches; its
 * read handler ends the stopped requests.  Set in the master, which has
 * no eventfd (-1: nothing to wake), inherited by the workers, each of
 * which makes its own at its start. */
static volatile sig_atomic_t ml_wake_fd = -1;
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
	ml_ngx_end_stopped();
}

void ml_ngx_wake_start(ngx_cycle_t *cycle)
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

void ml_ngx_wake_stop(void)
{
	if (ml_wake_fd >= 0) {
		ml_wake_fd = -1; /* before the close: the handler may run */
		close(ml_wake_conn.fd);
	}
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

ngx_int_t ngx_http_memlimits_init_module(ngx_cycle_t *cycle)
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
