#!/bin/sh
# nginx with the memlimits module (issue 18), on loopback, running
# contrib/nginx/nginx.conf with its paths and ports rewritten; one worker.
#  - start-up: without libmemlimits as the allocator, nginx -t and -T
#    succeed with one warning (issue 33: they were refused) and a server
#    start fails with one line naming the fix; with it, the configuration
#    is accepted;
#  - a PNG bomb (420 KB declaring 12000x12000 pixels: 576 MiB to decode)
#    through image_filter, 10 times, while 200 clients fetch thumbnails
#    and a static file: every bomb is answered 503 (or closed; the slowest
#    answer's time is printed, never judged: make check runs under load),
#    every ordinary request gets 200 and the right body, the error log
#    names each stopped request, the worker's peak resident size stays
#    within its baseline + 2 bombs at once x (64 MiB held limit + 16 MiB)
#    + 64 MiB, and the worker never restarts;
#  - SSI with proxied includes (issue 44, item 4): a page of 8
#    <!--# include virtual --> to a local upstream, each 48 MiB buffered
#    in memory (proxy_buffers 64 8m) while the include before it is
#    sent: the subrequests that are not the connection's active request
#    run their upstream events as slices of the page's task, so the page
#    is stopped (503, or closed once its header went out) with the
#    worker's peak within its baseline + 2 x the 64 MiB held limit, the
#    access log says held_limit, and requests after it get 200 from the
#    same worker (before: 336 MiB buffered, "ok");
#  - a PUT of 512 MiB to a location that buffers the body in memory
#    (client_body_buffer_size 1024m) is answered 503 after 1 MiB of its
#    body (the client waits 5 s for an answer, then reads 0); a 1 MiB one
#    reaches the backend;
#  - memlimits_pressure 0.5 of 256 MiB: while a slow PUT holds 150 MiB a
#    new request is refused with 503 and one error-log line; once it
#    ended, requests are served again; memlimits_metrics' refusal count
#    is the error log's;
#  - behind the other filters that may rewrite or hold back a response
#    (image_filter, gzip, sub_filter, ssi, addition: the locations of
#    $tmp/filters.conf), a request refused at memlimits_pressure and one
#    stopped by its own limits are answered exactly memlimits_status with
#    the module's empty body and no Content-Encoding (issue 24:
#    image_filter turned refusals into 415); once the pressure is gone the
#    same requests show each filter at work there; a PNG bomb without
#    limits of its own is stopped by memlimits_global behind image_filter
#    and answered the same;
#  - memlimits_global (256 MiB here): a slow PUT holding 150 MiB is
#    stopped when a second one of 110 MiB comes (usage then stays within
#    the limit's margin L/8, so that the second is not stopped too), which then succeeds,
#    while small requests carry on;
#  - memlimits_shared_limit 300m over 4 workers (listen ... reuseport;
#    as root, workers as nobody: they use the mapping they were forked
#    with): a PUT of 250 MiB
#    (its body buffer is allocated when its body starts) waits, then three
#    of 60 MiB come at once: the total goes over 300 MiB, the 250 MiB one,
#    the largest holder in any worker, is stopped (503, or closed while
#    its body is read; -1 would be no answer in 20 s) and the others get
#    200 (180 MiB is within the budget, and the big one's memory, on its
#    way back, is not paid for by them); the error-log line says it was
#    the shared budget and names the worker, one of the master's children;
#    issue 35's case (three 60 MiB PUTs at 20 MB/s, then one of 250 MiB
#    that crosses: the crosser is stopped, never a 60 MiB one),
#    ML_NGINX_RUNS times; a reload that drops the directive leaves the
#    budget; the budget has no name: no process of the nginx maps an
#    object of /dev/shm;
#  - memlimits_metrics over 2 workers (listen ... reuseport): after 4 PNG
#    bombs stopped by their held limit, 20 fetches of /memlimits-metrics,
#    each on its own connection (either worker may answer), all read
#    memlimits_tasks_interrupted_total{reason="held_limit"} 4 (the counters
#    are in nginx's shared memory: every worker's requests), as the 0.0.4
#    content type, each with memlimits_heap_bytes for both workers (their
#    pids, the master's children, heaps above 0); promtool check metrics
#    accepts the text; a real Prometheus server scraping the endpoint every
#    second reads 4 for that series through its HTTP API (polled for 60 s
#    at most, never timed; each skipped where promtool or prometheus is
#    missing); after a reload by nginx -s reload run without the library
#    (issue 33: the signalling process refused the configuration), the new
#    workers read 4 and are the heap series' labels, serve a file and stop
#    a PNG bomb;
#  - memlimits_metrics over 100 workers: 100 heap series, one for each
#    worker, about 6 KB of text, whole (issue 33: the handler wrote into
#    4096 bytes, and ngx_slprintf cut the text short silently), which
#    promtool check metrics accepts.
# Probabilities: the held limit of 64 MiB needs 839 samples at the default
# interval (80000 bytes); the bomb keeps what it allocates, so it is
# stopped with certainty well before 576 MiB, and the estimate overshoots
# the true 64 MiB by more than 16 MiB (209 samples, 7 standard
# deviations) with probability below 1e-11.  The ordinary requests hold
# under 1 MiB each: 13 samples on average against 839 (never stopped,
# below 1e-300).
: "${top_builddir:?}" "${top_srcdir:?}"
. "$top_srcdir/tests/tap/tap.sh"
export LC_ALL=C
unset NGINX LD_PRELOAD MEMLIMITS_ALLOC_LIMIT MEMLIMITS_HEAP_LIMIT MEMLIMITS_REPORT \
	MEMLIMITS_PROFILE MEMLIMITS_HELD_LIMIT MEMLIMITS_SAMPLE_INTERVAL
