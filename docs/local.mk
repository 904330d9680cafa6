# docs: filled in by its issue
# How the library is put together, and why (README, "Documentation";
# tests/api/test-dist-docs.sh checks that every document named is shipped).
EXTRA_DIST += docs/internals.md docs/design.md docs/shared.md docs/mapped.md
# docs/statistics.md: the sampling model and the bounds (issue 4), its plots
# and the script that regenerates them from `memlimits bounds --format=tsv`.
EXTRA_DIST += docs/statistics.md docs/plots/make-plots.sh \
	docs/plots/interruption.png docs/plots/accuracy.png
# The README's pictures of a run (issue 29) and the script that makes them
# again with memlimits plot and memlimits flamegraph.
EXTRA_DIST += docs/plots/timeline.png docs/plots/flamegraph.png \
	docs/plots/held.png docs/plots/held-python.png docs/plots/build.png docs/plots/stops.png \
	scripts/make-plots.sh
# The man pages: the sources in docs/ say memlimits @PACKAGE_VERSION@ in
# their footer; configure writes each to docs/gen/ with the version (one
# version, configure.ac's), and those copies are what make install installs.
man_MANS =
# ml_bound_*(3): one page for the family, the other names link to it.
man_MANS += docs/gen/ml_bound_alloc.3 docs/gen/ml_bound_global.3 \
	docs/gen/ml_bound_safe_bytes.3 docs/gen/ml_bound_limit_for.3 \
	docs/gen/ml_bound_held.3 docs/gen/ml_bound_interval_for.3
# The nginx module (issue 18; the module is contrib/nginx).
EXTRA_DIST += docs/nginx.md docs/postgresql.md
# memlimits(1) and memlimits(3) (issue 5)
man_MANS += docs/gen/memlimits.1 docs/gen/memlimits.3
include docs/man3.mk
