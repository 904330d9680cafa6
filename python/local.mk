# The Python module (issue 37, docs/python.md): setuptools builds it in a
# copy of python/ in the build tree (python/build/pkg: nothing is written
# into the source directory), against this tree's header and library
# (MEMLIMITS_CFLAGS/MEMLIMITS_LIBS, which setup.py takes over pkg-config).
# make install copies the package into PYTHON_SITEDIR; make check runs its
# pytest suite (tests/python/test-python.sh, as TAP).
ML_PY_FILES = python/setup.py python/pyproject.toml python/src/_memlimits.c \
	python/src/hooks.c python/src/pymalloc.c python/src/guard.c \
	python/src/task.c python/src/oldpools.c python/src/module.h \
	python/memlimits/__init__.py python/memlimits/wsgi.py \
	python/memlimits/asgi.py python/memlimits/__init__.pyi \
	python/memlimits/_memlimits.pyi python/memlimits/wsgi.pyi \
	python/memlimits/asgi.pyi python/memlimits/py.typed \
	python/bench-python.py python/README.md
ML_PY_TESTS = python/tests/conftest.py python/tests/test_limit.py \
	python/tests/test_bombs.py python/tests/test_wsgi.py \
	python/tests/test_asgi.py python/tests/test_servers.py \
	python/tests/servers_app.py python/tests/test_structure.py \
	python/tests/test_versions.py python/tests/test_input.py \
	python/tests/test_stops.py python/tests/test_threads.py
EXTRA_DIST += $(ML_PY_FILES) $(ML_PY_TESTS) docs/python.md
TESTS += tests/python/test-python.sh tests/python/test-python-versions.sh
EXTRA_DIST += tests/python/test-python.sh tests/python/test-python-versions.sh
AM_TESTS_ENVIRONMENT += ML_PYTHON='$(ML_PYTHON)'; export ML_PYTHON;
if BUILD_PYTHON
all-local: python/build/pkg/.built
python/build/pkg/.built: $(ML_PY_FILES:%=$(top_srcdir)/%) \
		$(top_srcdir)/lib/util/parse.c $(top_srcdir)/lib/util/parse.h \
		$(top_srcdir)/include/memlimits.h lib/libmemlimits.la
	$(AM_V_GEN)rm -rf python/build/pkg && $(MKDIR_P) python/build/pkg && \
	cp -R $(top_srcdir)/python/setup.py $(top_srcdir)/python/pyproject.toml \
		$(top_srcdir)/python/src $(top_srcdir)/python/memlimits \
		python/build/pkg/ && chmod -R u+w python/build/pkg && \
	(cd python/build/pkg && \
	 MEMLIMITS_CFLAGS='-I$(abs_top_srcdir)/include' \
	 MEMLIMITS_LIBS='-L$(abs_top_builddir)/lib/.libs -lmemlimits' \
	 MEMLIMITS_VERSION='$(PACKAGE_VERSION)' \
	 MEMLIMITS_SRCDIR='$(abs_top_srcdir)' \
	 $(ML_PYTHON) setup.py -q build_ext --inplace --build-temp ../tmp) \
		>python/build/make.log 2>&1 || \
		{ cat python/build/make.log; exit 1; }
	@touch $@
install-exec-local: python/build/pkg/.built
	$(MKDIR_P) '$(DESTDIR)$(PYTHON_SITEDIR)/memlimits'
	cp python/build/pkg/memlimits/*.py python/build/pkg/memlimits/*.pyi \
		python/build/pkg/memlimits/py.typed \
		python/build/pkg/memlimits/_memlimits*.so \
		'$(DESTDIR)$(PYTHON_SITEDIR)/memlimits/'
uninstall-hook:
	rm -rf '$(DESTDIR)$(PYTHON_SITEDIR)/memlimits'
# What the module costs: json, a regex loop, dict and list churn and
# test_json + test_re, plain / imported / in a limit block, as callgrind
# instruction ratios (python/bench-python.py; docs/python.md, "Numbers").
# Its own target, not part of make bench: minutes under callgrind.
bench-python: python/build/pkg/.built
	PYTHONPATH='$(abs_top_builddir)/python/build/pkg' \
	LD_LIBRARY_PATH='$(abs_top_builddir)/lib/.libs' \
	VALGRIND='$(VALGRIND)' $(ML_PYTHON) \
		$(top_srcdir)/python/bench-python.py $(BENCH_PYTHON)
else
bench-python:
	@echo "bench-python: configured without the Python module"
endif
.PHONY: bench-python
mostlyclean-local: mostlyclean-python
mostlyclean-python:
	rm -rf python/build
.PHONY: mostlyclean-python