MOD=$top_builddir/contrib/nginx/ngx_http_memlimits_module.so
IMG=/usr/lib/nginx/modules/ngx_http_image_filter_module.so
LIB=${MEMLIMITS_LIB:-$top_builddir/lib/.libs/libmemlimits.so}
PY=${PYTHON3:-python3}
CLIENT=$top_srcdir/tests/nginx/nginx-client.py
# CI runs the real-server suites in one stage (.ci/run, ML_SKIP_SERVERS).
if [ -n "${ML_SKIP_SERVERS:-}" ]; then
	echo "1..0 # SKIP $ML_SKIP_SERVERS"
	exit 0
fi
why=
if [ -z "${NGINX_BIN:-}" ] || [ ! -x "$NGINX_BIN" ]; then
	why="nginx not installed (Debian: apt-get install nginx nginx-dev)"
elif [ ! -f "$MOD" ]; then
	why="the module is not built (configure found no nginx-dev)"
elif [ ! -f "$IMG" ]; then
	why="no image filter module (Debian: libnginx-mod-http-image-filter)"
elif ! "$PY" -c 'import http.client' 2>/dev/null; then
	why="python3 is missing"
fi
if [ -n "$why" ]; then
	echo "1..0 # SKIP $why"
	exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ml-nginx.XXXXXX") || exit 1
