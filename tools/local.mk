# The memlimits command.  It compiles in the pure parts of the library it
# needs (bounds, parsers) instead of linking libmemlimits, so that it never
# interposes its own malloc nor obeys MEMLIMITS_* meant for the programs it
# runs (tools/memlimits.c).
bin_PROGRAMS += tools/memlimits
tools_memlimits_SOURCES = tools/memlimits.c tools/tool.h \
	tools/cmd-bounds.c \
	lib/bounds.c lib/parse.c lib/parse.h
tools_memlimits_LDADD = -lm
