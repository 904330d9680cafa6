# Fuzz targets (libFuzzer, clang): every parser of outside input.  Not
# built by `make`; `make check` replays their seeds without libFuzzer (at
# the end of this file); see docs/reliability.md.
#   make fuzz [FUZZ_SECONDS=60]   fuzz each target that long, new inputs
#                                 go to fuzz/work/TARGET in the build tree
#   make fuzz-replay              run every input of the seed corpus once
#                                 (fuzz/corpus/TARGET, in the tree; CI)
FUZZ_CC = clang
FUZZ_SECONDS = 60
FUZZ_SANITIZE = -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_CFLAGS = -g -O1 -std=gnu11 -Wall -Werror $(FUZZ_SANITIZE) \
	-I$(top_srcdir)/include -I$(top_builddir) -I$(top_srcdir)/lib
FUZZ_TARGETS = fuzz/fuzz-parse fuzz/fuzz-env fuzz/fuzz-cli fuzz/fuzz-stats \
	fuzz/fuzz-elf fuzz/fuzz-plot fuzz/fuzz-flamegraph fuzz/fuzz-ranges
FUZZ_DEPS = $(top_srcdir)/fuzz/local.mk config.h
CLEANFILES += $(FUZZ_TARGETS)

EXTRA_DIST += fuzz/fuzz-parse.c fuzz/fuzz-env.c fuzz/fuzz-cli.c \
	fuzz/fuzz-cli.h fuzz/cli-run.c fuzz/cli-bounds.c fuzz/fuzz-stats.c \
	fuzz/fuzz-elf.c fuzz/fuzz-plot.c fuzz/fuzz-flamegraph.c fuzz/fuzz-ranges.c \
	fuzz/replay.c fuzz/corpus

