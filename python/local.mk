# The Python module (issue 37, docs/python.md): python/memlimits_build.py
# (the package's PEP 517 backend, standard library only: issue 43) builds
# it in python/build/pkg of the build tree (nothing is written into the
# source directory), against this tree's header and library
# (MEMLIMITS_CFLAGS/MEMLIMITS_LIBS, which it takes over pkg-config), with
# a RUNPATH to this tree's library: PYTHONPATH=python/build/pkg and
# nothing else imports it.  make install builds it again with a RUNPATH
# to $(libdir) (as libtool relinks at install) and copies the package
# into PYTHON_SITEDIR: no ldconfig needed.  make check runs its pytest
# suite (tests/python/test-python.sh, as TAP).
ML_PY_FILES = python/memlimits_build.py python/pyproject.toml python/src/_memlimits.c \
	python/src/hooks.c python/src/pymalloc.c python/src/guard.c \
	python/src/task.c python/src/stepper.c python/src/oldpools.c \
	python/src/rehook.c python/src/frames.c python/src/arenas.c python/src/module.h \
	python/memlimits/__init__.py python/memlimits/wsgi.py \
	python/memlimits/asgi.py python/memlimits/celery.py \
	python/memlimits/__init__.pyi python/memlimits/celery.pyi \
	python/memlimits/_memlimits.pyi python/memlimits/wsgi.pyi \
	python/memlimits/asgi.pyi python/memlimits/py.typed \
	python/memlimits/ipython.py python/memlimits/ipython.pyi \
	python/bench-python.py python/README.md
ML_PY_TESTS = python/tests/conftest.py python/tests/test_limit.py \
	python/tests/test_bombs.py python/tests/test_wsgi.py \
	python/tests/test_asgi.py python/tests/test_servers.py \
	python/tests/servers_app.py python/tests/test_structure.py \
	python/tests/test_versions.py python/tests/test_input.py \
	python/tests/test_stops.py python/tests/test_threads.py \
	python/tests/test_deploy.py python/tests/deploy_app.py \
	python/tests/test_celery.py python/tests/celery_app.py \
	python/tests/test_django.py python/tests/django_app/__init__.py \
	python/tests/django_app/settings.py python/tests/django_app/urls.py \
	python/tests/django_app/views.py python/tests/django_app/wsgi.py \
	python/tests/django_app/asgi.py python/tests/test_ipython.py \
	python/tests/test_extensions.py python/tests/test_counting.py \
	python/tests/test_frames.py
EXTRA_DIST += $(ML_PY_FILES) $(ML_PY_TESTS) docs/python.md
TESTS += tests/python/test-python.sh tests/python/test-python-versions.sh \
	tests/python/test-python-install.sh
EXTRA_DIST += tests/python/test-python.sh tests/python/test-python-versions.sh \
	tests/python/test-python-install.sh
AM_TESTS_ENVIRONMENT += ML_PYTHON='$(ML_PYTHON)'; export ML_PYTHON;
ML_PY_BUILD = MEMLIMITS_CFLAGS='-I$(abs_top_srcdir)/include' \
	MEMLIMITS_LIBS='-L$(abs_top_builddir)/lib/.libs -lmemlimits' \
	MEMLIMITS_VERSION='$(PACKAGE_VERSION)' \
	MEMLIMITS_SRCDIR='$(abs_top_srcdir)'
if BUILD_PYTHON
all-local: python/build/pkg/.built
python/build/pkg/.built: $(ML_PY_FILES:%=$(top_srcdir)/%) \
		$(top_srcdir)/lib/util/parse.c $(top_srcdir)/lib/util/parse.h \
		$(top_srcdir)/include/memlimits.h lib/libmemlimits.la
	$(AM_V_GEN)rm -rf python/build/pkg && $(MKDIR_P) python/build/pkg && \
	cp -R $(top_srcdir)/python/memlimits python/build/pkg/ && \
	chmod -R u+w python/build/pkg && \
	$(ML_PY_BUILD) MEMLIMITS_RUNPATH='$(abs_top_builddir)/lib/.libs' \
	 $(ML_PYTHON) $(top_srcdir)/python/memlimits_build.py -q \
		--inplace python/build/pkg >python/build/make.log 2>&1 || \
		{ cat python/build/make.log; exit 1; }
	@touch $@
install-exec-local: python/build/pkg/.built
	rm -rf python/build/inst && $(MKDIR_P) python/build/inst && \
	cp -R python/build/pkg/memlimits python/build/inst/ && \
	$(ML_PY_BUILD) MEMLIMITS_RUNPATH='$(libdir)' \
	 $(ML_PYTHON) $(top_srcdir)/python/memlimits_build.py -q \
		--inplace python/build/inst >python/build/install.log 2>&1 || \
		{ cat python/build/install.log; exit 1; }
	$(MKDIR_P) '$(DESTDIR)$(PYTHON_SITEDIR)/memlimits'
	cp python/build/inst/memlimits/*.py python/build/inst/memlimits/*.pyi \
		python/build/inst/memlimits/py.typed \
		python/build/inst/memlimits/_memlimits*.so \
		'$(DESTDIR)$(PYTHON_SITEDIR)/memlimits/'
uninstall-hook:
	rm -rf '$(DESTDIR)$(PYTHON_SITEDIR)/memlimits'
# make distcheck runs it after make install: the installed module imports
# with no ldconfig and no LD_LIBRARY_PATH, and pip builds the package
# against the installed library (tests/python/test-python-install.sh).
installcheck-local:
	top_srcdir='$(abs_top_srcdir)' ML_PYTHON='$(ML_PYTHON)' \
	PACKAGE_VERSION='$(PACKAGE_VERSION)' \
	ML_PY_SITEDIR='$(DESTDIR)$(PYTHON_SITEDIR)' ML_LIBDIR='$(libdir)' \
	$(SHELL) $(top_srcdir)/tests/python/test-python-install.sh >python/build/installcheck.log 2>&1; \
	cat python/build/installcheck.log; ! grep -q '^not ok' python/build/installcheck.log
# What the module costs: json, a regex loop, dict and list churn and
# test_json + test_re, plain / imported / in a limit block, as callgrind
# instruction ratios (python/bench-python.py; docs/python.md, "Numbers").
# Then the middlewares' cost per request of a small JSON endpoint
# (BENCH_PYTHON_REQUESTS requests, Flask under WSGI, Starlette under ASGI).
# Its own target, not part of make bench: minutes under callgrind.
BENCH_PYTHON_REQUESTS = 300
bench-python: python/build/pkg/.built
	PYTHONPATH='$(abs_top_builddir)/python/build/pkg' \
	LD_LIBRARY_PATH='$(abs_top_builddir)/lib/.libs' \
	VALGRIND='$(VALGRIND)' $(ML_PYTHON) \
		$(top_srcdir)/python/bench-python.py $(BENCH_PYTHON)
	PYTHONPATH='$(abs_top_builddir)/python/build/pkg' \
	LD_LIBRARY_PATH='$(abs_top_builddir)/lib/.libs' \
	VALGRIND='$(VALGRIND)' $(ML_PYTHON) \
		$(top_srcdir)/python/bench-python.py --requests \
		$(BENCH_PYTHON_REQUESTS)
else
bench-python:
	@echo "bench-python: configured without the Python module"
endif
.PHONY: bench-python
mostlyclean-local: mostlyclean-python
mostlyclean-python:
	rm -rf python/build
.PHONY: mostlyclean-python
