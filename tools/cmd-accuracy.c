/* memlimits accuracy: run a program many times under one limit, or read
 * stop points collected elsewhere (--from), and test where the limit
 * stopped it against the law the library documents (tools/accuracy.h lists
 * the files; docs/statistics.md, "Testing a limit on your program", the
 * math).
 *
 * Each run is `memlimits run --on-limit abort --stats DIR --seed K+i`,
 * this very command exec'd again: abort mode ends a stopped run at the
 * trip with status 3, so the statistics file it writes then holds the
 * bytes allocated through the allocation that reached the limit, whatever
 * the program would have done after a refusal.  Everything is checked and
 * every run has ended before anything is written, so that bad input is one
 * line on stderr and nothing else. */
#include "config.h"

#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../lib/sampler/sampler.h"
#include "../lib/util/parse.h"
#include "accuracy.h"
#include "memlimits.h"
#include "svg.h"
#include "tool.h"

#define CMD "accuracy"
#define MAX_RUNS 1000000u
#define MAX_POINTS 10000000u

struct opts {
	struct ml__acc_runs r; /* the limit, and the runs */
	const char *from, *plot;
	double alpha, accuracy;
	enum ml__acc_format format;
	int nlimits;
};

static const char synopsis[] =
    "[--runs N] [-j J] [--seed-base K] [--timeout SECONDS] [--alpha A] "
    "[--accuracy a] "
    "[--plot OUT.svg] [--format text|tsv|json] "
    "(--alloc-limit|--held-limit) SIZE [--interval SIZE] -- "
    "PROGRAM [ARG...] | --from FILE --limit SIZE [--interval SIZE] "
    "[--kind alloc|held|heap] [...]";

static void help(void)
{
	printf("Usage: memlimits accuracy %s\n\n", synopsis);
	printf(
	    "Test where a limit stops a program against the law of "
	    "docs/statistics.md\n(the code of memlimits bounds): quantiles "
	    "side by side, the fractions stopped\nbefore (1-a)L and after "
	    "(1+a)L against their probabilities, and a\n"
	    "Kolmogorov-Smirnov test of the whole law.\n\n"
	    "  --alloc-limit SIZE  run PROGRAM under this allocation limit\n"
	    "  --held-limit SIZE   ... or held limit: the blocks held at the "
	    "stop, whose law is\n"
	    "                      the same where held bytes only grow near "
	    "the limit (a leak)\n"
	    "  --heap-limit SIZE   refused for now: near the limit the "
	    "resident memory decides,\n"
	    "                      which the runs' files do not carry\n"
	    "                      (--from FILE --kind heap tests heap stops: "
	    "L + Exp(S))\n"
	    "  --interval SIZE     the sample interval S (default " ML__INTERVAL_TEXT
	    ")\n"
	    "  --runs N            how many runs (default 200)\n"
	    "  -j J                runs at a time (default: the CPUs)\n"
	    "  --seed-base K       run i gets --seed K+i (default 1)\n"
	    "  --timeout SECONDS   end a run after this long (SIGALRM): "
	    "counted as timed out\n"
	    "  --from FILE         read stop points instead (one a line, or "
	    "this command's\n"
	    "                      --format tsv); with --limit SIZE and --kind\n"
	    "  --kind KIND         alloc (default), held or heap, for --from\n"
	    "  --alpha A           the level of the test (default 0.001): "
	    "each of the three\n"
	    "                      tests at A/3\n"
	    "  --accuracy a        the band +-a around the limit (default 0.1)\n"
	    "  --plot OUT.svg      draw the empirical CDF over the law's\n"
	    "  --format FORMAT     text (default), tsv or json\n\n"
	    "Exit status: 0 the stops agree with the bounds, 1 they contradict "
	    "them (the\nreport says where), 2 bad input.  Runs that end "
	    "without reaching the limit\n(the program fits) and runs that "
	    "crash are counted, not compared.\n");
}

static uint64_t size_arg(const char *opt, const char *v)
{
	return ml__tool_size(CMD, opt, v);
}