# stop_pid PID: SIGTERM, 10 s to go, then SIGKILL.
stop_pid() {
	kill "$1" 2>/dev/null
	for _ in $(seq 50); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.2 # not ordering: the poll of a bounded wait
	done
	kill -9 "$1" 2>/dev/null
}
master=
stop_nginx() {
	if [ -n "$master" ]; then
		stop_pid "$master"
		master=
	fi
}
prom=
stop_prom() {
	if [ -n "$prom" ]; then
		stop_pid "$prom"
		wait "$prom" 2>/dev/null
		prom=
	fi
}
trap 'stop_prom; stop_nginx; rm -rf "$tmp"' EXIT INT TERM
mkdir -p "$tmp/html" "$tmp/logs" "$tmp/var"
# Three free ports, as the kernel gives them (the third: Prometheus).
set -- $("$PY" -c 'import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
p1=$1 p2=$2 p3=$3
# conf GLOBAL [PRESSURE]: the example with this test's paths, ports,
# modules, its memlimits_global and memlimits_pressure (none if not given).
conf() {
	sed -e "s|/usr/lib/nginx/modules/ngx_http_image_filter_module.so|$IMG|" \
		-e "s|/usr/local/lib/nginx/modules/ngx_http_memlimits_module.so|$MOD|" \
		-e "s|/var/log/nginx|$tmp/logs|g" -e "s|/run/nginx.pid|$tmp/logs/nginx.pid|" \
		-e "s|/var/www/html|$tmp/html|g" -e "s|/var/lib/nginx|$tmp/var|g" \
		-e "s|127.0.0.1:8080|127.0.0.1:$p1|" -e "s|127.0.0.1:8081|127.0.0.1:$p2|g" \
		-e "s|memlimits_global 768m;|memlimits_global $1;|" \
		-e "s|memlimits_pressure 0.85;|memlimits_pressure ${2:-}|" \
		-e "/memlimits_pressure \$/d" \
		-e "s|^        location / {|        include $tmp/filters.conf;\n&|" \
		"$top_srcdir/contrib/nginx/nginx.conf" >"$tmp/nginx.conf"
	printf 'daemon off;\n' >>"$tmp/nginx.conf"
	# As root, the workers would run as nobody, who cannot read $tmp.
	[ "$(id -u)" != 0 ] || printf 'user root;\n' >>"$tmp/nginx.conf"
}
start_nginx() {
	: >"$tmp/logs/error.log"
	LD_PRELOAD=$LIB "$NGINX_BIN" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/error.log" \
		>"$tmp/nginx.out" 2>&1 &
	master=$!
	for _ in $(seq 50); do
		"$PY" "$CLIENT" get "$p1" /f4k.bin 2>/dev/null | grep -q '^200 4096' && break
		sleep 0.1 # not ordering: the poll of a bounded wait
	done
	worker=$(pgrep -P "$master" | head -1)
}
rss_kb() { sed -n "s/^$1:[[:space:]]*\([0-9]*\) kB/\1/p" "/proc/$2/status"; }
# labels FILE: the pid labels of memlimits_metrics' heap series with a
# heap above 0, sorted, on one line (0.3's label was worker: issue 35).
labels() {
	sed -n 's/^memlimits_heap_bytes{pid="\([0-9]*\)"} [1-9][0-9]*$/\1/p' "$1" |
		sort -n | paste -sd' ' -
}

# Locations behind other filters (issue 24).  gzip compresses only 200, 403
# and 404 answers: its locations answer 403, so that gzip would act.
cat >"$tmp/filters.conf" <<EOF
location /gz/ {
    alias $tmp/html/;
    gzip on; gzip_types *; gzip_min_length 0;
    memlimits_status 403;
}
location /sub/ {
    alias $tmp/html/;
    sub_filter nginx SUBSTITUTED; sub_filter_once off;
}
location /ssi/ {
    alias $tmp/html/;
    ssi on; add_after_body /tail.txt;
}
location /gthumb/ {
    alias $tmp/html/;
    image_filter resize 100 100; image_filter_buffer 2m;
    memlimits_request_held 0; memlimits_request_limit 0;
}
location /gzput {
    gzip on; gzip_types *; gzip_min_length 0;
    memlimits_status 403;
    client_max_body_size 1024m; client_body_buffer_size 1024m;
    proxy_pass http://127.0.0.1:$p2/sink;
}
location /subput {
    sub_filter nginx SUBSTITUTED; sub_filter_once off; ssi on;
    client_max_body_size 1024m; client_body_buffer_size 1024m;
    proxy_pass http://127.0.0.1:$p2/sink;
}
location /imgput {
    image_filter resize 100 100;
    client_max_body_size 1024m; client_body_buffer_size 1024m;
    proxy_pass http://127.0.0.1:$p2/sink;
}
location /ssiup/ {
    alias $tmp/html/;
    ssi on;
}
location /up48/ {
    proxy_pass http://127.0.0.1:$p1/raw48/;
    proxy_buffers 64 8m; proxy_busy_buffers_size 8m;
    proxy_max_temp_file_size 0;
}
location /raw48/ {
    alias $tmp/html/;
    memlimits off;
}
location /up {
    memlimits_request_held 400m; memlimits_request_limit 0;
    client_max_body_size 1024m; client_body_buffer_size 400m;
    client_body_in_single_buffer on;
    proxy_pass http://127.0.0.1:$p2/sink;
}
EOF
printf '<p>hello nginx <!--# echo var="nothere" default="ssi-on" --></p>\n' >"$tmp/html/page.html"
printf 'addition-on\n' >"$tmp/html/tail.txt"
for i in 1 2 3 4 5 6 7 8; do
	printf '<p>%s</p><!--# include virtual="/up48/big48.bin?%s" -->\n' $i $i
done >"$tmp/html/page8.html"
head -c $((48 << 20)) /dev/zero >"$tmp/html/big48.bin"
"$PY" "$CLIENT" png bomb "$tmp/html/bomb.png" 12000
"$PY" "$CLIENT" png small "$tmp/html/small.png"
head -c 4096 /dev/urandom >"$tmp/html/f4k.bin"
conf 768m

if tap_case startup; then
	# Without the library (LD_PRELOAD is unset above): nginx -t and -T
	# only read the configuration, and go on with a warning (issue 33:
	# they were refused); a server is refused, with one line.
	"$NGINX_BIN" -t -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/t.log" >"$tmp/t.out" 2>&1
	st=$?
	lines=$(grep -c '\[warn\] memlimits: libmemlimits is not this process.s allocator.*LD_PRELOAD' "$tmp/t.out")
	if [ "$st" = 0 ] && [ "$lines" = 1 ] && grep -q 'test is successful' "$tmp/t.out"; then
		ok "without the library nginx -t succeeds, with one warning naming the fix"
	else
		notok "nginx -t without the library: status $st, $lines warnings"
		diag "$tmp/t.out"
	fi
	"$NGINX_BIN" -T -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/t.log" >"$tmp/t.out" 2>&1
	st=$?
	if [ "$st" = 0 ] && grep -q '^    memlimits_request_held 64m;' "$tmp/t.out"; then
		ok "without the library nginx -T succeeds and dumps the configuration"
	else
		notok "nginx -T without the library: status $st"
		diag "$tmp/t.out"
	fi
	# A server (daemon off): it must exit at once; 60 s is a backstop
	# should it run.
	timeout 60 "$NGINX_BIN" -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/t.log" >"$tmp/t.out" 2>&1
	st=$?
	lines=$(grep -c '\[emerg\] memlimits: libmemlimits is not nginx.s allocator.*LD_PRELOAD' "$tmp/t.out")
	if [ "$st" != 0 ] && [ "$st" != 124 ] && [ "$lines" = 1 ]; then
		ok "without the library nginx does not start: status $st, one line naming the fix"
	else
		notok "nginx started without the library: status $st, $lines lines"
		diag "$tmp/t.out"
	fi
	if LD_PRELOAD=$LIB "$NGINX_BIN" -t -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/t.log" \
		>"$tmp/t.out" 2>&1; then
		ok "with LD_PRELOAD the example configuration is accepted"
	else
		notok "nginx -t with the library"
		diag "$tmp/t.out"
	fi
fi

if tap_case bomb; then
	start_nginx
	base=$(rss_kb VmRSS "$worker")
	timeout 120 "$PY" "$CLIENT" load "$p1" "$tmp/html" 200 10 >"$tmp/load.out" 2>&1
	hwm=$(rss_kb VmHWM "$worker")
	now=$(pgrep -P "$master" | head -1)
	v() { sed -n "s/^$1 //p" "$tmp/load.out"; }
	if [ "$(v bomb_ok)" = 10 ] && [ "$(v bomb_bad)" = 0 ]; then
		ok "10 PNG bombs answered 503 or closed (slowest $(v bomb_worst_s) s)"
	else
		notok "PNG bombs"
		tail -20 "$tmp/load.out" | diag /dev/stdin
	fi
	if [ "$(v ord_bad)" = 0 ] && [ "${ord:=$(v ord_ok)}" -gt 400 ]; then
		ok "$ord ordinary requests from 200 clients meanwhile: all 200, right bodies"
	else
		notok "ordinary requests: $(v ord_ok) good, $(v ord_bad) bad"
		tail -20 "$tmp/load.out" | diag /dev/stdin
	fi
	lines=$(grep -c 'memlimits: request stopped.*request: "GET /thumb/bomb.png' "$tmp/logs/error.log")
	if [ "$lines" = 10 ]; then
		ok "the error log names each stopped request, once"
	else
		notok "error log: $lines lines for 10 bombs"
		tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# 2 bombs at once, each stopped by 64 MiB held + 16 MiB of estimate and
	# libpng buffers; 64 MiB for 200 ordinary requests and the allocator.
	max=$((base + 2 * (64 + 16) * 1024 + 64 * 1024))
	echo "# worker resident: $base kB before, peak $hwm kB, bound $max kB"
	if [ -n "$hwm" ] && [ "$hwm" -le "$max" ]; then
		ok "the worker's peak resident size $((hwm / 1024)) MiB is within $((max / 1024)) MiB"
	else
		notok "the worker's peak resident size: ${hwm:-?} kB over $max kB"
	fi
	if [ "$now" = "$worker" ] && ! grep -q 'exited on signal\|worker process .* exited' "$tmp/logs/error.log"; then
		ok "the worker never restarted"
	else
		notok "the worker restarted ($worker, now $now)"
		grep 'exited' "$tmp/logs/error.log" | diag /dev/stdin
	fi
	stop_nginx
fi

if tap_case ssi; then
	start_nginx
	base=$(rss_kb VmRSS "$worker")
	out=$(timeout 120 "$PY" "$CLIENT" get "$p1" /ssiup/page8.html)
	hwm=$(rss_kb VmHWM "$worker")
	st=${out%% *}
	if [ "$st" = 503 ] || [ "$st" = 0 ]; then
		ok "the SSI page with 8 proxied includes is stopped: $([ "$st" = 0 ] && echo closed || echo 503)"
	else
		notok "the SSI page with 8 proxied includes: $out"
	fi
	line=$(grep '"GET /ssiup/page8.html' "$tmp/logs/access.log" | tail -n 1)
	case $line in
	*"held memory limit reached"*) ok "its access log line says the held limit stopped it" ;;
	*) notok "its access log line: $line" ;;
	esac
	max=$((base + 2 * 64 * 1024))
	echo "# worker resident: $base kB before, peak $hwm kB, bound $max kB"
	if [ -n "$hwm" ] && [ "$hwm" -le "$max" ]; then
		ok "the worker's peak resident size $((hwm / 1024)) MiB is within $((max / 1024)) MiB"
	else
		notok "the worker's peak resident size: ${hwm:-?} kB over $max kB"
	fi
	good=0
	for _ in 1 2 3 4 5; do
		"$PY" "$CLIENT" get "$p1" /f4k.bin | grep -q '^200 4096' && good=$((good + 1))
	done
	now=$(pgrep -P "$master" | head -1)
	if [ "$good" = 5 ] && [ "$now" = "$worker" ]; then
		ok "then 5 of 5 ordinary requests get 200 from the same worker"
	else
		notok "after the SSI page: $good of 5 ordinary requests, worker $worker now $now"
	fi
	stop_nginx
