#!/bin/sh
# memlimits accuracy (issue 45): stop points tested against the bounds.
#  - --from with points drawn from the documented law (Gamma(k, S): the sum
#    of k Exp(S) gaps) by awk with a fixed seed: exit 0; the same points
#    scaled by 0.9 and 1.1, and points drawn at another interval than the
#    one assumed: exit 1, naming where;
#  - real runs of tests/cli/test-accuracy-prog (4 KiB blocks until stopped)
#    under --alloc-limit and, holding its blocks, --held-limit: exit 0 and
#    the table; their TSV read back by --from gives the same verdict;
#  - bad input: exit 2, one line on stderr, nothing on stdout, no plot.
#
# False alarms.  Every comparison that must agree (5 on distinct points:
# the law, the law at S = 20000, and the alloc, held and python3 runs;
# the JSON case and the TSV read back repeat two of them) runs at
# --alpha 1e-7: the command rejects when one of its three tests has a
# p-value below alpha/3.  The two binomial tail tests are exact (and,
# being discrete, conservative): each rejects with probability at most
# alpha/3.  For Kolmogorov-Smirnov, the command's p-value is Stephens'
# Q((sqrt(n) + 0.12 + 0.11/sqrt(n)) D), which falls below alpha/3 = 3.3e-8
# once (sqrt(n) + 0.12 + 0.11/sqrt(n)) D > 2.993 (the first term of Q is
# all that matters there); by the Dvoretzky-Kiefer-Wolfowitz-Massart
# inequality, P(D > d) <= 2 exp(-2 n d^2) for every n, that is at most
# 2.13 alpha/3 at n = 40 (d = 0.4632) and 1.10 alpha/3 at n = 2000 (d =
# 0.0668).  So a comparison raises a false alarm with probability at most
# (1 + 1 + 2.13) alpha/3 = 1.38e-7, and the five together at most 6.9e-7,
# below 1e-6 (union bound).  The real runs depart from the law only by the
# 4 KiB a stop is measured late (an allocation limit's: the block that
# holds the k-th point counts whole) or early (a held limit's: the refused
# block is not held), malloc's rounding of 4096 up to 4104 usable bytes,
# and what was allocated before main: under 2 % of the law's standard
# deviation (sqrt(105) * 80000 bytes = 820 KB), far too little to move a
# test of 40 points.  Python's start-up allocates and frees several MB, all
# of it freed before its blocks pile up, so its held bytes follow the law
# too (docs/statistics.md, "Testing a limit on your program").  The seeds are fixed, so each
# run of this test gives the same points: the probabilities say how
# unlikely a false alarm was for these seeds, not how often it flickers.
#
# Power.  Scaling by 0.9 or 1.1 moves every point by 0.1 L, about one
# standard deviation of the law at k = 105: with 2000 points
# Kolmogorov-Smirnov's D is near 0.43, and its p-value below 1e-300.
# Points drawn at S = 20000 (k = 420) and compared at S = 80000 (k = 105)
# have half the law's spread around the same mean: D near 0.17, p near
# 1e-50.  Both are far past alpha/3 at the default alpha (0.001).
: "${top_builddir:?}" "${top_srcdir:?}"
M=$top_builddir/tools/memlimits
P=$top_builddir/tests/cli/test-accuracy-prog
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-accuracy.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT INT TERM
export LC_ALL=C
unset LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_STATS_DIR MEMLIMITS_ON_LIMIT \
	MEMLIMITS_SAMPLE_INTERVAL MEMLIMITS_SEED MEMLIMITS_HELD_LIMIT
. "$top_srcdir/tests/tap/tap.sh"
test -x "$M" && test -x "$P" || {
	echo "Bail out! $M or $P not built"
	exit 1
}

