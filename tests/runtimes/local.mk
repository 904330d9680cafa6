# Issues 34's and 41's eighteen real programs (python3, node, the JVM, cc1,
# ruby, perl, sqlite3, git, sort, ImageMagick; PHP, Lua, a Rust program, R,
# git pack-objects, make -j2, a multiprocessing.Pool) plain, under
# memlimits run --heap-limit
# at half and 1.5 x their peak RSS, under prlimit --data and a cgroup of
# the same limit: a TAP stream, the table in runtimes-results/.  A few
# minutes of 2 cores and about 1.3 GB at a time, so outside make check: CI
# runs it in stage o (.ci/run, docs/reliability.md, docs/mapped.md).
EXTRA_DIST += tests/runtimes/compare.sh
check-runtimes: tools/memlimits$(EXEEXT) lib/libmemlimits.la
	MEMLIMITS='$(abs_top_builddir)/tools/memlimits' top_srcdir='$(abs_top_srcdir)' \
		bash $(srcdir)/tests/runtimes/compare.sh runtimes-results | \
		tee runtimes.tap; ! grep -q '^not ok' runtimes.tap
CLEANFILES += runtimes.tap
clean-local: clean-runtimes
clean-runtimes:
	rm -rf runtimes-results
.PHONY: check-runtimes clean-runtimes