fi

if tap_case put; then
	start_nginx
	timeout 60 "$PY" "$CLIENT" put "$p1" /upload 512 >"$tmp/put.out" 2>&1
	s=$(sed -n 's/^put_status //p' "$tmp/put.out")
	t=$(sed -n 's/^put_s //p' "$tmp/put.out")
	if [ "$s" = 503 ] &&
		grep -q 'memlimits: request stopped.*request: "PUT /upload' "$tmp/logs/error.log"; then
		ok "a 512 MiB PUT buffered in memory is answered 503 after 1 MiB of its body ($t s) and logged"
	else
		notok "512 MiB PUT: status $s in $t s"
		diag "$tmp/put.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# Stopped by its limits (the bomb by the 64 MiB held, the PUTs' 512 MiB
	# body buffer by the 256 MiB allocation limit) behind image_filter, gzip
	# (its 403), sub_filter and ssi: exactly the module's answer.
	timeout 60 "$PY" "$CLIENT" ask "$p1" GET:/thumb/bomb.png PUT:/imgput \
		PUT:/gzput:gzip PUT:/subput >"$tmp/stop.out" 2>&1
	bad=
	for want in "GET:/thumb/bomb.png 503" "PUT:/imgput 503" \
		"PUT:/gzput:gzip 403" "PUT:/subput 503"; do
		grep -qx "$want 0 - 0 -" "$tmp/stop.out" || bad="$bad ${want% *}"
	done
	if [ -z "$bad" ]; then
		ok "stopped behind image_filter, gzip, sub_filter, ssi: memlimits_status, empty body"
	else
		notok "stopped behind filters, not the module's answer:$bad"
		diag "$tmp/stop.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	timeout 60 "$PY" "$CLIENT" put "$p1" /upload 1 >"$tmp/put.out" 2>&1
	s=$(sed -n 's/^put_status //p' "$tmp/put.out")
	if [ "$s" = 200 ]; then
		ok "a 1 MiB PUT reaches the backend (200)"
	else
		notok "1 MiB PUT: status $s"
		diag "$tmp/put.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	stop_nginx
fi