# gamma N K S SEED FACTOR: N points, each the sum of K Exp(S) gaps, times
# FACTOR, rounded to whole bytes.
gamma() {
	awk -v n="$1" -v k="$2" -v s="$3" -v seed="$4" -v f="$5" 'BEGIN {
		srand(seed)
		for (i = 0; i < n; i++) {
			t = 0
			for (j = 0; j < k; j++)
				t -= s * log(1 - rand())
			printf "%.0f\n", t * f
		}
	}'
}

# L = 8 MiB at the default interval: k = ceil(8388608 / 80000) = 105.
L=8MiB
gamma 2000 105 80000 45 1 >"$tmp/law"
gamma 2000 105 80000 45 0.9 >"$tmp/small"
gamma 2000 105 80000 45 1.1 >"$tmp/large"
gamma 2000 420 20000 46 1 >"$tmp/s20000"

if tap_case from-law; then
	"$M" accuracy --from "$tmp/law" --limit $L --alpha 1e-7 \
		>"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && test ! -s "$tmp/err" &&
		grep -q '^agree' "$tmp/out" &&
		grep -q 'k = 105' "$tmp/out" &&
		grep -q '^stop points: 2000 from' "$tmp/out"; then
		ok "--from: 2000 points drawn from Gamma(105, 80000) agree with the bounds"
	else
		notok "--from on the law: status $st"
		diag "$tmp/out" "$tmp/err"
	fi
fi

if tap_case from-json; then
	# The same comparison as one JSON object (python3's parser, where it
	# is installed).
	"$M" accuracy --from "$tmp/law" --limit $L --alpha 1e-7 --format json \
		>"$tmp/json" 2>"$tmp/err"
	st=$?
	if ! command -v python3 >/dev/null 2>&1; then
		skip "no python3 to parse the JSON"
	elif test "$st" = 0 && python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["agree"] is True and d["k"] == 105 and d["runs"]["stopped"] == 2000
assert len(d["quantiles"]) == 5 and d["ks"]["where"] in ("earlier", "later")
' "$tmp/json" 2>"$tmp/py"; then
		ok "--format json: one object with the verdict, k, the quantiles and the test"
	else
		notok "--format json: status $st"
		diag "$tmp/json" "$tmp/err" "$tmp/py"
	fi
fi

if tap_case from-scaled; then
	for f in small large; do
		"$M" accuracy --from "$tmp/$f" --limit $L >"$tmp/out" 2>"$tmp/err"
		st=$?
		case $f in
		small) where='the runs stop earlier than the bounds' ;;
		large) where='the runs stop later than the bounds' ;;
		esac
		if test "$st" = 1 && grep -q "^contradict.*$where" "$tmp/out"; then
			ok "--from: the points scaled for '$f' contradict the bounds ($where)"
		else
			notok "--from scaled ($f): status $st"
			diag "$tmp/out" "$tmp/err"
		fi
	done
	# Too many early stops against the early tail's probability (0.149
	# at +-10 %): 0.9 L moves half the points below (1-a) L.
	"$M" accuracy --from "$tmp/small" --limit $L --format tsv >"$tmp/tsv"
	st=$?
	early=$(awk -F'\t' '$1 == "tail" && $2 == "early" { print $6 }' "$tmp/tsv")
	if test "$st" = 1 && awk -v p="$early" 'BEGIN { exit !(p < 1e-6) }'; then
		ok "--from scaled by 0.9: the early tail's p-value ($early) names it"
	else
		notok "--from scaled by 0.9, tsv: status $st, early p '$early'"
		diag "$tmp/tsv"
	fi
fi

if tap_case from-interval; then
	"$M" accuracy --from "$tmp/s20000" --limit $L >"$tmp/out" 2>"$tmp/err"
	st1=$?
	"$M" accuracy --from "$tmp/s20000" --limit $L --interval 20000 \
		--alpha 1e-7 >"$tmp/out2" 2>"$tmp/err2"
	st2=$?
	if test "$st1" = 1 && grep -q '^Kolmogorov-Smirnov' "$tmp/out" &&
		grep -q '^contradict' "$tmp/out" && test "$st2" = 0; then
		ok "--from: points drawn at S = 20000 contradict S = 80000 and agree with S = 20000"
	else
		notok "--from, another interval: status $st1 (want 1), $st2 (want 0)"
		diag "$tmp/out" "$tmp/err" "$tmp/out2" "$tmp/err2"
	fi
