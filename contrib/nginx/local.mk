# The nginx module (issue 18, docs/nginx.md): built against nginx-dev's
# source tree (/usr/share/nginx/src on Debian) when configure finds it.
# nginx's ./configure writes into the tree it runs in, so the tree is
# copied into the build directory first: nothing is written into the
# source directory or /usr (make distcheck's read-only source included).
ML_NGX_FILES = contrib/nginx/ngx_http_memlimits.h \
	contrib/nginx/ngx_http_memlimits_module.c \
	contrib/nginx/ngx_http_memlimits_request.c \
	contrib/nginx/ngx_http_memlimits_stop.c \
	contrib/nginx/ngx_http_memlimits_shared.c \
	contrib/nginx/ngx_http_memlimits_metrics.c
EXTRA_DIST += contrib/nginx/config $(ML_NGX_FILES) \
	contrib/nginx/nginx.conf contrib/nginx/memlimits.conf \
	contrib/nginx/README.md
if BUILD_NGINX_MODULE
nginxmoddir = $(libdir)/nginx/modules
nginxmod_DATA = contrib/nginx/ngx_http_memlimits_module.so
CLEANFILES += contrib/nginx/ngx_http_memlimits_module.so

# Debian's conf_flags (a bash array) gives the flags its nginx was built
# with, so that the module's signature matches; elsewhere --with-compat.
contrib/nginx/ngx_http_memlimits_module.so: \
		$(ML_NGX_FILES:%=$(top_srcdir)/%) \
		$(top_srcdir)/contrib/nginx/config \
		$(top_srcdir)/include/memlimits.h $(top_srcdir)/lib/util/prom.c \
		$(top_srcdir)/lib/util/prom.h $(top_srcdir)/lib/util/parse.c \
		$(top_srcdir)/lib/util/parse.h lib/libmemlimits.la
	$(AM_V_GEN)rm -rf contrib/nginx/build && $(MKDIR_P) contrib/nginx/build && \
	cp -R '$(NGINX_SRC)/.' contrib/nginx/build/src && \
	chmod -R u+w contrib/nginx/build/src && \
	cd contrib/nginx/build/src && \
	ML_NGX_INCS='$(abs_top_srcdir)/include $(abs_top_srcdir)/lib' \
	ML_NGX_LIBS=-lm \
	ML_NGX_SRCS='$(abs_top_srcdir)/lib/util/prom.c $(abs_top_srcdir)/lib/util/parse.c' \
	bash -c 'flags=(--with-compat); \
		if [ -f conf_flags ]; then . ./conf_flags; flags=("$${NGX_CONF_FLAGS[@]}"); fi; \
		export ML_NGX_INCS ML_NGX_LIBS ML_NGX_SRCS; \
		./configure "$${flags[@]}" --with-cc-opt="-fPIC $(NGINX_CFLAGS)" \
			--with-ld-opt=-fPIC \
			--add-dynamic-module="$(abs_top_srcdir)/contrib/nginx" \
			--builddir=../objs' > ../configure.log 2>&1 || \
		{ cat ../configure.log; exit 1; } && \
	$(MAKE) -f ../objs/Makefile modules > ../make.log 2>&1 || \
		{ cat ../make.log; exit 1; } && \
	cd ../../../.. && cp contrib/nginx/build/objs/ngx_http_memlimits_module.so $@
endif
# nginx's build tree (fuzz/local.mk has clean-local).
mostlyclean-local:
	rm -rf contrib/nginx/build