if tap_case pressure; then
	conf 256m "0.5;"
	start_nginx
	timeout 60 "$PY" "$CLIENT" pressure "$p1" 150 GET:/thumb/small.png \
		GET:/gz/page.html:gzip GET:/sub/page.html GET:/ssi/page.html >"$tmp/p.out" 2>&1
	v() { sed -n "s/^$1 //p" "$tmp/p.out"; }
	if [ "$(v during)" = 503 ] && [ "$(v after)" = 200 ] &&
		grep -q 'memlimits: request refused.*request: "GET /f4k.bin' "$tmp/logs/error.log"; then
		ok "memlimits_pressure: refused (503, logged) while 150 MiB are held, served after"
	else
		notok "memlimits_pressure: $(v during) during, $(v after) after"
		diag "$tmp/p.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# Refused behind image_filter (it made them 415), gzip (it compressed
	# the 403 page), sub_filter, ssi and addition: exactly the module's
	# answer; after, the same requests show each filter acting there.
	bad=
	for want in "GET:/thumb/small.png 503" "GET:/gz/page.html:gzip 403" \
		"GET:/sub/page.html 503" "GET:/ssi/page.html 503"; do
		grep -qx "held $want 0 - 0 -" "$tmp/p.out" || bad="$bad ${want% *}"
	done
	grep -q '^freed GET:/thumb/small.png 200 [0-9]* - [0-9]* image/png$' "$tmp/p.out" ||
		bad="$bad after:image"
	grep -q '^freed GET:/gz/page.html:gzip 200 - gzip [0-9]* text/html$' "$tmp/p.out" ||
		bad="$bad after:gzip"
	grep -q '^freed GET:/sub/page.html body .*hello SUBSTITUTED' "$tmp/p.out" ||
		bad="$bad after:sub"
	grep -q '^freed GET:/ssi/page.html body .*ssi-on.*addition-on' "$tmp/p.out" ||
		bad="$bad after:ssi"
	if [ -z "$bad" ]; then
		ok "refused behind image_filter, gzip, sub_filter, ssi, addition: memlimits_status, empty body"
	else
		notok "refused behind filters, not the module's answer:$bad"
		diag "$tmp/p.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# memlimits_metrics counts each refusal the error log names.
	mkdir "$tmp/pm"
	"$PY" "$CLIENT" metrics "$p1" /memlimits-metrics 1 "$tmp/pm" >/dev/null 2>&1
	refused=$(grep -c 'memlimits: request refused' "$tmp/logs/error.log")
	if [ "$refused" -gt 0 ] &&
		grep -qx "memlimits_requests_refused_total $refused" "$tmp/pm/0.txt"; then
		ok "memlimits_requests_refused_total: $refused, one per refusal logged"
	else
		notok "memlimits_requests_refused_total, $refused refusals logged"
		diag "$tmp/pm/0.txt"
	fi
	stop_nginx
fi

if tap_case global; then
	conf 256m
	start_nginx
	timeout 60 "$PY" "$CLIENT" global "$p1" 150 110 >"$tmp/g.out" 2>&1
	v() { sed -n "s/^$1 //p" "$tmp/g.out"; }
	b=$(v big_status) t=$(v big_stopped_s)
	# The log line is the evidence that it was stopped; the time is
	# printed, never judged (make check runs under load).
	if { [ "$b" = 503 ] || [ "$b" = 0 ]; } &&
		grep -q 'memlimits: request stopped.*global.*request: "PUT /big' "$tmp/logs/error.log"; then
		ok "memlimits_global stops the largest holder (status $b, in $t s), logged"
	else
		notok "the largest holder: status $b in $t s"
		diag "$tmp/g.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	if [ "$(v second_status)" = 200 ] && [ "$(v small_bad)" = 0 ] && [ "$(v small_ok)" -gt 20 ]; then
		ok "the second PUT (200) and $(v small_ok) small requests carry on"
	else
		notok "the others: second $(v second_status), small $(v small_ok) good, $(v small_bad) bad"
		diag "$tmp/g.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# A bomb without limits of its own behind image_filter: stopped by
	# memlimits_global as it decodes, answered like the others.
	timeout 60 "$PY" "$CLIENT" ask "$p1" GET:/gthumb/bomb.png >"$tmp/gb.out" 2>&1
	if grep -qx "GET:/gthumb/bomb.png 503 0 - 0 -" "$tmp/gb.out" &&
		grep -q 'memlimits: request stopped.*global.*request: "GET /gthumb/bomb.png' "$tmp/logs/error.log"; then
		ok "stopped by memlimits_global behind image_filter: memlimits_status, empty body"
	else
		notok "stopped by memlimits_global behind image_filter"
		diag "$tmp/gb.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	stop_nginx