fi

if tap_case runs-alloc; then
	"$M" accuracy --runs 40 -j 2 --seed-base 1 --alpha 1e-7 \
		--alloc-limit $L --plot "$tmp/a.svg" --format tsv \
		-- "$P" alloc >"$tmp/a.tsv" 2>"$tmp/err"
	st=$?
	stops=$(grep -c '^stop	' "$tmp/a.tsv")
	if test "$st" = 0 && test ! -s "$tmp/err" && test "$stops" = 40 &&
		grep -q '^runs	40	0	0	0	0	0$' "$tmp/a.tsv" &&
		test "$(grep -c '^quantile	' "$tmp/a.tsv")" = 7 &&
		grep -q '^verdict	agree' "$tmp/a.tsv" &&
		grep -q '</svg>' "$tmp/a.svg"; then
		ok "40 runs under --alloc-limit 8MiB: 40 stops, they agree, a table and a plot"
	else
		notok "runs under --alloc-limit: status $st, $stops stops"
		diag "$tmp/a.tsv" "$tmp/err"
	fi
	if command -v python3 >/dev/null 2>&1; then
		python3 "$top_srcdir/tests/cli/svg-check.py" "$tmp/a.svg" >"$tmp/svg" 2>&1
		check $? "the plot's texts lie inside the picture"
	else
		skip "no python3 for svg-check.py"
	fi
	# The TSV read back: the same points, the same verdict and D.
	"$M" accuracy --from "$tmp/a.tsv" --limit $L --alpha 1e-7 --format tsv \
		>"$tmp/b.tsv" 2>"$tmp/err"
	st=$?
	d1=$(awk -F'\t' '$1 == "ks" { print $2 }' "$tmp/a.tsv")
	d2=$(awk -F'\t' '$1 == "ks" { print $2 }' "$tmp/b.tsv")
	if test "$st" = 0 && test -n "$d1" && test "$d1" = "$d2"; then
		ok "the runs' TSV read back by --from: the same D ($d1)"
	else
		notok "TSV round trip: status $st, D '$d1' then '$d2'"
		diag "$tmp/b.tsv" "$tmp/err"
	fi
fi

if tap_case runs-held; then
	"$M" accuracy --runs 40 -j 2 --seed-base 1000 --alpha 1e-7 \
		--held-limit $L -- "$P" held >"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 0 && grep -q '^held limit 8388608 bytes' "$tmp/out" &&
		grep -q '^runs: 40: 40 stopped by the limit' "$tmp/out" &&
		grep -qE '^ +50% ' "$tmp/out" && grep -q '^agree' "$tmp/out"; then
		ok "40 runs of a program holding its blocks under --held-limit 8MiB agree"
	else
		notok "runs under --held-limit: status $st"
		diag "$tmp/out" "$tmp/err"
	fi
fi

if tap_case runs-python; then
	# The Python case through python3 -c, no Python function needed:
	# fresh interpreters keeping 4 KiB bytearrays under a held limit.
	if command -v python3 >/dev/null 2>&1; then
		"$M" accuracy --runs 40 -j 2 --seed-base 2000 --alpha 1e-7 \
			--held-limit $L -- python3 -c \
			'x=[bytearray(4096) for _ in range(20000)]' \
			>"$tmp/out" 2>"$tmp/err"
		st=$?
		if test "$st" = 0 &&
			grep -q '^runs: 40: 40 stopped by the limit' "$tmp/out"; then
			ok "40 python3 runs keeping bytearrays under --held-limit 8MiB agree"
		else
			notok "python3 under --held-limit: status $st"
			diag "$tmp/out" "$tmp/err"
		fi
	else
		skip "no python3"
	fi
