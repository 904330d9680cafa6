/* memlimits accuracy: the comparison printed as text (the table and one
 * line a test), TSV (records by kind, `stop` records that --from reads
 * back) or JSON (one object).  Nothing in it comes from outside but
 * --from's file name, printed in text only. */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include "../lib/sampler/sampler.h"
#include "accuracy.h"
#include "svg.h"

static const char *kind_name(enum ml__acc_kind k)
{
	return k == ML__ACC_ALLOC  ? "alloc"
	       : k == ML__ACC_HELD ? "held"
	                           : "heap";
}

/* The tests that failed, and on which side, for the verdict's line. */
static const char *where(const struct ml__acc_result *r)
{
	static char buf[256];
	double each = r->alpha / 3;
	size_t k = 0;
	buf[0] = 0;
	if (r->ks_pv < each)
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%s",
		                      r->ks_earlier ? "the runs stop earlier "
		                                      "than the bounds"
		                                    : "the runs stop later "
		                                      "than the bounds");
	if (r->early_pv < each)
		k += (size_t)snprintf(buf + k, sizeof buf - k, "%s%s",
		                      k ? "; " : "",
		                      "too many stops before (1-a) L");
	if (r->late_pv < each)
		snprintf(buf + k, sizeof buf - k, "%s%s", k ? "; " : "",
		         "too many stops after (1+a) L");
	return buf;
}