fi
if tap_case shared; then
	conf 768m
	# 4 workers, each with its own listening socket; the per-worker
	# memlimits_global stays out of the way (768 MiB).
	sed -i -e 's|^worker_processes 1;|worker_processes 4;|' \
		-e "s|listen 127.0.0.1:$p1;|listen 127.0.0.1:$p1 reuseport;|" \
		-e 's|^    memlimits_global 768m;|&\n    memlimits_shared_limit 300m;|' \
		"$tmp/nginx.conf"
	if [ "$(id -u)" = 0 ]; then
		# Workers as nobody: the budget has no name to reopen.
		sed -i 's|^user root;|user nobody nogroup;|' "$tmp/nginx.conf"
		chmod 755 "$tmp" "$tmp/html"
	fi
	start_nginx
	workers=$(pgrep -P "$master" | tr '\n' ' ')
	# The budget has no name (ml_shared_create): no process of this nginx
	# maps an object of /dev/shm (0.3's were /dev/shm/memlimits.UID.nginx-*,
	# left behind by a reload that dropped the directive).  Their maps,
	# not /dev/shm's listing: other nginx may run on this machine.
	shm_mapped=$(for p in $master $workers; do grep -h '/dev/shm/memlimits' "/proc/$p/maps"; done 2>/dev/null | awk '{print $6}' | sort -u | paste -sd' ' -)
	timeout 90 "$PY" "$CLIENT" shared "$p1" 250 60 3 >"$tmp/s.out" 2>&1
	v() { sed -n "s/^$1 //p" "$tmp/s.out"; }
	b=$(v big_status)
	line=$(grep 'memlimits: request stopped.*shared budget.*request: "PUT /big' "$tmp/logs/error.log" | head -1)
	wpid=$(printf '%s\n' "$line" | sed -n 's/.* in worker \([0-9]*\):.*/\1/p')
	# The big one's client stalls: its worker waits in epoll_wait when
	# the total crosses; the wake ends it.  Printed, never judged (the
	# backstop is put_status' 20 s: -1).
	echo "# workers: $workers; big: $b, answered $(v big_stopped_s) s after the crossing requests started; others: $(v small_status)"
	if { [ "$b" = 503 ] || [ "$b" = 0 ]; } && [ -n "$line" ]; then
		ok "memlimits_shared_limit: the 250 MiB PUT, the largest holder of 4 workers, stalled, is stopped (status $b), logged as the shared budget"
	else
		notok "the 250 MiB PUT under memlimits_shared_limit: status $b"
		diag "$tmp/s.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# Each 60 MiB PUT is a bystander: the 250 MiB one is asked first and
	# its memory counts as on its way back until it is gone.  (Before the
	# meter's and the held hook's fixes of issue 27, a worker published its
	# largest request's estimate before its body buffer was recorded, and a
	# bystander was stopped in about half the runs.)
	if [ "$(v small_status)" = "200 200 200" ]; then
		ok "the three 60 MiB PUTs that crossed the limit meanwhile: 200"
	else
		notok "the three 60 MiB PUTs: $(v small_status) (a bystander stopped)"
		diag "$tmp/s.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# The stopped request's estimate at its stop: its buffer.
	held=$(printf '%s\n' "$line" | sed -n 's/.*held ~\([0-9]*\)\.[0-9] MiB.*/\1/p')
	if [ -n "$held" ] && [ "$held" -ge 200 ]; then
		ok "its log line says it held ~$held MiB when it was stopped"
	else
		notok "the stopped request's held estimate: '$held' MiB"
		printf '%s\n' "$line" | diag /dev/stdin
	fi
	case " $workers" in
	*" $wpid "*) [ -n "$wpid" ] && ok "the log line names the worker ($wpid), one of the master's" ||
		notok "the log line names no worker" ;;
	*) notok "the log line names worker '$wpid', not one of: $workers"
		printf '%s\n' "$line" | diag /dev/stdin ;;
	esac
	# Issue 35's case: three 60 MiB PUTs at 20 MB/s to /up (its body in
	# one buffer), then one of 250 MiB, whose buffer is one allocation
	# that crosses the limit: the crosser counts it before the choice, so
	# it is the one stopped, never a 60 MiB one (0.3: one in every run).
	# ML_NGINX_RUNS times (3 by default).
	runs=${ML_NGINX_RUNS:-3}
	timeout $((60 + 60 * runs)) "$PY" "$CLIENT" bystanders "$p1" /up 60 3 250 20e6 "$runs" >"$tmp/by.out" 2>&1
	sed 's/^/# /' "$tmp/by.out" | grep '# run '
	nby=$(sed -n 's/^bystanders_stopped //p' "$tmp/by.out")
	if [ "$nby" = 0 ] && [ "$(grep -c '^run .* small 200 200 200$' "$tmp/by.out")" = "$runs" ]; then
		ok "issue 35's case, $runs runs: no 60 MiB PUT stopped when the 250 MiB one crosses"
	else
		notok "issue 35's case: '$nby' 60 MiB PUTs stopped in $runs runs"
		diag "$tmp/by.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	# A reload that drops the directive: the master leaves its budget (a
	# notice, below the log's level), the new workers are in none, so
	# their metrics have no shared gauges.
	sed -i '/memlimits_shared_limit/d' "$tmp/nginx.conf"
	kill -HUP "$master"
	mkdir -p "$tmp/sr"
	gone=
	for _ in $(seq 100); do
		now=$(pgrep -P "$master" | tr '\n' ' ')
		old=0
		for w in $workers; do
			case " $now" in *" $w "*) old=1 ;; esac
		done
		"$PY" "$CLIENT" metrics "$p1" /memlimits-metrics 1 "$tmp/sr" >/dev/null 2>&1
		if [ "$old" = 0 ] && [ -s "$tmp/sr/0.txt" ] && ! grep -q '^memlimits_shared' "$tmp/sr/0.txt"; then
			gone=1
			break
		fi
		sleep 0.1 # not ordering: the poll of a bounded wait
	done
	if [ -n "$gone" ]; then
		ok "a reload without memlimits_shared_limit: the new workers ($now) are in no budget"
	else
		notok "the reload that drops memlimits_shared_limit: workers $now (before: $workers)"
		diag "$tmp/sr/0.txt"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	stop_nginx
	if [ -z "$shm_mapped" ]; then
		ok "the shared budget is no object in /dev/shm: nothing to squat, truncate or leave behind"
	else
		notok "nginx maps $shm_mapped"
	fi