fi

if tap_case runs-fit; then
	# 4 MiB allocated in all under an 8 MiB limit (105 samples needed,
	# 52 expected): stopped with probability P(Poisson(52.4) >= 105),
	# below 1e-10 a run.
	"$M" accuracy --runs 4 -j 2 --alloc-limit $L -- "$P" alloc 4 \
		>"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 2 && test ! -s "$tmp/out" &&
		test "$(wc -l <"$tmp/err")" = 1 &&
		grep -q 'the program fits (4 ended on their own' "$tmp/err"; then
		ok "a program that fits: said so, nothing compared"
	else
		notok "a program that fits: status $st"
		diag "$tmp/out" "$tmp/err"
	fi
fi

if tap_case runs-timeout; then
	# A program that waits forever, ended by --timeout's alarm after 1 s
	# (the alarm is the end of the run, not an ordering).
	"$M" accuracy --runs 2 -j 2 --timeout 1 --alloc-limit $L -- "$P" hang \
		>"$tmp/out" 2>"$tmp/err"
	st=$?
	if test "$st" = 2 && test ! -s "$tmp/out" &&
		grep -q '0 crashed, 2 timed out)$' "$tmp/err"; then
		ok "runs past --timeout are counted as timed out"
	else
		notok "--timeout: status $st"
		diag "$tmp/out" "$tmp/err"
	fi
fi

if tap_case bad-input; then
	printf '8388608\n8MiB\nnot a number\n' >"$tmp/garbage"
	: >"$tmp/empty"
	i=0
	while IFS='|' read -r what args; do
		i=$((i + 1))
		rm -f "$tmp/bad.svg"
		# shellcheck disable=SC2086 # the arguments are words
		eval "set -- $args"
		"$M" accuracy --plot "$tmp/bad.svg" "$@" >"$tmp/out" 2>"$tmp/err"
		st=$?
		if test "$st" = 2 && test ! -s "$tmp/out" &&
			test "$(wc -l <"$tmp/err")" = 1 && test ! -e "$tmp/bad.svg" &&
			grep -q '^memlimits accuracy: ' "$tmp/err"; then
			ok "bad input ($what): exit 2, one line: $(cat "$tmp/err")"
		else
			notok "bad input ($what): status $st"
			diag "$tmp/out" "$tmp/err"
		fi
	done <<EOF
no limit|--runs 2 -- "$P" alloc
two limits|--alloc-limit 8MiB --held-limit 8MiB -- "$P" alloc
--runs 0|--runs 0 --alloc-limit 8MiB -- "$P" alloc
a missing program|--runs 2 --alloc-limit 8MiB -- "$tmp/no-such-program"
a missing program in PATH|--runs 2 --alloc-limit 8MiB -- no-such-program-of-memlimits
no program|--alloc-limit 8MiB
--from with garbage lines|--from "$tmp/garbage" --limit 8MiB
--from an empty file|--from "$tmp/empty" --limit 8MiB
--from a missing file|--from "$tmp/none" --limit 8MiB
--from without --limit|--from "$tmp/law"
--timeout with --from|--from "$tmp/law" --limit 8MiB --timeout 5
--from with a program|--from "$tmp/law" --limit 8MiB -- "$P" alloc
a bad size|--alloc-limit 8XB -- "$P" alloc
a bad alpha|--alpha 2 --alloc-limit 8MiB -- "$P" alloc
a bad --kind|--from "$tmp/law" --limit 8MiB --kind stack
runs under a heap limit (not read yet)|--runs 2 --heap-limit 8MiB -- "$P" held
--from with a garbage line after good ones|--from "$tmp/garbage" --limit 8MiB --format tsv
EOF
	"$M" accuracy --from "$tmp/garbage" --limit 8MiB 2>"$tmp/err" >/dev/null
	grep -q 'garbage:3: not a stop point' "$tmp/err"
	check $? "a garbage line is named by its number"
fi

tap_done
