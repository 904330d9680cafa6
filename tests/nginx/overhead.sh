#!/bin/sh
# The module's overhead (docs/nginx.md): nginx alone against nginx with
# libmemlimits preloaded and the module on (memlimits on; request limits
# as contrib/nginx/nginx.conf), one worker, ab on loopback at the same
# concurrency; a static 4 KiB file and a 100x100 thumbnail of a 200x200
# PNG.  Runs are interleaved (alone, module, alone, ...), ROUNDS of each;
# prints the median requests per second and the median worker CPU time
# per request (the worker's schedstat CPU time over the run).
# Not run by make check: build first, then
#   top_builddir=build top_srcdir=. sh tests/nginx/overhead.sh [ROUNDS] [N] [C]
# (PATHS="/f4k.bin" for the static file alone).
: "${top_builddir:?}" "${top_srcdir:?}"
ROUNDS=${1:-5} N=${2:-20000} C=${3:-16}
NGINX_BIN=${NGINX_BIN:-/usr/sbin/nginx}
MOD=$top_builddir/contrib/nginx/ngx_http_memlimits_module.so
IMG=/usr/lib/nginx/modules/ngx_http_image_filter_module.so
LIB=$top_builddir/lib/.libs/libmemlimits.so
PY=${PYTHON3:-python3}
unset NGINX LD_PRELOAD
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-nginx-bench.XXXXXX") || exit 1
master=
trap '[ -z "$master" ] || kill "$master"; rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/html" "$tmp/logs"
head -c 4096 /dev/urandom >"$tmp/html/f4k.bin"
"$PY" "$top_srcdir/tests/nginx/nginx-client.py" png small "$tmp/html/small.png"
port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
conf() { # conf on|off
	{
		echo "load_module $IMG;"
		[ "$1" = off ] || echo "load_module $MOD;"
		[ "$(id -u)" != 0 ] || echo "user root;"
		echo "daemon off; worker_processes 1; pid $tmp/logs/nginx.pid;"
		echo "error_log $tmp/logs/error.log; events { worker_connections 1024; }"
		echo "http { access_log off;"
		[ "$1" = off ] || echo "memlimits on; memlimits_request_limit 256m; memlimits_request_held 64m;"
		echo "server { listen 127.0.0.1:$port; root $tmp/html;"
		echo "location /thumb/ { alias $tmp/html/; image_filter resize 100 100; }"
		echo "location / { } } }"
	} >"$tmp/nginx-$1.conf"
}
conf off
conf on
# The worker's CPU time in ns (schedstat: exact, where /proc/PID/stat
# counts 10 ms ticks).
cpu_ns() { cut -d' ' -f1 "/proc/$1/schedstat"; }
run() { # run on|off PATH N -> "rps cpu_us_per_request"
	if [ "$1" = on ]; then
		LD_PRELOAD=$LIB "$NGINX_BIN" -p "$tmp" -c "$tmp/nginx-on.conf" -e "$tmp/logs/error.log" &
	else
		"$NGINX_BIN" -p "$tmp" -c "$tmp/nginx-off.conf" -e "$tmp/logs/error.log" &
	fi
	master=$!
	# Its worker, once there (a wait on it, 10 s at most).
	w=
	for _ in $(seq 100); do
		w=$(pgrep -P "$master" | head -1)
		[ -n "$w" ] && "$PY" -c "import socket; socket.create_connection(('127.0.0.1', $port), 1)" 2>/dev/null && break
		sleep 0.1 # not ordering: the poll of a bounded wait
	done
	ab -q -k -n 2000 -c "$C" "http://127.0.0.1:$port$2" >/dev/null 2>&1 # warm up
	t0=$(cpu_ns "$w")
	rps=$(ab -q -k -n "$3" -c "$C" "http://127.0.0.1:$port$2" 2>/dev/null |
		sed -n 's/^Requests per second: *\([0-9.]*\).*/\1/p')
	t1=$(cpu_ns "$w")
	kill "$master"
	wait "$master" 2>/dev/null
	master=
	echo "$rps $(awk -v d=$((t1 - t0)) -v n="$3" 'BEGIN { printf "%.2f", d / n / 1000 }')"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# Thumbnails cost some 20 times a static file: a quarter of the requests.
for path in ${PATHS:-/f4k.bin /thumb/small.png}; do
	: >"$tmp/off" && : >"$tmp/on"
	n=$N
	[ "$path" = /f4k.bin ] || n=$((N / 4))
	for _ in $(seq "$ROUNDS"); do
		run off "$path" "$n" >>"$tmp/off"
		run on "$path" "$n" >>"$tmp/on"
	done
	for m in off on; do
		rps=$(cut -d' ' -f1 "$tmp/$m" | median)
		cpu=$(cut -d' ' -f2 "$tmp/$m" | median)
		echo "$path module=$m rps=$rps cpu_us_per_request=$cpu runs: $(tr '\n' ';' <"$tmp/$m")"
	done
done
