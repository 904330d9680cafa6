# The PostgreSQL extension (issue 28, docs/postgresql.md): built with PGXS
# against the server configure's pg_config describes, out of tree (in
# contrib/postgresql/build of the build directory: nothing is written into
# the source directory), installed where pg_config says (PG_PKGLIBDIR,
# PG_SHAREDIR/extension), honouring DESTDIR.  It does not link the
# library: the server preloads it.
EXTRA_DIST += contrib/postgresql/Makefile contrib/postgresql/memlimits.c \
	contrib/postgresql/slice.c contrib/postgresql/statement.c \
	contrib/postgresql/commit.c contrib/postgresql/shmem.c \
	contrib/postgresql/cluster.c contrib/postgresql/sql.c \
	contrib/postgresql/metrics.c contrib/postgresql/memlimits_pg.h \
	contrib/postgresql/memlimits_sql.h \
	contrib/postgresql/ml_prom.c contrib/postgresql/memlimits.control contrib/postgresql/memlimits--0.3.sql \
	contrib/postgresql/memlimits.conf
if BUILD_POSTGRESQL
# PGXS, run in the build tree with the source Makefile (its VPATH build);
# with_llvm=no: no bitcode for the server's JIT (inlining is not worth
# a clang run and an install under pkglibdir/bitcode).
ML_PGXS = $(MAKE) -C contrib/postgresql/build \
	-f '$(abs_top_srcdir)/contrib/postgresql/Makefile' \
	PG_CONFIG='$(PG_CONFIG)' ML_INCLUDE='$(abs_top_srcdir)/include' \
	with_llvm=no pkglibdir='$(PG_PKGLIBDIR)' datadir='$(PG_SHAREDIR)'
all-local: contrib/postgresql/build/memlimits.so
contrib/postgresql/build/memlimits.so: \
		$(top_srcdir)/contrib/postgresql/memlimits.c \
		$(top_srcdir)/contrib/postgresql/slice.c \
		$(top_srcdir)/contrib/postgresql/statement.c \
		$(top_srcdir)/contrib/postgresql/commit.c \
		$(top_srcdir)/contrib/postgresql/shmem.c \
		$(top_srcdir)/contrib/postgresql/cluster.c \
		$(top_srcdir)/contrib/postgresql/sql.c \
		$(top_srcdir)/contrib/postgresql/metrics.c \
		$(top_srcdir)/contrib/postgresql/memlimits_pg.h \
		$(top_srcdir)/contrib/postgresql/memlimits_sql.h \
		$(top_srcdir)/contrib/postgresql/ml_prom.c \
		$(top_srcdir)/lib/util/prom.c $(top_srcdir)/lib/util/parse.c \
		$(top_srcdir)/contrib/postgresql/Makefile \
		$(top_srcdir)/include/memlimits.h
	+$(AM_V_GEN)$(MKDIR_P) contrib/postgresql/build && \
	$(ML_PGXS) memlimits.so >contrib/postgresql/build/make.log 2>&1 || \
		{ cat contrib/postgresql/build/make.log; exit 1; }
install-data-local: contrib/postgresql/build/memlimits.so
	$(ML_PGXS) DESTDIR='$(DESTDIR)' install
uninstall-local:
	$(ML_PGXS) DESTDIR='$(DESTDIR)' uninstall
endif
# make distcheck, without root: the extension goes under its prefix.
AM_DISTCHECK_CONFIGURE_FLAGS = PG_PKGLIBDIR='$${libdir}/postgresql' \
	PG_SHAREDIR='$${datadir}/postgresql'
mostlyclean-local: mostlyclean-postgresql
mostlyclean-postgresql:
	rm -rf contrib/postgresql/build
.PHONY: mostlyclean-postgresql