static uint64_t count_arg(const char *opt, const char *v, uint64_t lo,
                          uint64_t hi)
{
	uint64_t x;
	if (ml__parse_u64(v, &x) || x < lo || x > hi)
		ml__tool_usage_error(CMD,
		                     "invalid %s '%s' (a whole number from "
		                     "%" PRIu64 " to %" PRIu64 ")",
		                     opt, v, lo, hi);
	return x;
}

static void set_limit(struct opts *o, enum ml__acc_kind kind, const char *opt,
                      const char *v)
{
	if (o->nlimits++)
		ml__tool_usage_error(CMD, "one limit only (%s is the second)",
		                     opt);
	o->r.m.kind = kind;
	o->r.m.limit = size_arg(opt, v);
	if (o->r.m.limit == 0 || o->r.m.limit == ML_NO_LIMIT)
		ml__tool_usage_error(CMD,
		                     "%s '%s': a limit from 1 byte to "
		                     "2^64-2",
		                     opt, v);
	o->r.limit_text = v;
}

static void parse(int argc, char **argv, struct opts *o)
{
	enum {
		O_ALLOC = 256,
		O_HELD,
		O_HEAP,
		O_LIMIT,
		O_INTERVAL,
		O_RUNS,
		O_SEED,
		O_ALPHA,
		O_ACCURACY,
		O_PLOT,
		O_FORMAT,
		O_FROM,
		O_KIND,
		O_TIMEOUT,
		O_HELP
	};
	static const struct option longopts[] = {
	    {"alloc-limit", required_argument, NULL, O_ALLOC},
	    {"held-limit", required_argument, NULL, O_HELD},
	    {"heap-limit", required_argument, NULL, O_HEAP},
	    {"limit", required_argument, NULL, O_LIMIT},
	    {"interval", required_argument, NULL, O_INTERVAL},
	    {"runs", required_argument, NULL, O_RUNS},
	    {"seed-base", required_argument, NULL, O_SEED},
	    {"alpha", required_argument, NULL, O_ALPHA},
	    {"accuracy", required_argument, NULL, O_ACCURACY},
	    {"plot", required_argument, NULL, O_PLOT},
	    {"format", required_argument, NULL, O_FORMAT},
	    {"from", required_argument, NULL, O_FROM},
	    {"kind", required_argument, NULL, O_KIND},
	    {"timeout", required_argument, NULL, O_TIMEOUT},
	    {"help", no_argument, NULL, O_HELP},
	    {NULL, 0, NULL, 0},
	};
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	*o = (struct opts){.r.m.interval = ML__DEFAULT_INTERVAL,
	                   .r.runs = 200,
	                   .r.jobs = ncpu > 0 ? (uint64_t)ncpu : 1,
	                   .r.seed = 1,
	                   .alpha = 0.001,
	                   .accuracy = 0.1};
	bool has_limit = false, has_kind = false, has_runs = false;
	enum ml__acc_kind kind = ML__ACC_ALLOC;
	opterr = 0;
	optind = 1;
	for (;;) {
		int prev = optind;
		int c = getopt_long(argc, argv, "+:hj:", longopts, NULL);
		if (c == -1)
			break;
		switch (c) {
		case O_ALLOC:
			set_limit(o, ML__ACC_ALLOC, "--alloc-limit", optarg);
			break;
		case O_HELD:
			set_limit(o, ML__ACC_HELD, "--held-limit", optarg);
			break;
		case O_HEAP:
			set_limit(o, ML__ACC_HEAP, "--heap-limit", optarg);
			break;
		case O_LIMIT:
			set_limit(o, ML__ACC_ALLOC, "--limit", optarg);
			has_limit = true;
			break;
		case O_INTERVAL:
			o->r.m.interval = size_arg("--interval", optarg);
			if (o->r.m.interval == 0)
				ml__tool_usage_error(
				    CMD,
				    "the interval must be at least 1 byte");
			o->r.interval_text = optarg;
			break;
		case O_RUNS:
			o->r.runs = count_arg("--runs", optarg, 1, MAX_RUNS);
			has_runs = true;
			break;
		case O_TIMEOUT:
			o->r.timeout =
			    count_arg("--timeout", optarg, 1, 86400 * 365);
			break;
		case 'j':
			o->r.jobs = count_arg("-j", optarg, 1, 1024);
			break;
		case O_SEED:
			o->r.seed = count_arg("--seed-base", optarg, 0,
			                      UINT64_MAX - MAX_RUNS);
			break;
		case O_ALPHA:
			if (ml__parse_prob(optarg, &o->alpha))
				ml__tool_usage_error(
				    CMD,
				    "invalid --alpha '%s' (a probability "
				    "in (0, 1), e.g. 0.001)",
				    optarg);
			break;
		case O_ACCURACY:
			if (ml__parse_prob(optarg, &o->accuracy))
				ml__tool_usage_error(
				    CMD,
				    "invalid --accuracy '%s' (a fraction "
				    "in (0, 1), e.g. 0.1)",
				    optarg);
			break;
		case O_PLOT:
			o->plot = optarg;
			break;
		case O_FORMAT:
			if (!strcmp(optarg, "text"))
				o->format = ML__ACC_TEXT;
			else if (!strcmp(optarg, "tsv"))
				o->format = ML__ACC_TSV;
			else if (!strcmp(optarg, "json"))
				o->format = ML__ACC_JSON;
			else
				ml__tool_usage_error(
				    CMD,
				    "invalid --format '%s' (text, tsv or "
				    "json)",
				    optarg);
			break;
		case O_FROM:
			o->from = optarg;
			break;
		case O_KIND:
			if (!strcmp(optarg, "alloc"))
				kind = ML__ACC_ALLOC;
			else if (!strcmp(optarg, "held"))
				kind = ML__ACC_HELD;
			else if (!strcmp(optarg, "heap"))
				kind = ML__ACC_HEAP;
			else
				ml__tool_usage_error(
				    CMD,
				    "invalid --kind '%s' (alloc, held or "
				    "heap)",
				    optarg);
			has_kind = true;
			break;
		case 'h':
		case O_HELP:
			help();
			exit(ML__TOOL_OK);
		default:
			ml__tool_option_error(CMD, c, argc, argv, prev);
		}
	}
	if (o->nlimits == 0)
		ml__tool_usage_error(
		    CMD, o->from ? "--from needs --limit SIZE"
		                 : "no limit: give --alloc-limit, --held-limit "
		                   "or --heap-limit SIZE");
	if (o->from) {
		if (!has_limit)
			ml__tool_usage_error(CMD, "--from goes with --limit "
			                          "SIZE (and --kind)");
		if (optind < argc)
			ml__tool_usage_error(CMD,
			                     "--from runs nothing: "
			                     "unexpected argument '%s'",
			                     argv[optind]);
		if (has_runs || o->r.timeout)
			ml__tool_usage_error(CMD,
			                     "--runs and --timeout go with "
			                     "a program, not --from");
		o->r.m.kind = kind;
		return;
	}
	if (has_limit || has_kind)
		ml__tool_usage_error(CMD, "--limit and --kind go with --from; "
		                          "a run takes --alloc-limit, "
		                          "--held-limit or --heap-limit");
	/* Near its limit the heap limit decides on the process's resident
	 * private memory when that is more than its blocks (heap_over in
	 * lib/run/runmode.c), which no file of a run carries: measured, runs
	 * under 8 MiB stopped with 7.2 to 8.5 MB of blocks.  Until a run
	 * says what decided, heap stops come from --from alone. */
	if (o->r.m.kind == ML__ACC_HEAP)
		ml__tool_usage_error(CMD, "--heap-limit: runs cannot be read "
		                          "yet (what decided the stop is not "
		                          "in their files); use --from FILE "
		                          "--kind heap");
	if (optind >= argc)
		ml__tool_usage_error(CMD, "missing PROGRAM (after --)");
	o->r.argv = argv + optind;
}