fuzz/fuzz-parse: $(top_srcdir)/fuzz/fuzz-parse.c $(top_srcdir)/lib/util/parse.c \
		$(top_srcdir)/lib/util/parse.h $(FUZZ_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ \
		$(top_srcdir)/fuzz/fuzz-parse.c $(top_srcdir)/lib/util/parse.c -lm
FUZZ_ENV_SRC = $(top_srcdir)/fuzz/fuzz-env.c $(top_srcdir)/lib/util/parse.c \
	$(top_srcdir)/lib/util/diag.c $(top_srcdir)/lib/util/system.c \
	$(top_srcdir)/lib/util/self.c $(top_srcdir)/lib/util/memtotal.c \
	$(top_srcdir)/lib/core/settings.c $(top_srcdir)/lib/run/settings.c
fuzz/fuzz-env: $(FUZZ_ENV_SRC) $(top_srcdir)/lib/run/run.h $(FUZZ_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/lib -o $@ \
		$(FUZZ_ENV_SRC) -ldl -lm
fuzz/fuzz-cli: $(top_srcdir)/fuzz/fuzz-cli.c $(top_srcdir)/fuzz/fuzz-cli.h \
		$(top_srcdir)/fuzz/cli-run.c $(top_srcdir)/fuzz/cli-bounds.c \
		$(top_srcdir)/tools/run-options.c $(top_srcdir)/tools/run.h \
		$(top_srcdir)/tools/run-library.c $(top_srcdir)/tools/cmd-bounds.c \
		$(top_srcdir)/lib/util/parse.c $(top_srcdir)/lib/util/self.c $(top_srcdir)/lib/sampler/bounds.c \
		$(top_srcdir)/lib/util/memtotal.c $(top_srcdir)/lib/util/diag.c $(FUZZ_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/tools \
		-DML_LIBDIR='"$(libdir)"' -DML_BINDIR='"$(bindir)"' -o $@ \
		$(top_srcdir)/fuzz/fuzz-cli.c $(top_srcdir)/fuzz/cli-run.c \
		$(top_srcdir)/fuzz/cli-bounds.c $(top_srcdir)/tools/run-library.c \
		$(top_srcdir)/lib/util/parse.c $(top_srcdir)/lib/util/self.c \
		$(top_srcdir)/lib/sampler/bounds.c $(top_srcdir)/lib/util/memtotal.c \
		$(top_srcdir)/lib/util/diag.c -lm
fuzz/fuzz-stats: $(top_srcdir)/fuzz/fuzz-stats.c $(top_srcdir)/fuzz/usage-jump.h \
		$(top_srcdir)/tools/cmd-stats.c $(top_srcdir)/lib/util/parse.c \
		$(top_srcdir)/lib/util/prom.c $(FUZZ_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/tools -o $@ \
		$(top_srcdir)/fuzz/fuzz-stats.c $(top_srcdir)/lib/util/parse.c \
		$(top_srcdir)/lib/util/prom.c -lm
FUZZ_ELF_SRC = $(top_srcdir)/fuzz/fuzz-elf.c $(top_srcdir)/tools/run-elf.c \
	$(top_srcdir)/tools/run-script.c $(top_srcdir)/lib/util/elf.c
fuzz/fuzz-elf: $(FUZZ_ELF_SRC) $(top_srcdir)/fuzz/usage-jump.h \
		$(top_srcdir)/tools/run.h $(top_srcdir)/lib/util/elf.h $(FUZZ_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/tools -o $@ \
		$(FUZZ_ELF_SRC)

# The picture commands (issue 33): each compiled in whole with the SVG
# writer.
FUZZ_SVG_DEPS = $(top_srcdir)/tools/svg.c $(top_srcdir)/tools/svg.h \
	$(top_srcdir)/tools/tool.h $(top_srcdir)/fuzz/usage-jump.h \
	$(top_srcdir)/fuzz/svg-target.h $(FUZZ_DEPS)
fuzz/fuzz-plot: $(top_srcdir)/fuzz/fuzz-plot.c $(top_srcdir)/tools/cmd-plot.c \
		$(top_srcdir)/lib/util/parse.c $(FUZZ_SVG_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/tools -o $@ \
		$(top_srcdir)/fuzz/fuzz-plot.c $(top_srcdir)/tools/svg.c \
		$(top_srcdir)/lib/util/parse.c -lm
fuzz/fuzz-flamegraph: $(top_srcdir)/fuzz/fuzz-flamegraph.c \
		$(top_srcdir)/tools/cmd-flamegraph.c $(FUZZ_SVG_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(top_srcdir)/tools -o $@ \
		$(top_srcdir)/fuzz/fuzz-flamegraph.c $(top_srcdir)/tools/svg.c -lm
FUZZ_RANGES_SRC = $(top_srcdir)/fuzz/fuzz-ranges.c $(top_srcdir)/lib/alloc/ranges.c
fuzz/fuzz-ranges: $(FUZZ_RANGES_SRC) $(top_srcdir)/lib/alloc/alloc.h $(FUZZ_DEPS)
	@$(MKDIR_P) fuzz
	$(AM_V_CC)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(FUZZ_RANGES_SRC)

fuzz-build: $(FUZZ_TARGETS)

# -close_fd_mask=3: the targets' own stdout/stderr (usage errors, --help)
# are closed; libFuzzer keeps its reports.
fuzz: fuzz-build
	@for t in $(FUZZ_TARGETS); do \
		name=$${t#fuzz/fuzz-}; \
		$(MKDIR_P) fuzz/work/$$name || exit 1; \
		echo "fuzzing $$name for $(FUZZ_SECONDS) s"; \
		./$$t -max_total_time=$(FUZZ_SECONDS) -close_fd_mask=3 \
			-max_len=4096 -print_final_stats=1 \
			fuzz/work/$$name $(top_srcdir)/fuzz/corpus/$$name \
			|| exit 1; \
	done

fuzz-replay: fuzz-build
	@fail=0; for t in $(FUZZ_TARGETS); do \
		name=$${t#fuzz/fuzz-}; \
		n=$$(ls $(top_srcdir)/fuzz/corpus/$$name | wc -l); \
		if ./$$t -runs=0 -close_fd_mask=3 \
			$(top_srcdir)/fuzz/corpus/$$name >fuzz/replay-$$name.log 2>&1; \
		then echo "PASS: fuzz $$name: $$n corpus inputs replayed"; \
		else echo "FAIL: fuzz $$name"; tail -n 30 fuzz/replay-$$name.log; \
			fail=1; fi; \
	done; exit $$fail

clean-local: clean-fuzz
clean-fuzz:
	-rm -rf fuzz/work fuzz/replay-*.log

.PHONY: fuzz fuzz-build fuzz-replay clean-fuzz

# The same targets without libFuzzer or clang, in every `make check`:
# fuzz/replay.c passes each seed once to the target (tests/
# test-fuzz-replay.sh), so a target that no longer links (a stub missing
# after a library change) or a seed that now fails a target's checks is
# seen by the test suite, not only by CI's fuzz stage.
FUZZ_REPLAY_CPPFLAGS = $(AM_CPPFLAGS) -I$(top_srcdir)/lib \
	-I$(top_srcdir)/tools -DML_LIBDIR='"$(libdir)"' \
	-DML_BINDIR='"$(bindir)"'
check_PROGRAMS += fuzz/replay-parse fuzz/replay-env fuzz/replay-cli \
	fuzz/replay-stats fuzz/replay-elf fuzz/replay-plot \
	fuzz/replay-flamegraph fuzz/replay-ranges
TESTS += tests/unit/test-fuzz-replay.sh
EXTRA_DIST += tests/unit/test-fuzz-replay.sh
fuzz_replay_parse_SOURCES = fuzz/replay.c fuzz/fuzz-parse.c lib/util/parse.c
fuzz_replay_parse_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
fuzz_replay_parse_LDADD = -lm
fuzz_replay_env_SOURCES = fuzz/replay.c fuzz/fuzz-env.c lib/util/parse.c \
	lib/util/diag.c lib/util/system.c lib/util/self.c lib/util/memtotal.c \
	lib/core/settings.c lib/run/settings.c
fuzz_replay_env_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
fuzz_replay_env_LDADD = -ldl -lm
fuzz_replay_cli_SOURCES = fuzz/replay.c fuzz/fuzz-cli.c fuzz/cli-run.c \
	fuzz/cli-bounds.c tools/run-library.c lib/util/parse.c lib/util/self.c lib/sampler/bounds.c \
	lib/util/memtotal.c lib/util/diag.c
fuzz_replay_cli_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
fuzz_replay_cli_LDADD = -lm
fuzz_replay_stats_SOURCES = fuzz/replay.c fuzz/fuzz-stats.c fuzz/usage-jump.h \
	lib/util/parse.c lib/util/prom.c
fuzz_replay_stats_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
fuzz_replay_stats_LDADD = -lm
fuzz_replay_elf_SOURCES = fuzz/replay.c fuzz/fuzz-elf.c fuzz/usage-jump.h \
	tools/run-elf.c tools/run-script.c lib/util/elf.c
fuzz_replay_elf_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
fuzz_replay_plot_SOURCES = fuzz/replay.c fuzz/fuzz-plot.c fuzz/usage-jump.h \
	fuzz/svg-target.h tools/svg.c lib/util/parse.c
fuzz_replay_plot_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
fuzz_replay_plot_LDADD = -lm
fuzz_replay_flamegraph_SOURCES = fuzz/replay.c fuzz/fuzz-flamegraph.c \
	fuzz/usage-jump.h fuzz/svg-target.h tools/svg.c
fuzz_replay_flamegraph_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
fuzz_replay_flamegraph_LDADD = -lm
fuzz_replay_ranges_SOURCES = fuzz/replay.c fuzz/fuzz-ranges.c lib/alloc/ranges.c
fuzz_replay_ranges_CPPFLAGS = $(FUZZ_REPLAY_CPPFLAGS)
