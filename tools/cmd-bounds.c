/* memlimits bounds: the documented bounds for a limit, or the limit for a
 * number of safe bytes.  The numbers come from ml_bound_*; what they mean
 * is in docs/statistics.md. */
#include "config.h"

#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lib/util/parse.h"
#include "../lib/sampler/sampler.h"
#include "memlimits.h"
#include "tool.h"

#define CMD "bounds"
#define MAX_TARGETS 32
#define MAX_CURVE 100000

enum format { TEXT, TSV, JSON };

struct opts {
	uint64_t interval, limit, safe, held, renewals;
	bool has_limit, has_safe, has_held, has_accuracy;
	double accuracy;
	enum format format;
	double targets[MAX_TARGETS];
	int ntargets;
	unsigned curve; /* 0: the fixed fractions; else N+1 points on [0, 2] */
};

static const double default_fractions[] = {0.1, 0.5, 0.9, 1.0, 1.1, 2.0};
static const double default_targets[] = {1e-3, 1e-9, 4e-15, 1e-50};

static const char synopsis[] =
    "[--interval SIZE] (--limit SIZE [--target P]... | --safe SIZE --target "
    "P... | --limit SIZE --held SIZE [--renewals N] | --limit SIZE "
    "--accuracy A [--target P]...) "
    "[--format=text|tsv|json] [--curve N]";

static void help(void)
{
	printf("Usage: memlimits bounds %s\n\n", synopsis);
	printf(
	    "The probability bounds of memlimits' sampler (docs/statistics.md).\n"
	    "A task with allocation limit L needs k = max(1, ceil(L/S)) samples "
	    "to be\ninterrupted; samples are a Poisson process of mean gap S "
	    "bytes over the\nbytes it allocates.\n\n"
	    "  --interval SIZE  the sample interval S (default " ML__INTERVAL_TEXT
	    ")\n"
	    "  --limit SIZE     print k, the probability of interruption before "
	    "10%%, 50%%,\n"
	    "                   90%%, 100%%, 110%% and 200%% of the limit, and "
	    "the safe bytes N\n"
	    "                   (interrupted before N with probability <= t) "
	    "with the\n"
	    "                   relative error (L-N)/N for each target t\n"
	    "  --safe SIZE      print the limit to set so that SIZE bytes are "
	    "safe\n"
	    "  --target P       a target probability t in (0, 1), repeatable "
	    "(default with\n"
	    "                   --limit: 1e-3, 1e-9, 4e-15, 1e-50)\n"
	    "  --curve N        with --limit: N+1 points evenly spaced on [0, "
	    "2L] instead\n"
	    "                   of the fixed fractions\n"
	    "  --held SIZE      with --limit as a held limit: the probability "
	    "that a task\n"
	    "                   holding at most SIZE bytes at any time is "
	    "stopped by it\n"
	    "  --renewals N     how many times that task renews what it holds "
	    "(default 1)\n"
	    "  --accuracy A     with --limit: the interval that makes the limit "
	    "fire between\n"
	    "                   (1-A) L and (1+A) L except with probability t "
	    "(each target;\n"
	    "                   default 1e-9), for ml_limits.interval, and its "
	    "cost\n"
	    "  --format FORMAT  text (default), tsv or json\n"
	    "  --help           this text\n\n"
	    "SIZE: bytes, or with a binary suffix k/K/KB/KiB, M/MB/MiB, "
	    "G/GB/GiB.\n"
	    "Probabilities below 1e-300 print as 0 (text: <1e-300).\n");
}

static uint64_t size_arg(const char *opt, const char *v)
{
	return ml__tool_size(CMD, opt, v);
}

