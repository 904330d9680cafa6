# PostgreSQL with the memlimits extension (issue 28, docs/postgresql.md):
# a cluster in a temporary directory, runaway statements of five kinds
# stopped while pgbench -S runs beside them, the settings' permissions,
# memlimits_activity() and memlimits_metrics() (promtool check metrics).
# Skipped with the reason where PostgreSQL or the extension's build is
# missing.
TESTS += tests/postgresql/test-postgresql.sh
EXTRA_DIST += tests/postgresql/test-postgresql.sh tests/postgresql/pg-cluster.sh
AM_TESTS_ENVIRONMENT += PG_BINDIR='$(PG_BINDIR)'; export PG_BINDIR;