fi
if tap_case metrics; then
	conf 768m
	# 2 workers, each with its own listening socket: a new connection
	# goes to either; a shared budget far above what 4 bombs at 64 MiB
	# held hold, for its two gauges.
	sed -i -e 's|^worker_processes 1;|worker_processes 2;|' \
		-e "s|listen 127.0.0.1:$p1;|listen 127.0.0.1:$p1 reuseport;|" \
		-e 's|^    memlimits_global 768m;|&\n    memlimits_shared_limit 1024m;|' \
		"$tmp/nginx.conf"
	start_nginx
	workers=$(pgrep -P "$master" | tr '\n' ' ')
	timeout 120 "$PY" "$CLIENT" ask "$p1" GET:/thumb/bomb.png GET:/thumb/bomb.png \
		GET:/thumb/bomb.png GET:/thumb/bomb.png >"$tmp/mb.out" 2>&1
	stopped=$(grep -cE '^GET:/thumb/bomb.png (503|0) ' "$tmp/mb.out")
	held=$(grep -c 'memlimits: request stopped.*held memory limit.*"GET /thumb/bomb.png' "$tmp/logs/error.log")
	want='memlimits_tasks_interrupted_total{reason="held_limit"} 4'
	# Counted before the answer goes out; waited for all the same (5 s at
	# most), so that a slow worker cannot make the test flaky.
	mkdir "$tmp/m0" "$tmp/m"
	# Each worker publishes its heap at its start: waited for too.
	for _ in $(seq 50); do
		"$PY" "$CLIENT" metrics "$p1" /memlimits-metrics 1 "$tmp/m0" >/dev/null 2>&1
		grep -qxF "$want" "$tmp/m0/0.txt" &&
			[ "$(grep -c '^memlimits_heap_bytes{' "$tmp/m0/0.txt")" = 2 ] && break
		sleep 0.1 # not ordering: the poll of a bounded wait
	done
	"$PY" "$CLIENT" metrics "$p1" /memlimits-metrics 20 "$tmp/m" >"$tmp/m.out" 2>&1
	ct='text/plain; version=0.0.4; charset=utf-8'
	reasons='^memlimits_tasks_interrupted_total{reason="\(alloc_limit\|held_limit\|global_limit\|cancelled\)"} [0-9]*$'
	sorted=$(printf '%s\n' $workers | sort -n | paste -sd' ' -)
	good=0 bad=
	for i in $(seq 0 19); do
		if grep -qxF "$i 200 $ct" "$tmp/m.out" && grep -qxF "$want" "$tmp/m/$i.txt" &&
			[ "$(grep -c "$reasons" "$tmp/m/$i.txt")" = 4 ]; then
			good=$((good + 1))
		fi
		[ "$(labels "$tmp/m/$i.txt")" = "$sorted" ] &&
			[ "$(grep -c '^memlimits_heap_bytes{' "$tmp/m/$i.txt")" = 2 ] ||
			bad="$bad $i:'$(labels "$tmp/m/$i.txt")'"
	done
	echo "# 4 bombs: $stopped answered 503 or closed, $held logged as the held limit; workers: $workers"
	sed 's/^/# /' "$tmp/m/0.txt"
	if [ "$stopped" = 4 ] && [ "$held" = 4 ] && [ "$good" = 20 ]; then
		ok "memlimits_metrics: 20 fetches over 2 workers all read held_limit 4 after 4 bombs, as $ct"
	else
		notok "memlimits_metrics: $good of 20 answers right; bombs: $stopped stopped, $held logged"
		diag "$tmp/mb.out" "$tmp/m.out" "$tmp/m/0.txt"
	fi
	if grep -qx 'memlimits_shared_limit_bytes 1073741824' "$tmp/m/0.txt" &&
		grep -qx 'memlimits_shared_usage_bytes [1-9][0-9]*' "$tmp/m/0.txt" &&
		grep -qx 'memlimits_global_limit_bytes 805306368' "$tmp/m/0.txt"; then
		ok "memlimits_shared_limit_bytes, memlimits_shared_usage_bytes and memlimits_global_limit_bytes: the configuration's"
	else
		notok "the limits' gauges"
		diag "$tmp/m/0.txt"
	fi
	if [ -z "$bad" ]; then
		ok "every answer has memlimits_heap_bytes of both workers ($sorted), each by its pid, each above 0"
	else
		notok "memlimits_heap_bytes: answers whose worker labels are not the workers' ($sorted) with a heap > 0:$bad"
		diag "$tmp/m/0.txt"
	fi
	if command -v "${PROMTOOL:-promtool}" >/dev/null 2>&1; then
		if "${PROMTOOL:-promtool}" check metrics <"$tmp/m/0.txt" >"$tmp/pt.out" 2>&1; then
			ok "promtool check metrics accepts the endpoint's text"
		else
			notok "promtool check metrics refuses the endpoint's text"
			diag "$tmp/pt.out" "$tmp/m/0.txt"
		fi
	else
		skip "promtool not found (Debian: apt-get install prometheus)"
	fi
	PROM=${PROMETHEUS:-prometheus}
	if command -v "$PROM" >/dev/null 2>&1; then
		mkdir "$tmp/prom"
		cat >"$tmp/prom/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: nginx
    metrics_path: /memlimits-metrics
    static_configs:
      - targets: ['127.0.0.1:$p1']