/* ---- The stop points ------------------------------------------------- */

struct points {
	uint64_t *x;
	size_t n, cap;
};

static void add_point(struct points *p, uint64_t v)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? 2 * p->cap : 256;
		uint64_t *x = realloc(p->x, cap * sizeof *x);
		if (!x)
			ml__tool_usage_error(CMD, "out of memory");
		p->x = x, p->cap = cap;
	}
	p->x[p->n++] = v;
}

/* The TSV records of this command that are not stop points. */
static bool other_record(const char *s)
{
	static const char *const kinds[] = {"model", "runs", "quantile",
	                                    "tail",  "ks",   "verdict"};
	for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
		size_t n = strlen(kinds[i]);
		if (!strncmp(s, kinds[i], n) && s[n] == '\t')
			return true;
	}
	return false;
}

/* --from FILE: one size a line (ml__parse_size: bytes or 64MiB), or the
 * "stop" records of --format tsv; comments (#) and blank lines skipped;
 * anything else is bad input naming its line. */
static void read_from(const char *file, struct points *p)
{
	FILE *f = ml__svg_open_in(CMD, file);
	char *buf = NULL;
	size_t cap = 0;
	uint64_t line = 0;
	ssize_t len;
	while ((len = ml__svg_read_line(CMD, file, f, &buf, &cap, &line)) >=
	       0) {
		char *s = buf;
		while (*s == ' ' || *s == '\t')
			s++;
		if (*s == 0 || *s == '#' || other_record(s))
			continue;
		if (!strncmp(s, "stop\t", 5)) {
			char *last = strrchr(s, '\t');
			s = last + 1;
		}
		char *e = s + strlen(s);
		while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
			*--e = 0;
		uint64_t v;
		if (ml__parse_size(s, &v) != 0)
			ml__tool_usage_error(CMD,
			                     "%s:%" PRIu64 ": not a stop point "
			                     "(a number of bytes a line, or "
			                     "--format tsv)",
			                     file, line);
		if (p->n == MAX_POINTS)
			ml__tool_usage_error(CMD,
			                     "%s: more than %u stop points",
			                     file, MAX_POINTS);
		add_point(p, v);
	}
	free(buf);
	if (f != stdin)
		fclose(f);
	if (p->n == 0)
		ml__tool_usage_error(CMD, "%s: no stop points", file);
}

