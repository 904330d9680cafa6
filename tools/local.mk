# The memlimits command.  It compiles in the pure parts of the library it
# needs (bounds, parsers) instead of linking libmemlimits, so that it never
# interposes its own malloc nor obeys MEMLIMITS_* meant for the programs it
# runs (tools/memlimits.c).
bin_PROGRAMS += tools/memlimits
tools_memlimits_SOURCES = tools/memlimits.c tools/tool.h \
	tools/cmd-bounds.c \
	lib/sampler/bounds.c lib/util/parse.c lib/util/parse.h lib/util/self.c \
	lib/util/memtotal.c lib/util/diag.c
tools_memlimits_LDADD = -lm

# memlimits run / stats (issue 5).  run finds the library to preload from
# the installed paths (bindir -> libdir) or, uninstalled, from the build
# tree next to the command (tools/cmd-run.c, find_library).
tools_memlimits_SOURCES += tools/cmd-run.c tools/cmd-stats.c
tools_memlimits_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/lib -DML_LIBDIR='"$(libdir)"' \
	-DML_BINDIR='"$(bindir)"'