void ml__acc_print(enum ml__acc_format format, const struct ml__acc_model *m,
                   const char *from, uint64_t runs,
                   const struct ml__acc_tally *t,
                   const struct ml__acc_result *r, const uint64_t *x)
{
	uint64_t k = ml__samples_needed(m->limit, m->interval);
	double lo = (1 - r->accuracy) * (double)m->limit,
	       hi = (1 + r->accuracy) * (double)m->limit, each = r->alpha / 3;
	char b[64];
	if (format == ML__ACC_JSON) {
		printf("{\"kind\": \"%s\", \"limit\": %" PRIu64
		       ", \"interval\": %" PRIu64 ", \"k\": %" PRIu64
		       ",\n \"runs\": {\"stopped\": %zu, \"fits\": %" PRIu64
		       ", \"failed\": %" PRIu64 ", \"crashed\": %" PRIu64
		       ", \"timed_out\": %" PRIu64
		       ", \"no_statistics\": %" PRIu64 "},\n \"min\": %" PRIu64
		       ", \"max\": %" PRIu64 ",\n \"quantiles\": [",
		       kind_name(m->kind), m->limit, m->interval, k, r->n,
		       t->fits, t->failed, t->crashed, t->timed_out,
		       t->no_stats, r->min, r->max);
		for (int i = 0; i < ML__ACC_NQ; i++)
			printf("%s{\"p\": %.9g, \"stops\": %" PRIu64
			       ", \"bounds\": %" PRIu64 "}",
			       i ? ", " : "", ml__acc_qs[i], r->emp[i],
			       r->theo[i]);
		printf(
		    "],\n \"accuracy\": %.9g,\n \"early\": {\"below\": %.9g, "
		    "\"count\": %zu, \"probability\": %.9g, \"p_value\": "
		    "%.9g},\n \"late\": {\"above\": %.9g, \"count\": %zu, "
		    "\"probability\": %.9g, \"p_value\": %.9g},\n"
		    " \"ks\": {\"d\": %.9g, \"at\": %" PRIu64
		    ", \"where\": \"%s\", \"p_value\": %.9g},\n"
		    " \"alpha\": %.9g, \"agree\": %s}\n",
		    r->accuracy, lo, r->early_n, r->early_p, r->early_pv, hi,
		    r->late_n, r->late_p, r->late_pv, r->ks_d, r->ks_at,
		    r->ks_earlier ? "earlier" : "later", r->ks_pv, r->alpha,
		    r->agree ? "true" : "false");
		return;
	}
	if (format == ML__ACC_TSV) {
		printf("# kind\tlimit_kind\tlimit\tinterval\tk\n"
		       "model\t%s\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64 "\n",
		       kind_name(m->kind), m->limit, m->interval, k);
		printf("# kind\tstopped\tfits\tfailed\tcrashed\ttimed_out"
		       "\tno_statistics\n"
		       "runs\t%zu\t%" PRIu64 "\t%" PRIu64 "\t%" PRIu64
		       "\t%" PRIu64 "\t%" PRIu64 "\n",
		       r->n, t->fits, t->failed, t->crashed, t->timed_out,
		       t->no_stats);
		printf("# kind\tp\tstops\tbounds\n");
		printf("quantile\t0\t%" PRIu64 "\t\n", r->min);
		for (int i = 0; i < ML__ACC_NQ; i++)
			printf("quantile\t%.9g\t%" PRIu64 "\t%" PRIu64 "\n",
			       ml__acc_qs[i], r->emp[i], r->theo[i]);
		printf("quantile\t1\t%" PRIu64 "\t\n", r->max);
		printf("# kind\tside\tbytes\tcount\tprobability\tp_value\n"
		       "tail\tearly\t%.0f\t%zu\t%.9g\t%.9g\n"
		       "tail\tlate\t%.0f\t%zu\t%.9g\t%.9g\n",
		       lo, r->early_n, r->early_p, r->early_pv, hi, r->late_n,
		       r->late_p, r->late_pv);
		printf("# kind\td\tat\twhere\tp_value\n"
		       "ks\t%.9g\t%" PRIu64 "\t%s\t%.9g\n",
		       r->ks_d, r->ks_at, r->ks_earlier ? "earlier" : "later",
		       r->ks_pv);
		printf("# kind\tverdict\talpha\nverdict\t%s\t%.9g\n",
		       r->agree ? "agree" : "contradict", r->alpha);
		printf("# kind\tbytes\n");
		for (size_t i = 0; i < r->n; i++)
			printf("stop\t%" PRIu64 "\n", x[i]);
		return;
	}
	ml__svg_bytes(b, sizeof b, (double)m->limit);
	printf("%s limit %" PRIu64 " bytes (%s), interval %" PRIu64
	       " bytes: k = %" PRIu64 "\n",
	       m->kind == ML__ACC_ALLOC  ? "allocation"
	       : m->kind == ML__ACC_HELD ? "held"
	                                 : "heap",
	       m->limit, b, m->interval, k);
	if (from)
		printf("stop points: %zu from %s\n", r->n, from);
	else
		printf("runs: %" PRIu64 ": %zu stopped by the limit, %" PRIu64
		       " ended without reaching it (the program fits), %" PRIu64
		       " failed, %" PRIu64 " crashed, %" PRIu64
		       " timed out, %" PRIu64 " stopped without statistics\n",
		       runs, r->n, t->fits, t->failed, t->crashed, t->timed_out,
		       t->no_stats);
	printf("\n  %8s %16s %16s %8s\n", "quantile", "stopped at", "bounds",
	       "ratio");
	printf("  %8s %16" PRIu64 "\n", "min", r->min);
	for (int i = 0; i < ML__ACC_NQ; i++)
		printf("  %7g%% %16" PRIu64 " %16" PRIu64 " %8.4f\n",
		       100 * ml__acc_qs[i], r->emp[i], r->theo[i],
		       (double)r->emp[i] / (double)r->theo[i]);
	printf("  %8s %16" PRIu64 "\n\n", "max", r->max);
	printf("stopped before (1-%g) L = %.0f bytes: %zu of %zu (%.4g), "
	       "bounds %.4g: p = %.3g%s\n",
	       r->accuracy, lo, r->early_n, r->n,
	       (double)r->early_n / (double)r->n, r->early_p, r->early_pv,
	       r->early_pv < each ? " (too many early stops)" : "");
	printf("stopped after (1+%g) L = %.0f bytes: %zu of %zu (%.4g), "
	       "bounds %.4g: p = %.3g%s\n",
	       r->accuracy, hi, r->late_n, r->n,
	       (double)r->late_n / (double)r->n, r->late_p, r->late_pv,
	       r->late_pv < each ? " (too many late stops)" : "");
	printf("Kolmogorov-Smirnov: D = %.4g at %" PRIu64 " bytes (%s the "
	       "bounds there), p = %.3g\n",
	       r->ks_d, r->ks_at,
	       r->ks_earlier ? "more runs stopped by then than"
	                     : "fewer runs stopped by then than",
	       r->ks_pv);
	if (r->agree)
		printf("agree: the stops follow the bounds at alpha %g (each "
		       "test at %.3g)\n",
		       r->alpha, each);
	else
		printf("contradict at alpha %g (each test at %.3g): %s\n",
		       r->alpha, each, where(r));
	if (t->fits)
		printf("note: %" PRIu64 " runs fit: the stops compared are "
		       "those that came before the\n  program's end, a "
		       "sample cut short, which the law describes only "
		       "when\n  no run fits\n",
		       t->fits);
	if (t->failed)
		printf("note: %" PRIu64 " runs failed (the first with status "
		       "%d), not compared\n",
		       t->failed, t->first_status);
	if (t->timed_out)
		printf("note: %" PRIu64 " runs timed out (--timeout), not "
		       "compared\n",
		       t->timed_out);
	if (t->crashed)
		printf("note: %" PRIu64 " runs crashed (the first by signal "
		       "%d), not compared\n",
		       t->crashed, t->first_sig);
}