EOF
		"$PROM" --config.file="$tmp/prom/prometheus.yml" \
			--storage.tsdb.path="$tmp/prom/data" \
			--web.listen-address="127.0.0.1:$p3" >"$tmp/prom/out" 2>&1 &
		prom=$!
		timeout 90 "$PY" "$CLIENT" promquery "$p3" \
			'memlimits_tasks_interrupted_total{reason="held_limit"}' 4 60 >"$tmp/pq.out" 2>&1
		if grep -qx 'found 1' "$tmp/pq.out"; then
			ok "a Prometheus server scraping /memlimits-metrics reads held_limit 4"
		else
			notok "Prometheus read held_limit '$(sed -n 's/^value //p' "$tmp/pq.out")', not 4, in 60 s"
			diag "$tmp/pq.out"; tail -20 "$tmp/prom/out" | diag /dev/stdin
		fi
		stop_prom
	else
		skip "prometheus not found (Debian: apt-get install prometheus)"
	fi
	# A reload keeps the zone, and the counts: the new workers answer 4.
	# Asked for by nginx -s reload without the library, as a user types
	# it (issue 33: the signalling process refused the configuration).
	if "$NGINX_BIN" -s reload -p "$tmp" -c "$tmp/nginx.conf" -e "$tmp/logs/s.log" \
		>"$tmp/s.out" 2>&1; then
		ok "nginx -s reload without the library: accepted"
	else
		notok "nginx -s reload without the library failed"
		diag "$tmp/s.out"
	fi
	mkdir "$tmp/mr"
	# The old workers (idle) exit at once; 10 s at most.
	new=
	for _ in $(seq 100); do
		new=$(pgrep -P "$master" | tr '\n' ' ')
		old=
		for o in $workers; do
			case " $new" in *" $o "*) old=1 ;; esac
		done
		[ -z "$old" ] && break
		sleep 0.1 # not ordering: the poll of a bounded wait
	done
	# The new workers take their slots at their start: waited for (5 s).
	snew=$(printf '%s\n' $new | sort -n | paste -sd' ' -)
	for _ in $(seq 50); do
		"$PY" "$CLIENT" metrics "$p1" /memlimits-metrics 1 "$tmp/mr" >/dev/null 2>&1
		[ "$(labels "$tmp/mr/0.txt")" = "$snew" ] && break
		sleep 0.1 # not ordering: the poll of a bounded wait
	done
	w=$(labels "$tmp/mr/0.txt")
	if [ "$w" = "$snew" ] && [ "$snew" != "$sorted" ] && grep -qxF "$want" "$tmp/mr/0.txt"; then
		ok "after a reload the new workers ($w) read held_limit 4 and list their own heaps"
	else
		notok "after a reload: worker labels '$w' (new ones: $new; old: $workers)"
		diag "$tmp/mr/0.txt"
	fi
	# The new workers serve, and stop requests at their limits.
	timeout 60 "$PY" "$CLIENT" ask "$p1" GET:/f4k.bin GET:/thumb/bomb.png >"$tmp/ra.out" 2>&1
	if grep -q '^GET:/f4k.bin 200 4096 ' "$tmp/ra.out" &&
		grep -qE '^GET:/thumb/bomb.png (503|0) ' "$tmp/ra.out"; then
		ok "after the reload a file is served (200) and a PNG bomb is stopped"
	else
		notok "after the reload: not served or not stopped"
		diag "$tmp/ra.out"; tail -20 "$tmp/logs/error.log" | diag /dev/stdin
	fi
	stop_nginx
fi
if tap_case series; then
	conf 768m
	# 100 workers: 100 series of memlimits_heap_bytes, about 6 KB of text,
	# over the 4096 bytes the handler wrote into before issue 33 (cut
	# short there, silently, by ngx_slprintf).
	sed -i 's|^worker_processes 1;|worker_processes 100;|' "$tmp/nginx.conf"
	start_nginx
	mkdir "$tmp/ms"
	# Each worker publishes its heap at its start: waited for, 30 s at
	# most (a backstop).
	for _ in $(seq 300); do
		"$PY" "$CLIENT" metrics "$p1" /memlimits-metrics 1 "$tmp/ms" >"$tmp/ms.out" 2>&1
		[ "$(grep -c '^memlimits_heap_bytes{' "$tmp/ms/0.txt")" = 100 ] && break
		sleep 0.1 # not ordering: the poll of a bounded wait
	done
	# The workers once all 100 have published: read right after the
	# start, the master may not have forked them all yet (seen under load).
	workers=$(pgrep -P "$master" | sort -n | paste -sd' ' -)
	size=$(wc -c <"$tmp/ms/0.txt")
	nser=$(grep -c '^memlimits_heap_bytes{' "$tmp/ms/0.txt")
	echo "# 100 workers: $size bytes, $nser heap series"
	if [ "$nser" = 100 ] && [ "$(labels "$tmp/ms/0.txt")" = "$workers" ] && [ "$size" -gt 4096 ] &&
		[ "$(tail -1 "$tmp/ms/0.txt")" = "memlimits_global_limit_bytes 805306368" ]; then
		ok "memlimits_metrics over 100 workers: $size bytes, whole, a heap series for each worker"
	else
		notok "memlimits_metrics over 100 workers: $size bytes, $nser heap series, last line '$(tail -1 "$tmp/ms/0.txt")'"
		# A text cut short has no newline at its end.
		diag "$tmp/ms.out"; { tail -5 "$tmp/ms/0.txt"; echo; } | diag /dev/stdin
	fi
	if command -v "${PROMTOOL:-promtool}" >/dev/null 2>&1; then
		if "${PROMTOOL:-promtool}" check metrics <"$tmp/ms/0.txt" >"$tmp/pt.out" 2>&1; then
			ok "promtool check metrics accepts the 100 workers' text"
		else
			notok "promtool check metrics refuses the 100 workers' text"
			diag "$tmp/pt.out"; { tail -5 "$tmp/ms/0.txt"; echo; } | diag /dev/stdin
		fi
	else
		skip "promtool not found (Debian: apt-get install prometheus)"
	fi
	stop_nginx
fi
tap_done
