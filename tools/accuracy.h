/* memlimits accuracy, between its files:
 *   cmd-accuracy.c   the command line, the --from reader, the output
 *   accuracy-run.c   the runs of the program under `memlimits run`
 *   accuracy-stat.c  the law of the stop points (through ml_bound_*, the
 *                    code of memlimits bounds) and the tests against it
 *   accuracy-print.c the comparison as text, TSV or JSON
 *   accuracy-plot.c  --plot: the empirical CDF over the law's, as SVG
 * The math is in docs/statistics.md, "Testing a limit on your program". */
#ifndef ML_TOOLS_ACCURACY_H
#define ML_TOOLS_ACCURACY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Which limit stopped the runs: its stop points are bytes allocated
 * (alloc), bytes allocated by a program that frees nothing (held), or the
 * heap at the refusal (heap). */
enum ml__acc_kind { ML__ACC_ALLOC, ML__ACC_HELD, ML__ACC_HEAP };

struct ml__acc_model {
	enum ml__acc_kind kind;
	uint64_t limit, interval;
};

/* The runs asked for: the limit as given (for `memlimits run`), how many,
 * how many at a time, the first seed, PROGRAM [ARG...]. */
struct ml__acc_runs {
	struct ml__acc_model m;
	const char *limit_text, *interval_text;
	uint64_t runs, jobs, seed;
	uint64_t timeout; /* seconds a run may take; 0: no limit */
	char **argv;
};

/* How the runs ended: stopped by the limit, ended on their own with
 * status 0 (the program fits), with another status, by a signal, past
 * --timeout, or stopped without a statistics file. */
struct ml__acc_tally {
	uint64_t stopped, fits, failed, crashed, timed_out, no_stats;
	int first_sig, first_status;
};

/* Run them; *x (malloc'd) and *n the stop points.  A program that cannot
 * run, or a run that `memlimits run` refuses, is one line and status 2
 * (every run would be refused alike).  argv[0] becomes the program's full
 * name. */
void ml__acc_run(struct ml__acc_runs *o, uint64_t **x, size_t *n,
                 struct ml__acc_tally *t);

/* P(stop point <= x) under the documented law. */
double ml__acc_cdf(const struct ml__acc_model *m, double x);
/* The law's p-quantile in bytes: the smallest n with cdf(n) >= p. */
uint64_t ml__acc_quantile(const struct ml__acc_model *m, double p);
/* P(stop < (1-a) L) and P(stop > (1+a) L). */
void ml__acc_tails(const struct ml__acc_model *m, double a, double *early,
                   double *late);

#define ML__ACC_NQ 5
extern const double ml__acc_qs[ML__ACC_NQ]; /* 1, 10, 50, 90, 99 % */

struct ml__acc_result {
	size_t n; /* stop points */
	uint64_t min, max;
	uint64_t emp[ML__ACC_NQ];         /* empirical quantiles */
	uint64_t theo[ML__ACC_NQ];        /* the law's */
	double accuracy, early_p, late_p; /* the law's tails at +-a */
	size_t early_n, late_n;           /* the runs' counts */
	double early_pv, late_pv;         /* one-sided binomial p-values */
	double ks_d, ks_pv;               /* Kolmogorov-Smirnov */
	uint64_t ks_at;  /* the stop point where D is reached */
	bool ks_earlier; /* there, more runs stopped than the law says */
	double alpha;    /* each test at alpha / 3 */
	bool agree;
};

/* Sorts x[0, n) (n >= 1) and compares it with the law. */
void ml__acc_compare(const struct ml__acc_model *m, uint64_t *x, size_t n,
                     double a, double alpha, struct ml__acc_result *r);

enum ml__acc_format { ML__ACC_TEXT, ML__ACC_TSV, ML__ACC_JSON };

/* The comparison on stdout (from: --from's file, NULL for runs; runs:
 * how many were asked for; x: the sorted stop points). */
void ml__acc_print(enum ml__acc_format format, const struct ml__acc_model *m,
                   const char *from, uint64_t runs,
                   const struct ml__acc_tally *t,
                   const struct ml__acc_result *r, const uint64_t *x);

/* --plot OUT: the picture of sorted x[0, n), or one line and status 2. */
void ml__acc_plot(const char *out, const struct ml__acc_model *m,
                  const uint64_t *x, size_t n, double a, const char *title);

#endif