static int accuracy_main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	struct points p = {0};
	struct ml__acc_tally t = {0};
	if (o.from)
		read_from(o.from, &p);
	else
		ml__acc_run(&o.r, &p.x, &p.n, &t);
	/* Said as what happened: a program that fits ends on its own; one
	 * that fails every run (a wrong argument) does not fit anything. */
	if (p.n == 0)
		ml__tool_usage_error(
		    CMD,
		    "no run reached the limit: %s (%" PRIu64
		    " ended on their own, %" PRIu64 " failed, %" PRIu64
		    " crashed, %" PRIu64 " timed out)",
		    t.fits ? "the program fits" : "no run ended on its own",
		    t.fits, t.failed, t.crashed, t.timed_out);
	struct ml__acc_result r;
	ml__acc_compare(&o.r.m, p.x, p.n, o.accuracy, o.alpha, &r);
	if (o.plot) {
		char title[160];
		snprintf(title, sizeof title,
		         "Where the %s limit stopped %zu runs",
		         o.r.m.kind == ML__ACC_ALLOC  ? "allocation"
		         : o.r.m.kind == ML__ACC_HELD ? "held"
		                                      : "heap",
		         p.n);
		ml__acc_plot(o.plot, &o.r.m, p.x, p.n, o.accuracy, title);
	}
	ml__acc_print(o.format, &o.r.m, o.from, o.r.runs, &t, &r, p.x);
	free(p.x);
	if (fflush(stdout) != 0 || ferror(stdout))
		return ML__TOOL_USAGE;
	return r.agree ? ML__TOOL_OK : 1;
}

const struct ml__tool_cmd ml__tool_cmd_accuracy = {
    .name = "accuracy",
    .synopsis = synopsis,
    .summary = "run a program many times under a limit and test its stops "
               "against the bounds",
    .main = accuracy_main,
};
