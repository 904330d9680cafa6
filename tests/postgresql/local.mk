# PostgreSQL with the memlimits extension (issue 28, docs/postgresql.md):
# a cluster in a temporary directory, runaway statements of five kinds
# stopped while pgbench -S runs beside them, the settings' permissions,
# memlimits_activity() and memlimits_metrics() (promtool check metrics).
# Skipped with the reason where PostgreSQL or the extension's build is
# missing.
TESTS += tests/postgresql/test-postgresql.sh
EXTRA_DIST += tests/postgresql/test-postgresql.sh tests/postgresql/pg-cluster.sh
AM_TESTS_ENVIRONMENT += PG_BINDIR='$(PG_BINDIR)'; export PG_BINDIR;

# make check-pg-regress (issue 35, docs/postgresql.md): PostgreSQL's own
# regression suite against a plain server and against one with the
# extension and its limits; the same result.  Not in make check (minutes:
# two runs of the suite, and the first time Debian's source fetched and
# src/test/regress built, cached in pg-regress/ of the build directory).
EXTRA_DIST += tests/postgresql/pg-regress.sh
# "all": the extension is built only where configure found PostgreSQL (the
# script skips, saying so, where it is not).
check-pg-regress: all
	top_builddir='$(abs_top_builddir)' top_srcdir='$(abs_top_srcdir)' \
		PG_BINDIR='$(PG_BINDIR)' \
		$(SHELL) $(top_srcdir)/tests/postgresql/pg-regress.sh
.PHONY: check-pg-regress
# The fetched source and its build (about 210 MB) go with make clean.
clean-local: clean-pg-regress
clean-pg-regress:
	rm -rf pg-regress
.PHONY: clean-pg-regress
