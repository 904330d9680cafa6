/* guarded-server: an HTTP/1.1 server on 127.0.0.1 whose every request runs
 * under memlimits, and a demo that shows what that buys.  See README.md.
 *
 *   guarded-server [options]            serve until SIGINT/SIGTERM
 *   guarded-server --demo [--compare | --no-limits] [--quick]
 */
#include "gs.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
	fputs(
	    "usage: guarded-server [--port N] [--workers N] [--no-limits]\n"
	    "         [--global-limit MiB] [--json-limit MiB] "
	    "[--expand-limit MiB]\n"
	    "         [--deadline MS] [--read-timeout MS] [--watchdog MiB] "
	    "[--verbose]\n"
	    "       guarded-server --demo [--compare | --no-limits] [--quick]\n"
	    "         [--seconds S] [--clients N] [--runaways N]\n",
	    f);
}

static bool num(const char *s, unsigned long long max, unsigned long long *v)
{
	char *end;
	if (!s || !*s || *s == '-')
		return false;
	*v = strtoull(s, &end, 10);
	return !*end && *v <= max;
}

int main(int argc, char **argv)
{
	struct gs_config cfg;
	gs_default_config(&cfg);
	struct gs_demo_opts o = {.well = 4,
	                         .runaway = 4,
	                         .stream_mb = 1024,
	                         .baseline_s = 6,
	                         .load_s = 12};
	bool demo = false, seconds_set = false;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned long long x = 0;
		bool takes = true, ok = true;
		if (!strcmp(a, "--demo"))
			demo = true, takes = false;
		else if (!strcmp(a, "--compare"))
			o.compare = true, takes = false;
		else if (!strcmp(a, "--quick"))
			o.quick = true, takes = false;
		else if (!strcmp(a, "--no-limits"))
			cfg.limits = false, o.no_limits = true, takes = false;
		else if (!strcmp(a, "--verbose"))
			cfg.verbose = true, takes = false;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(a, "--port") && (ok = num(v, 65535, &x)))
			cfg.port = (int)x;
		else if (!strcmp(a, "--workers") && (ok = num(v, 256, &x) && x))
			cfg.workers = (unsigned)x;
		else if (!strcmp(a, "--global-limit") &&
		         (ok = num(v, 1 << 20, &x)))
			cfg.global_limit = x * MiB;
		else if (!strcmp(a, "--json-limit") &&
		         (ok = num(v, 1 << 20, &x)))
			cfg.json_limit = x * MiB;
		else if (!strcmp(a, "--expand-limit") &&
		         (ok = num(v, 1 << 20, &x)))
			cfg.expand_limit = x * MiB;
		else if (!strcmp(a, "--deadline") &&
		         (ok = num(v, 600000, &x) && x))
			cfg.deadline_ms = (unsigned)x;
		else if (!strcmp(a, "--read-timeout") &&
		         (ok = num(v, 600000, &x) && x))
			cfg.read_timeout_ms = (unsigned)x;
		else if (!strcmp(a, "--watchdog") && (ok = num(v, 1 << 20, &x)))
			cfg.watchdog_rss = x * MiB;
		else if (!strcmp(a, "--seconds") && (ok = num(v, 600, &x) && x))
			o.load_s = (double)x, seconds_set = true;
		else if (!strcmp(a, "--clients") && (ok = num(v, 64, &x) && x))
			o.well = (unsigned)x;
		else if (!strcmp(a, "--runaways") && (ok = num(v, 64, &x) && x))
			o.runaway = (unsigned)x;
		else
			ok = false;
		if (!ok) {
			fprintf(stderr,
			        "guarded-server: bad argument: %s%s%s\n", a,
			        v && takes ? " " : "", v && takes ? v : "");
			usage(stderr);
			return 2;
		}
		if (takes)
			i++;
	}
	if (!demo)
		return gs_serve(&cfg, -1, -1);
	if (o.quick) {
		/* make check: the same three conditions in a few seconds */
		o.baseline_s = 1.5;
		if (!seconds_set)
			o.load_s = 4;
		o.well = o.well > 3 ? 3 : o.well;
		o.runaway = o.runaway > 3 ? 3 : o.runaway;
		o.stream_mb = 256;
		cfg.deadline_ms = 1000;
		cfg.long_deadline_ms = 10000;
		cfg.read_timeout_ms = 500;
	}
	if (seconds_set)
		o.baseline_s = o.load_s / 2;
	return gs_demo(&cfg, &o);
}