static void parse(int argc, char **argv, struct opts *o)
{
	enum {
		O_INTERVAL = 256,
		O_LIMIT,
		O_SAFE,
		O_TARGET,
		O_FORMAT,
		O_CURVE,
		O_HELD,
		O_RENEWALS,
		O_ACCURACY,
		O_HELP
	};
	static const struct option longopts[] = {
	    {"interval", required_argument, NULL, O_INTERVAL},
	    {"limit", required_argument, NULL, O_LIMIT},
	    {"safe", required_argument, NULL, O_SAFE},
	    {"target", required_argument, NULL, O_TARGET},
	    {"format", required_argument, NULL, O_FORMAT},
	    {"curve", required_argument, NULL, O_CURVE},
	    {"held", required_argument, NULL, O_HELD},
	    {"renewals", required_argument, NULL, O_RENEWALS},
	    {"accuracy", required_argument, NULL, O_ACCURACY},
	    {"help", no_argument, NULL, O_HELP},
	    {NULL, 0, NULL, 0},
	};
	*o = (struct opts){.interval = ML__DEFAULT_INTERVAL, .format = TEXT};
	bool has_curve = false;
	opterr = 0;
	optind = 1;
	for (;;) {
		int prev = optind;
		int c = getopt_long(argc, argv, "+:h", longopts, NULL);
		if (c == -1)
			break;
		switch (c) {
		case O_INTERVAL:
			o->interval = size_arg("--interval", optarg);
			if (o->interval == 0)
				ml__tool_usage_error(
				    CMD,
				    "the interval must be at least 1 byte");
			break;
		case O_LIMIT:
			if (o->has_limit)
				ml__tool_usage_error(CMD,
				                     "--limit given twice");
			/* 2^64-1 is ML_NO_LIMIT, which ml_bound_* read as
			 * no limit (probability 0): refused rather than a
			 * jump from the answer for 2^64-2. */
			if (ml__parse_limit(optarg, &o->limit) ==
			    ML__PARSE_NO_LIMIT)
				ml__tool_usage_error(
				    CMD,
				    "--limit '%s': 2^64-1 bytes means no limit "
				    "(the largest limit is 2^64-2)",
				    optarg);
			o->limit = size_arg("--limit", optarg);
			if (o->limit == 0)
				ml__tool_usage_error(
				    CMD, "--limit must be at least 1 byte");
			o->has_limit = true;
			break;
		case O_SAFE:
			if (o->has_safe)
				ml__tool_usage_error(CMD, "--safe given twice");
			o->safe = size_arg("--safe", optarg);
			o->has_safe = true;
			break;
		case O_TARGET:
			if (o->ntargets == MAX_TARGETS)
				ml__tool_usage_error(
				    CMD, "at most %d --target values",
				    MAX_TARGETS);
			if (ml__parse_prob(optarg, &o->targets[o->ntargets]))
				ml__tool_usage_error(
				    CMD,
				    "invalid probability for --target: '%s' "
				    "(a number in (0, 1), such as 1e-9)",
				    optarg);
			o->ntargets++;
			break;
		case O_FORMAT:
			if (!strcmp(optarg, "text"))
				o->format = TEXT;
			else if (!strcmp(optarg, "tsv"))
				o->format = TSV;
			else if (!strcmp(optarg, "json"))
				o->format = JSON;
			else
				ml__tool_usage_error(
				    CMD,
				    "invalid --format '%s' (text, tsv or json)",
				    optarg);
			break;
		case O_CURVE: {
			uint64_t n;
			if (ml__parse_u64(optarg, &n) || n < 1 || n > MAX_CURVE)
				ml__tool_usage_error(
				    CMD,
				    "invalid --curve '%s' (1 to %d points)",
				    optarg, MAX_CURVE);
			o->curve = (unsigned)n;
			has_curve = true;
			break;
		}
		case O_HELD:
			if (o->has_held)
				ml__tool_usage_error(CMD, "--held given twice");
			o->held = size_arg("--held", optarg);
			o->has_held = true;
			break;
		case O_RENEWALS:
			if (ml__parse_u64(optarg, &o->renewals) ||
			    o->renewals < 1)
				ml__tool_usage_error(
				    CMD,
				    "invalid --renewals '%s' (a whole number >= "
				    "1)",
				    optarg);
			break;
		case O_ACCURACY:
			if (ml__parse_prob(optarg, &o->accuracy))
				ml__tool_usage_error(
				    CMD,
				    "invalid --accuracy '%s' (a fraction in "
				    "(0, 1), e.g. 0.1)",
				    optarg);
			o->has_accuracy = true;
			break;
		case 'h':
		case O_HELP:
			help();
			exit(ML__TOOL_OK);
		default:
			ml__tool_option_error(CMD, c, argc, argv, prev);
		}
	}
	if (optind < argc)
		ml__tool_usage_error(CMD, "unexpected argument '%s'",
		                     argv[optind]);
	if (o->has_limit == o->has_safe)
		ml__tool_usage_error(CMD, "give either --limit SIZE or --safe "
		                          "SIZE --target P");
	if (o->has_held && !o->has_limit)
		ml__tool_usage_error(CMD, "--held goes with --limit");
	if (o->renewals && !o->has_held)
		ml__tool_usage_error(CMD, "--renewals goes with --held");
	if (o->has_held && (has_curve || o->ntargets))
		ml__tool_usage_error(CMD,
		                     "--held goes with neither --curve nor "
		                     "--target");
	if (o->has_accuracy && (!o->has_limit || o->has_held || has_curve))
		ml__tool_usage_error(CMD, "--accuracy goes with --limit (and "
		                          "--target), nothing else");
	if (o->has_accuracy && o->ntargets == 0) {
		o->targets[0] = 1e-9;
		o->ntargets = 1;
	}
	if (o->has_safe && o->ntargets == 0)
		ml__tool_usage_error(CMD, "--safe needs --target P");
	if (o->has_safe && has_curve)
		ml__tool_usage_error(CMD, "--curve goes with --limit");
	if (o->has_limit && o->ntargets == 0) {
		o->ntargets =
		    sizeof default_targets / sizeof default_targets[0];
		memcpy(o->targets, default_targets, sizeof default_targets);
	}
}

