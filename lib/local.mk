lib_LTLIBRARIES = lib/libmemlimits.la
include_HEADERS = include/memlimits.h

lib_libmemlimits_la_SOURCES = \
	lib/internal.h \
	lib/interpose.c \
	lib/sampler.c lib/sampler.h \
	lib/thread.c \
	lib/meter.c \
	lib/task.c \
	lib/token.c \
	lib/pool.c \
	lib/forklock.c \
	lib/config.c \
	lib/parse.c lib/parse.h \
	lib/unwind.c \
	lib/runmode.c \
	lib/report.c \
	lib/stats.c \
	lib/diag.c \
	lib/version.c \
	lib/bounds.c
lib_libmemlimits_la_CPPFLAGS = $(AM_CPPFLAGS) -DMEMLIMITS_BUILDING
lib_libmemlimits_la_CFLAGS = $(AM_CFLAGS) $(LIB_CFLAGS)
lib_libmemlimits_la_LDFLAGS = -version-info $(ML_LT_VERSION) $(LIB_LDFLAGS) \
	$(SAN_LDFLAGS) -export-symbols $(srcdir)/lib/exported-symbols.txt
lib_libmemlimits_la_LIBADD = $(LIBM)
EXTRA_DIST += lib/exported-symbols.txt
EXTRA_lib_libmemlimits_la_DEPENDENCIES = lib/exported-symbols.txt
