# Benchmarks: built and run only by `make bench` (never by make or make
# check).  One source, two binaries: bench/ml-bench is linked with the
# library, bench/glibc-bench is not, so the baseline is plain glibc running
# the very same loop.  -no-install: no libtool wrapper script, so valgrind
# and LD_PRELOAD see the real program.
EXTRA_PROGRAMS = bench/ml-bench bench/glibc-bench
BENCH_PROGS = bench/ml-bench$(EXEEXT) bench/glibc-bench$(EXEEXT)

bench_ml_bench_SOURCES = bench/bench.c
bench_ml_bench_LDADD = lib/libmemlimits.la
bench_ml_bench_LDFLAGS = -no-install

bench_glibc_bench_SOURCES = bench/bench.c
bench_glibc_bench_CPPFLAGS = $(AM_CPPFLAGS) -DBENCH_GLIBC
bench_glibc_bench_LDFLAGS = -no-install

CLEANFILES += $(BENCH_PROGS)
EXTRA_DIST += bench/run-bench.sh bench/run-overhead.sh docs/performance.md

# The allocator loop and the slow path (callgrind and wall clock), then the
# cost of `memlimits run` on whole programs.
bench: $(BENCH_PROGS) lib/libmemlimits.la tools/memlimits$(EXEEXT)
	ML_BENCH='$(abs_top_builddir)/bench/ml-bench$(EXEEXT)' \
	GLIBC_BENCH='$(abs_top_builddir)/bench/glibc-bench$(EXEEXT)' \
	ML_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so' \
	VALGRIND='$(VALGRIND)' \
	$(SHELL) $(srcdir)/bench/run-bench.sh
	MEMLIMITS_CMD='$(abs_top_builddir)/tools/memlimits$(EXEEXT)' \
	MEMLIMITS_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so' \
	PYTHON3='$(PYTHON3)' $(SHELL) $(srcdir)/bench/run-overhead.sh

.PHONY: bench