/* "64 MiB", "1.50 GiB", "512 bytes". */
static const char *human(uint64_t n, char *buf, size_t len)
{
	static const char *units[] = {"bytes", "KiB", "MiB", "GiB",
	                              "TiB",   "PiB", "EiB"};
	double v = (double)n;
	int u = 0;
	while (v >= 1024 && u < 6) {
		v /= 1024;
		u++;
	}
	if (u == 0)
		snprintf(buf, len, "%" PRIu64 " bytes", n);
	else if (v == floor(v))
		snprintf(buf, len, "%.0f %s", v, units[u]);
	else
		snprintf(buf, len, "%.3g %s", v, units[u]);
	return buf;
}

/* limit * f to the nearest byte; in long double, whose 64-bit (x86-64) or
 * wider mantissa holds every limit exactly: in double, 100 % of a limit
 * above 2^53 printed another number (2^64-2 showed as 2^64-1). */
static uint64_t scaled(uint64_t limit, double f)
{
	long double v = floorl((long double)limit * f + 0.5L);
	return v >= 0x1p64L ? UINT64_MAX : (uint64_t)v;
}

/* Probabilities below the documented range print as 0. */
static double clean(double p)
{
	return p < 1e-300 ? 0 : p;
}

/* (l - N) / N, or infinity when nothing is safe. */
static double rel_error(uint64_t limit, uint64_t n)
{
	if (n == 0)
		return INFINITY;
	return ((double)limit - (double)n) / (double)n;
}

static void json_num(double v)
{
	if (isfinite(v))
		printf("%.9g", v);
	else
		printf("null");
}

