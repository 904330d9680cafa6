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
# The before library's tree (kept between runs of make bench).
clean-local: clean-bench-before
clean-bench-before:
	-rm -rf bench/before-*
.PHONY: clean-bench-before
EXTRA_DIST += bench/run-bench.sh bench/run-overhead.sh bench/run-costs.sh \
	bench/build-before.sh bench/make-gcc-input.sh docs/performance.md
# Shared budgets (issue 27): what being a member costs an allocation
# (callgrind, bench/ml-bench), and the stop latency across processes and
# the overshoot at the stop (bench/shared-latency).
EXTRA_DIST += bench/run-shared.sh
EXTRA_PROGRAMS += bench/shared-latency
bench_shared_latency_SOURCES = bench/shared-latency.c
bench_shared_latency_LDADD = lib/libmemlimits.la
bench_shared_latency_LDFLAGS = -no-install
CLEANFILES += bench/shared-latency$(EXEEXT)

# The library at BENCH_BEFORE, built once from git into
# bench/before-COMMIT (bench/build-before.sh; nothing from a dist tarball),
# is the "before" column of run-bench.sh's table: every row on both
# libraries in one run.
BENCH_BEFORE = 77f52ed

# The price of each limit, before and after (callgrind and wall clock), the
# slow path, the cost of `memlimits run` on whole programs, then the costs
# make check must not judge (refusals and captures by stack depth,
# memlimits bounds: callgrind).
bench: $(BENCH_PROGS) lib/libmemlimits.la tools/memlimits$(EXEEXT) \
		tests/cli/test-stacks-retry$(EXEEXT) bench/shared-latency$(EXEEXT) \
		bench/map-many$(EXEEXT)
	@before=`SRCDIR='$(abs_top_srcdir)' BUILDDIR='$(abs_top_builddir)' \
	    COMMIT='$(BENCH_BEFORE)' CC='$(CC)' CFLAGS='$(CFLAGS)' \
	    CPPFLAGS='$(CPPFLAGS)' LDFLAGS='$(LDFLAGS)' \
	    $(SHELL) $(srcdir)/bench/build-before.sh`; \
	ML_BENCH='$(abs_top_builddir)/bench/ml-bench$(EXEEXT)' \
	GLIBC_BENCH='$(abs_top_builddir)/bench/glibc-bench$(EXEEXT)' \
	ML_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so.0' \
	BEFORE_LIB="$$before" BEFORE_NAME='$(BENCH_BEFORE)' CC_GCC='$(CC)' \
	VALGRIND='$(VALGRIND)' \
	$(SHELL) $(srcdir)/bench/run-bench.sh
	ML_BENCH='$(abs_top_builddir)/bench/ml-bench$(EXEEXT)' VALGRIND='$(VALGRIND)' \
	SHARED_LATENCY='$(abs_top_builddir)/bench/shared-latency$(EXEEXT)' \
	$(SHELL) $(srcdir)/bench/run-shared.sh
	MEMLIMITS_CMD='$(abs_top_builddir)/tools/memlimits$(EXEEXT)' \
	MEMLIMITS_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so' \
	PYTHON3='$(PYTHON3)' $(SHELL) $(srcdir)/bench/run-overhead.sh
	RETRY='$(abs_top_builddir)/tests/cli/test-stacks-retry$(EXEEXT)' \
	MEMLIMITS_CMD='$(abs_top_builddir)/tools/memlimits$(EXEEXT)' \
	MEMLIMITS_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so' \
	VALGRIND='$(VALGRIND)' $(SHELL) $(srcdir)/bench/run-costs.sh
	MAP_MANY='$(abs_top_builddir)/bench/map-many$(EXEEXT)' \
	ML_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so' \
	$(SHELL) $(srcdir)/bench/run-map-many.sh

.PHONY: bench

# Mappings with many live (issue 34): wall clock of an mmap+munmap pair,
# plain and under LD_PRELOAD (bench/run-map-many.sh).  Not linked with the
# library, so both run the same machine code.
EXTRA_PROGRAMS += bench/map-many
bench_map_many_SOURCES = bench/map-many.c
bench_map_many_LDFLAGS = -no-install
CLEANFILES += bench/map-many$(EXEEXT)
EXTRA_DIST += bench/run-map-many.sh

# Thread scaling (issue 17): bench/threads.c at 1, 2, 4, 8, 16 threads,
# every configuration against glibc at the same thread count.  One binary,
# not linked with the library: it finds the library's functions with
# dlsym, so that plain glibc, every configuration under
# LD_PRELOAD=libmemlimits.so and the other allocators preloaded alone all
# run the same machine code.  -no-install: no libtool wrapper between
# LD_PRELOAD and the program.
EXTRA_PROGRAMS += bench/threads-bench
bench_threads_bench_SOURCES = bench/threads.c
bench_threads_bench_CFLAGS = $(AM_CFLAGS) -pthread
bench_threads_bench_LDFLAGS = -no-install -pthread
CLEANFILES += bench/threads-bench$(EXEEXT)
EXTRA_DIST += bench/run-threads.sh

# BENCH_THREADS, BENCH_ITERS, BENCH_REPS and BENCH_OUT are passed on from
# the environment or the command line (bench/run-threads.sh says what they
# mean); the raw rows go to $(BENCH_OUT)/threads.tsv, by default to the
# current directory: here, the top of the build tree.
bench-threads: bench/threads-bench$(EXEEXT) lib/libmemlimits.la
	THREADS_BENCH='$(abs_top_builddir)/bench/threads-bench$(EXEEXT)' \
	ML_LIB='$(abs_top_builddir)/lib/.libs/libmemlimits.so' \
	BENCH_THREADS='$(BENCH_THREADS)' BENCH_ITERS='$(BENCH_ITERS)' \
	BENCH_REPS='$(BENCH_REPS)' \
	BENCH_OUT='$(BENCH_OUT)' \
	$(SHELL) $(srcdir)/bench/run-threads.sh

.PHONY: bench-threads

# PostgreSQL with the extension against the plain server, under pgbench
# (docs/postgresql.md "Overhead"): its own target, not part of make bench.
EXTRA_DIST += bench/run-postgres.sh
bench-postgres: lib/libmemlimits.la
	top_builddir='$(abs_top_builddir)' top_srcdir='$(abs_top_srcdir)' \
		PG_BINDIR='$(PG_BINDIR)' \
		$(SHELL) $(top_srcdir)/bench/run-postgres.sh
.PHONY: bench-postgres
