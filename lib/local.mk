# The library, in layers from the bottom up (lib/layers.txt; the order
# and the rules are in docs/internals.md, "Layers").  Nothing in a layer
# names a higher one: tests/unit/test-layers.sh checks the includes, the
# objects' symbols and that no two files call each other in a loop.
lib_LTLIBRARIES = lib/libmemlimits.la
include_HEADERS = include/memlimits.h

# Layers 1-7, the core: it links and works without run mode
# (tests/test-core-alone).
noinst_LTLIBRARIES += lib/libmlcore.la
lib_libmlcore_la_SOURCES = \
	lib/util/util.h lib/util/parse.h \
	lib/util/parse.c lib/util/diag.c lib/util/pool.c \
	lib/util/forklock.c lib/util/system.c lib/util/self.c \
	lib/util/objects.c lib/util/memtotal.c lib/util/elf.c lib/util/elf.h \
	lib/util/prom.c lib/util/prom.h \
	lib/sampler/sampler.h \
	lib/sampler/sampler.c lib/sampler/bounds.c \
	lib/alloc/alloc.h lib/alloc/family.h \
	lib/alloc/underlying.c lib/alloc/meter.c lib/alloc/sampled.c \
	lib/alloc/ranges.c lib/alloc/mapped.c lib/alloc/upcalls.c \
	lib/core/core.h lib/core/unwinder.h \
	lib/core/settings.c lib/core/capture.c lib/core/frames.c \
	lib/core/stacks.c lib/core/names.c \
	lib/tasks/tasks.h lib/tasks/thread.h lib/tasks/held.h \
	lib/tasks/thread.c lib/tasks/token.c lib/tasks/held.c lib/tasks/account.c \
	lib/tasks/tracking.c lib/tasks/global.c \
	lib/tasks/task.c lib/tasks/entered.c lib/tasks/credit.c lib/tasks/slice.c \
	lib/tasks/deliver.c \
	lib/tasks/cleanup.c lib/tasks/exact.c lib/tasks/guard.c lib/tasks/metrics.c \
	lib/tasks/slow.c \
	lib/shared/shared.h lib/shared/slots.c lib/shared/table.c \
	lib/shared/wake.c lib/shared/choice.c lib/shared/hooks.c \
	lib/shared/shared.c \
	lib/api/api.h \
	lib/api/interpose.c lib/api/mmap.c lib/api/private.c lib/api/note.c \
	lib/api/enter.c lib/api/patch.c \
	lib/api/init.c lib/api/version.c lib/api/compat.c lib/api/metrics.c
lib_libmlcore_la_CPPFLAGS = $(AM_CPPFLAGS) -I$(srcdir)/lib -DMEMLIMITS_BUILDING
lib_libmlcore_la_CFLAGS = $(AM_CFLAGS) $(LIB_CFLAGS)

# Layer 8, run mode: a consumer of the core's hooks.
lib_libmemlimits_la_SOURCES = \
	lib/run/run.h \
	lib/run/settings.c lib/run/symbols.c lib/run/report.c lib/run/describe.c \
	lib/run/stats.c lib/run/counts.c lib/run/timeline.c lib/run/runmode.c
lib_libmemlimits_la_CPPFLAGS = $(lib_libmlcore_la_CPPFLAGS)
lib_libmemlimits_la_CFLAGS = $(AM_CFLAGS) $(LIB_CFLAGS)
lib_libmemlimits_la_LDFLAGS = -version-info $(ML_LT_VERSION) $(LIB_LDFLAGS) \
	$(SAN_LDFLAGS) -Wl,--version-script=$(srcdir)/lib/memlimits.map
lib_libmemlimits_la_LIBADD = lib/libmlcore.la $(LIBM)
EXTRA_DIST += lib/memlimits.map lib/layers.txt
EXTRA_lib_libmemlimits_la_DEPENDENCIES = lib/memlimits.map
