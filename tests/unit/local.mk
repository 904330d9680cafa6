# Unit tests: the library's internal pieces one at a time (the sampler's
# draws, the heap meter, faults injected into libc and the pools, the
# settings' parsers).  test-fuzz-replay.sh is listed in fuzz/local.mk.
check_PROGRAMS += tests/unit/test-sampler tests/unit/test-meter
TESTS += tests/unit/test-sampler tests/unit/test-meter
tests_unit_test_sampler_SOURCES = tests/unit/test-sampler.c tests/unit/stats.h \
	lib/sampler/sampler.c
tests_unit_test_sampler_LDADD = $(ML_TEST_LIBS)
tests_unit_test_sampler_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_sampler_CFLAGS = $(ML_TEST_CFLAGS)
tests_unit_test_meter_SOURCES = tests/unit/test-meter.c
tests_unit_test_meter_LDADD = $(ML_TEST_LIBS)
tests_unit_test_meter_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_meter_CFLAGS = $(ML_TEST_CFLAGS)

# Faults around the library (issue 6): libc and the pools failing, malformed
# settings.  See docs/reliability.md.
check_PROGRAMS += tests/unit/test-faults
TESTS += tests/unit/test-faults
tests_unit_test_faults_SOURCES = tests/unit/test-faults.c
tests_unit_test_faults_LDADD = $(ML_TEST_LIBS)
tests_unit_test_faults_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_faults_CFLAGS = $(ML_TEST_CFLAGS) -fno-builtin

# The layers go one way (docs/internals.md, "Layers").
TESTS += tests/unit/test-layers.sh
EXTRA_DIST += tests/unit/test-layers.sh

# docs/internals.md names only files and ml__ names that exist (issue 25):
# a file split or a name changed tells what the document must now say.
TESTS += tests/unit/test-internals.sh
EXTRA_DIST += tests/unit/test-internals.sh

# The memory a process may use (cgroup v2 memory.max, else physical memory)
# over fake cgroup trees, and the percentage parser of --heap-limit P%
# (issue 14).  The util files are compiled in: no interposer.
check_PROGRAMS += tests/unit/test-memtotal
TESTS += tests/unit/test-memtotal
tests_unit_test_memtotal_SOURCES = tests/unit/test-memtotal.c \
	lib/util/memtotal.c lib/util/parse.c lib/util/diag.c
tests_unit_test_memtotal_LDADD = tests/tap/libtap.la -lm
tests_unit_test_memtotal_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_memtotal_CFLAGS = $(ML_TEST_CFLAGS)

# The Prometheus text format's one writer (issue 33): lines, labels and
# escapes byte for byte.  The util files are compiled in.
check_PROGRAMS += tests/unit/test-prom
TESTS += tests/unit/test-prom
tests_unit_test_prom_SOURCES = tests/unit/test-prom.c lib/util/prom.c \
	lib/util/parse.c
tests_unit_test_prom_LDADD = tests/tap/libtap.la -lm
tests_unit_test_prom_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_prom_CFLAGS = $(ML_TEST_CFLAGS)

# The symbolizer's sorted .dynsym/.symtab lookup against the scan it
# replaced (issues 17, 25): lib/run/symbols.c is compiled into the test (its lookups are
# static), with the util pieces it calls.
check_PROGRAMS += tests/unit/test-symtab
TESTS += tests/unit/test-symtab
tests_unit_test_symtab_SOURCES = tests/unit/test-symtab.c \
	lib/util/pool.c lib/util/forklock.c lib/util/diag.c lib/util/self.c \
	lib/util/parse.c lib/util/elf.c lib/util/objects.c \
	lib/core/names.c
tests_unit_test_symtab_LDADD = tests/tap/libtap.la -ldl -lm
tests_unit_test_symtab_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_symtab_CFLAGS = $(ML_TEST_CFLAGS)

# When held tracking runs, and free's return to the allocator's own
# function once nothing needs it and nothing is recorded (issue 26).
# Linked with the core's convenience library: the test reads the
# library's internal state (ml__held_tracking_test).
check_PROGRAMS += tests/unit/test-held-switch
TESTS += tests/unit/test-held-switch
tests_unit_test_held_switch_SOURCES = tests/unit/test-held-switch.c
tests_unit_test_held_switch_CFLAGS = $(ML_TEST_CFLAGS) -pthread
tests_unit_test_held_switch_LDADD = tests/tap/libtap.la lib/libmlcore.la $(LIBM)
tests_unit_test_held_switch_LDFLAGS = $(ML_TEST_LINK) -pthread \
	-Wl,--version-script=$(srcdir)/lib/memlimits.map

# The table of interned stacks: ids in arrival order up to the last, then
# 0 (issue 43: the 4096-slot table turned stacks away at about 3100).
check_PROGRAMS += tests/unit/test-stacks-table
TESTS += tests/unit/test-stacks-table
tests_unit_test_stacks_table_SOURCES = tests/unit/test-stacks-table.c
tests_unit_test_stacks_table_CFLAGS = $(ML_TEST_CFLAGS) -pthread
tests_unit_test_stacks_table_LDADD = tests/tap/libtap.la lib/libmlcore.la $(LIBM)
tests_unit_test_stacks_table_LDFLAGS = $(ML_TEST_LINK) -pthread \
	-Wl,--version-script=$(srcdir)/lib/memlimits.map

# The pictures' SVG writer (issue 33): numbers of every size, write errors
# with their errno and no file left, the line reader's bounds.
# tools/svg.c is compiled in; the test has its own ml__tool_usage_error.
check_PROGRAMS += tests/unit/test-svg
TESTS += tests/unit/test-svg
tests_unit_test_svg_SOURCES = tests/unit/test-svg.c tools/svg.c tools/svg.h
tests_unit_test_svg_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/tools
tests_unit_test_svg_LDADD = tests/tap/libtap.la -lm
tests_unit_test_svg_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_svg_CFLAGS = $(ML_TEST_CFLAGS)

# The range table of counted mappings (issue 34): a mapping made and
# unmapped below all others (the kernel's top-down placement) or above
# them moves no record.  lib/alloc/ranges.c is compiled in.
check_PROGRAMS += tests/unit/test-ranges
TESTS += tests/unit/test-ranges
tests_unit_test_ranges_SOURCES = tests/unit/test-ranges.c lib/alloc/ranges.c
tests_unit_test_ranges_LDADD = tests/tap/libtap.la -lm
tests_unit_test_ranges_LDFLAGS = $(ML_TEST_LINK)
tests_unit_test_ranges_CFLAGS = $(ML_TEST_CFLAGS)

# The signal handlers' queue of mapping updates folds what changes
# nothing (issue 41, item 2; CI stage d).  Linked with the core's
# convenience library: the test calls the library's internal functions.
check_PROGRAMS += tests/unit/test-mapped-queue
TESTS += tests/unit/test-mapped-queue
tests_unit_test_mapped_queue_SOURCES = tests/unit/test-mapped-queue.c
tests_unit_test_mapped_queue_CFLAGS = $(ML_TEST_CFLAGS)
tests_unit_test_mapped_queue_LDADD = tests/tap/libtap.la lib/libmlcore.la $(LIBM)
tests_unit_test_mapped_queue_LDFLAGS = $(ML_TEST_LINK) \
	-Wl,--version-script=$(srcdir)/lib/memlimits.map