static void print_limit(const struct opts *o)
{
	uint64_t s = o->interval, l = o->limit, k = ml__samples_needed(l, s);
	unsigned npoints =
	    o->curve ? o->curve + 1
	             : sizeof default_fractions / sizeof default_fractions[0];
	char b1[64], b2[64];
	switch (o->format) {
	case TEXT:
		printf("limit %" PRIu64 " bytes (%s), sample interval %" PRIu64
		       " bytes: k = %" PRIu64 " sample%s\n",
		       l, human(l, b1, sizeof b1), s, k, k == 1 ? "" : "s");
		printf("\nP(interrupted before n bytes):\n  %10s %14s   %s\n",
		       "of limit", "n", "probability");
		break;
	case TSV:
		printf("# kind\tlimit\tinterval\tk\n");
		printf("limit\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n", l, s,
		       k);
		printf("# kind\tfraction\tbytes\tprobability\n");
		break;
	case JSON:
		printf("{\"limit\": %" PRIu64 ", \"interval\": %" PRIu64
		       ", \"k\": %" PRIu64 ",\n \"alloc\": [",
		       l, s, k);
		break;
	}
	for (unsigned i = 0; i < npoints; i++) {
		double f = o->curve ? 2.0 * i / o->curve : default_fractions[i];
		uint64_t n = scaled(l, f);
		double p = ml_bound_alloc(n, l, s);
		switch (o->format) {
		case TEXT:
			if (p < 1e-300)
				printf("  %9.4g%% %14" PRIu64 "   <1e-300\n",
				       100 * f, n);
			else
				printf("  %9.4g%% %14" PRIu64 "   %.4g\n",
				       100 * f, n, p);
			break;
		case TSV:
			printf("alloc\t%.9g\t%" PRIu64 "\t%.9g\n", f, n,
			       clean(p));
			break;
		case JSON:
			printf("%s\n  {\"fraction\": %.9g, \"bytes\": %" PRIu64
			       ", \"probability\": %.9g}",
			       i ? "," : "", f, n, clean(p));
			break;
		}
	}
	switch (o->format) {
	case TEXT:
		printf("\nSafe bytes N, P(interrupted before N bytes) <= t:\n"
		       "  %10s %14s   %-12s %s\n",
		       "target t", "N", "", "(l-N)/N");
		break;
	case TSV:
		printf("# kind\ttarget\tsafe_bytes\trelative_error\n");
		break;
	case JSON:
		printf("],\n \"safe\": [");
		break;
	}
	for (int i = 0; i < o->ntargets; i++) {
		double t = o->targets[i];
		uint64_t n = ml_bound_safe_bytes(l, t, s);
		double e = rel_error(l, n);
		switch (o->format) {
		case TEXT:
			printf("  %10.3g %14" PRIu64 "   %-12s %.4g\n", t, n,
			       n ? human(n, b2, sizeof b2) : "", e);
			break;
		case TSV:
			printf("safe\t%.9g\t%" PRIu64 "\t%.9g\n", t, n, e);
			break;
		case JSON:
			printf("%s\n  {\"target\": %.9g, \"bytes\": %" PRIu64
			       ", \"relative_error\": ",
			       i ? "," : "", t, n);
			json_num(e);
			printf("}");
			break;
		}
	}
	if (o->format == JSON)
		printf("]}\n");
}

static void print_safe(const struct opts *o)
{
	uint64_t s = o->interval, n = o->safe;
	char b1[64], b2[64];
	switch (o->format) {
	case TEXT:
		printf("to allocate %" PRIu64 " bytes (%s) at sample interval "
		       "%" PRIu64 " bytes:\n",
		       n, human(n, b1, sizeof b1), s);
		break;
	case TSV:
		printf("# kind\tsafe\ttarget\tinterval\tlimit\tk\n");
		break;
	case JSON:
		printf("{\"safe\": %" PRIu64 ", \"interval\": %" PRIu64
		       ", \"limits\": [",
		       n, s);
		break;
	}
	for (int i = 0; i < o->ntargets; i++) {
		double t = o->targets[i];
		uint64_t l = ml_bound_limit_for(n, t, s);
		bool none = l == ML_NO_LIMIT;
		uint64_t k = none ? 0 : l / s;
		switch (o->format) {
		case TEXT:
			if (none)
				printf("  with P(interrupted) <= %g: no "
				       "representable limit is enough\n",
				       t);
			else
				printf("  with P(interrupted) <= %g: set the "
				       "limit to %" PRIu64
				       " bytes (%s, k = %" PRIu64 ")\n",
				       t, l, human(l, b2, sizeof b2), k);
			break;
		case TSV:
			if (none)
				printf("limit_for\t%" PRIu64 "\t%.9g\t%" PRIu64
				       "\tnone\tnone\n",
				       n, t, s);
			else
				printf("limit_for\t%" PRIu64 "\t%.9g\t%" PRIu64
				       "\t%" PRIu64 "\t%" PRIu64 "\n",
				       n, t, s, l, k);
			break;
		case JSON:
			printf("%s\n  {\"target\": %.9g, \"limit\": ",
			       i ? "," : "", t);
			if (none)
				printf("null, \"k\": null}");
			else
				printf("%" PRIu64 ", \"k\": %" PRIu64 "}", l,
				       k);
			break;
		}
	}
	if (o->format == JSON)
		printf("]}\n");
}

