# The memlimits command.  It compiles in the pure parts of the library it
# needs (bounds, parsers) instead of linking libmemlimits, so that it never
# interposes its own malloc nor obeys MEMLIMITS_* meant for the programs it
# runs (tools/memlimits.c).
bin_PROGRAMS += tools/memlimits
tools_memlimits_SOURCES = tools/memlimits.c tools/tool.h \
	tools/cmd-bounds.c \
	lib/sampler/bounds.c lib/util/parse.c lib/util/parse.h lib/util/self.c \
	lib/util/memtotal.c lib/util/diag.c lib/util/elf.c lib/util/elf.h \
	lib/util/prom.c lib/util/prom.h
tools_memlimits_LDADD = -lm

# memlimits run / stats (issue 5).  run finds the library to preload from
# the installed paths (bindir -> libdir) or, uninstalled, from the build
# tree next to the command (tools/run-library.c); its files by concern are
# listed in tools/run.h.
tools_memlimits_SOURCES += tools/cmd-run.c tools/run.h tools/run-options.c \
	tools/run-path.c tools/run-elf.c tools/run-script.c \
	tools/run-library.c tools/run-env.c tools/run-tree.c \
	tools/cmd-stats.c
tools_memlimits_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/lib -DML_LIBDIR='"$(libdir)"' \
	-DML_BINDIR='"$(bindir)"'

# memlimits plot / flamegraph (issue 29): pictures of a run, as standalone
# SVG drawn by the command's own writer (tools/svg.c).
tools_memlimits_SOURCES += tools/svg.c tools/svg.h tools/cmd-plot.c \
	tools/cmd-flamegraph.c

# memlimits accuracy (issue 45): runs a program under one limit many times
# (or reads stop points, --from) and tests the stops against the bounds;
# its files are listed in tools/accuracy.h.
tools_memlimits_SOURCES += tools/cmd-accuracy.c tools/accuracy.h \
	tools/accuracy-run.c tools/accuracy-stat.c tools/accuracy-print.c \
	tools/accuracy-plot.c