/* --held: ml_bound_held (docs/statistics.md, "Held memory"). */
static void print_held(const struct opts *o)
{
	uint64_t r = o->renewals ? o->renewals : 1;
	double p = ml_bound_held(o->held, r, o->limit, o->interval);
	char b1[64], b2[64];
	switch (o->format) {
	case TEXT:
		printf("held limit %" PRIu64 " bytes (%s), sample interval "
		       "%" PRIu64 " bytes, k = %" PRIu64 ":\n"
		       "P(stopped while holding at most %" PRIu64
		       " bytes (%s), renewed %" PRIu64 " time%s) <= %.4g\n",
		       o->limit, human(o->limit, b1, sizeof b1), o->interval,
		       ml__samples_needed(o->limit, o->interval), o->held,
		       human(o->held, b2, sizeof b2), r, r == 1 ? "" : "s",
		       clean(p));
		break;
	case TSV:
		printf("# kind\tlimit\tinterval\theld\trenewals\tprobability\n"
		       "held\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
		       "\t%.9g\n",
		       o->limit, o->interval, o->held, r, clean(p));
		break;
	case JSON:
		printf("{\"limit\": %" PRIu64 ", \"interval\": %" PRIu64
		       ", \"held\": %" PRIu64 ", \"renewals\": %" PRIu64
		       ", \"probability\": %.9g}\n",
		       o->limit, o->interval, o->held, r, clean(p));
		break;
	}
}

/* --accuracy: the interval that keeps the limit within +-A at each target
 * (ml_bound_interval_for), the two tails there, and its cost. */
static void print_accuracy(const struct opts *o)
{
	char b1[64];
	if (o->format == TEXT)
		printf("limit %" PRIu64 " bytes (%s), accuracy +-%.4g %%:\n"
		       "  %10s %10s %8s %12s %12s %14s\n",
		       o->limit, human(o->limit, b1, sizeof b1),
		       100 * o->accuracy, "target", "interval", "k", "P(early)",
		       "P(late)", "slow paths/MiB");
	else if (o->format == TSV)
		printf("# kind\tlimit\taccuracy\ttarget\tinterval\tk\tearly"
		       "\tlate\n");
	else
		printf("{\"limit\": %" PRIu64 ", \"accuracy\": %.9g, "
		       "\"intervals\": [",
		       o->limit, o->accuracy);
	for (int i = 0; i < o->ntargets; i++) {
		double t = o->targets[i], early = 0, late = 0;
		uint64_t s = ml_bound_interval_for(o->limit, o->accuracy, t);
		uint64_t k = s ? ml__samples_needed(o->limit, s) : 0;
		if (s)
			ml__bound_outside(o->limit, o->accuracy, s, &early,
			                  &late);
		double per_mib = s ? 1048576.0 / (double)s : 0;
		switch (o->format) {
		case TEXT:
			if (!s)
				printf("  %10.3g %10s   (not reachable: even 1 "
				       "byte is too coarse)\n",
				       t, "-");
			else
				printf("  %10.3g %10" PRIu64 " %8" PRIu64
				       " %12.4g %12.4g %14.1f\n",
				       t, s, k, clean(early), clean(late),
				       per_mib);
			break;
		case TSV:
			printf("accuracy\t%" PRIu64 "\t%.9g\t%.9g\t%" PRIu64
			       "\t%" PRIu64 "\t%.9g\t%.9g\n",
			       o->limit, o->accuracy, t, s, k, clean(early),
			       clean(late));
			break;
		case JSON:
			printf("%s{\"target\": %.9g, \"interval\": %" PRIu64
			       ", \"k\": %" PRIu64 ", \"early\": ",
			       i ? ", " : "", t, s, k);
			json_num(clean(early));
			printf(", \"late\": ");
			json_num(clean(late));
			printf("}");
			break;
		}
	}
	if (o->format == JSON)
		printf("]}\n");
	else if (o->format == TEXT)
		printf("\n(k samples to the limit; about one slow path per "
		       "interval allocated, only\nwhile the task runs: "
		       "ml_limits.interval)\n");
}

static int bounds_main(int argc, char **argv)
{
	struct opts o;
	parse(argc, argv, &o);
	if (o.has_accuracy)
		print_accuracy(&o);
	else if (o.has_held)
		print_held(&o);
	else if (o.has_limit)
		print_limit(&o);
	else
		print_safe(&o);
	return fflush(stdout) == 0 && !ferror(stdout) ? ML__TOOL_OK : 1;
}

const struct ml__tool_cmd ml__tool_cmd_bounds = {
    .name = "bounds",
    .synopsis = synopsis,
    .summary = "probability bounds: interruption odds, safe bytes, the "
               "limit to set",
    .main = bounds_main,
};
