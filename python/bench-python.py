"""What the module costs (issue 37): json dumps/loads, a regex loop, dict
and list churn and `python3 -m test test_json test_re`, each run four
ways: plain (no memlimits), with the module imported and no limit
("imported"), after one limit block was entered and left (the wrappers
are in, this thread is in no task: "after"), and inside a `limit`
block.  `make bench-python` runs it against the build tree (PYTHONPATH
at the built package, LD_LIBRARY_PATH at the library):

    python3 python/bench-python.py [--cpu ROUNDS] [WORKLOAD...]

Instructions by default: each (workload, mode) is one process under
callgrind, less the same mode's process with an empty workload (start-up,
the import and the block's entry are then not the workload's), so the
ratio is exact and repeatable on a loaded machine.  PYTHONHASHSEED=0 and
MEMLIMITS_SEED=1: the same instructions run to run.  --cpu ROUNDS: user +
system time of the workload instead, interleaved rounds, the median
(±30 % run to run on a shared machine: read the spread).

    python3 python/bench-python.py --requests N [wsgi|asgi ...]

The middlewares' cost per request (issue 43, item 7): N requests of a
small JSON endpoint (Flask's under WSGI, Starlette's under ASGI), each
handed to the app as its server hands it over (WSGI: wsgiref's handler
over in-memory streams, the server's per-request work less the socket;
ASGI: a scope, receive and send of the request and an asyncio task per
request, as uvicorn does), with and without LimitMiddleware(held=64MiB).
Instructions per request: a process of N requests less one of none, over
N; the cost is the middleware's over the bare app's (the socket and
the HTTP parsing of a real server are not counted, so a real request
costs more and the share is smaller)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

WORK = {
    "none": "pass",
    "json": r'''
import json
doc = {"k%d" % i: [i, str(i), {"x": i * 1.5}] for i in range(2000)}
for _ in range(20):
    json.loads(json.dumps(doc))
''',
    "regex": r'''
import re
pat = re.compile(r"(\w+)@(\w+)\.com")
text = " ".join("user%d@host%d.com" % (i, i) for i in range(2000))
for _ in range(40):
    pat.findall(text)
    pat.sub(r"\2@\1", text)
''',
    "churn": r'''
for _ in range(20):
    d = {}
    for i in range(20000):
        d[i] = [i] * 3
    del d
lst = []
for i in range(200000):
    lst.append(str(i))
    if len(lst) > 1000:
        del lst[:500]
''',
    "regrtest": r'''
import sys
from test.libregrtest import main
sys.argv = ["regrtest", "-q", "test_json", "test_re"]
try:
    main()
except SystemExit as e:
    if e.code:
        raise
''',
}

# json and re are imported first in every mode: memlimits imports re,
# and the workloads' own imports of it would otherwise count in plain
# mode only (json -4 % "imported").
CHILD = r'''
import sys, time, json, re
mode, body = sys.argv[1], sys.argv[2]
if mode != "plain":
    import memlimits
if mode == "after":
    with memlimits.limit(held="4GiB"):
        pass
code = compile(body, "<workload>", "exec")
task = memlimits.limit(held="4GiB") if mode == "limit" else None
# The cyclic collector at the same points of the workload in every mode:
# when a full collection runs depends on how many objects survived the
# last one (it waits for 25 % more), which the module's own objects
# changed (a collection less read as -2.6 % "imported" on the regex
# loop).  Frozen, then collected: none survive, in any mode.
import gc
gc.collect()
gc.freeze()
gc.collect()
t = time.process_time()
if task is not None:
    with task:
        exec(code, {"__name__": "__work__"})
else:
    exec(code, {"__name__": "__work__"})
print(time.process_time() - t)
'''

MODES = ("plain", "imported", "after", "limit")

# One request's path as the server takes it, N times: argv is the
# interface (wsgi or asgi), the mode and N.  Modes: "bare" (no memlimits),
# "after" (the module's allocator wrappers in, as after a first limit:
# each allocation is tested, each free noted), "task" (each request in a
# memlimits.Task entered around the app: every allocation counted), and
# "middleware" (LimitMiddleware(held="64MiB")), so that the middleware's
# cost reads as its parts.  The app and
# the middleware are made before the first request, and one request is
# served before the count starts (first-call caches: Flask's URL map,
# Starlette's routing), so that N = 0 takes everything but the requests.
REQUESTS = r'''
import sys, io, json, gc
kind, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
DOC = {"items": [{"id": i, "name": "n%d" % i} for i in range(20)]}
if kind == "wsgi":
    from flask import Flask, jsonify
    from wsgiref.handlers import SimpleHandler
    app = Flask("bench")

    @app.route("/items")
    def items():
        return jsonify(DOC)
    wsgi = app.wsgi_app
    if mode in ("after", "task"):
        import memlimits
        with memlimits.limit(held="4GiB"):
            pass
    if mode == "task":
        inner = wsgi
        def wsgi(e, sr):
            with memlimits.Task(held="64MiB"):
                return inner(e, sr)
    if mode == "middleware":
        import memlimits.wsgi
        wsgi = memlimits.wsgi.LimitMiddleware(wsgi, held="64MiB")
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/items",
               "SERVER_NAME": "bench", "SERVER_PORT": "80",
               "SERVER_PROTOCOL": "HTTP/1.1", "wsgi.url_scheme": "http",
               "QUERY_STRING": "", "HTTP_HOST": "bench"}

    def one():
        out = io.BytesIO()
        h = SimpleHandler(io.BytesIO(), out, sys.stderr, dict(environ),
                          multithread=True, multiprocess=False)
        h.run(wsgi)
        assert b" 200 " in out.getvalue()[:20], out.getvalue()[:200]
    serve = lambda k: [one() for _ in range(k)]
else:
    import asyncio
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def items(request):
        return JSONResponse(DOC)
    app = Starlette(routes=[Route("/items", items)])
    if mode in ("after", "task"):
        import memlimits
        with memlimits.limit(held="4GiB"):
            pass
    if mode == "task":
        inner = app
        async def app(scope, receive, send):
            with memlimits.Task(held="64MiB"):
                await inner(scope, receive, send)
    if mode == "middleware":
        import memlimits.asgi
        app = memlimits.asgi.LimitMiddleware(app, held="64MiB")
    scope = {"type": "http", "asgi": {"version": "3.0"},
             "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": "/items", "raw_path": b"/items", "query_string": b"",
             "root_path": "", "headers": [(b"host", b"bench")],
             "server": ("127.0.0.1", 80), "client": ("127.0.0.1", 5000)}

    async def request():
        sent = []

        async def receive():
            return {"type": "http.request", "body": b"",
                    "more_body": False}

        async def send(message):
            sent.append(message)
        await app(dict(scope), receive, send)
        assert sent[0]["status"] == 200, sent

    async def serve_all(k):
        loop = asyncio.get_running_loop()
        for _ in range(k):
            await loop.create_task(request())
    serve = lambda k: asyncio.run(serve_all(k))
serve(1)
gc.collect()
gc.freeze()
serve(n)
'''


def env():
    e = dict(os.environ, PYTHONHASHSEED="0", MEMLIMITS_SEED="1")
    # The children run in a scratch directory: paths made absolute.
    for var in ("PYTHONPATH", "LD_LIBRARY_PATH"):
        if e.get(var):
            e[var] = os.pathsep.join(os.path.abspath(p)
                                     for p in e[var].split(os.pathsep))
    return e


def callgrind_ir(valgrind, argv, tmp):
    """The instructions callgrind counts for python3 ARGV (its totals)."""
    out = os.path.join(tmp, "cg.out")
    subprocess.run([valgrind, "--tool=callgrind", "--callgrind-out-file=" +
                    out, sys.executable] + argv, check=True, env=env(),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   cwd=tmp)
    with open(out) as f:
        for line in f:
            m = re.match(r"(?:summary|totals): (\d+)", line)
            if m:
                return int(m.group(1))
    raise SystemExit("bench-python: no totals in callgrind's output")


def run_ir(valgrind, mode, work, tmp):
    return callgrind_ir(valgrind, ["-c", CHILD, mode, WORK[work]], tmp)


def run_requests_ir(valgrind, kind, mode, n, tmp):
    return callgrind_ir(valgrind, ["-c", REQUESTS, kind, mode, str(n)], tmp)


def requests(valgrind, n, kinds, tmp):
    print("instructions per request (callgrind), %d requests less none; "
          "%s" % (n, sys.executable))
    for kind in kinds:
        per = {}
        for mode in ("bare", "after", "task", "middleware"):
            per[mode] = (run_requests_ir(valgrind, kind, mode, n, tmp) -
                         run_requests_ir(valgrind, kind, mode, 0, tmp)) / n
        print("%-5s bare %8.0f  after %+6.1f %%  task %+6.1f %%  "
              "middleware %+6.1f %% (its own code %+5.1f %%)" % (
                  kind, per["bare"],
                  100 * (per["after"] / per["bare"] - 1),
                  100 * (per["task"] / per["bare"] - 1),
                  100 * (per["middleware"] / per["bare"] - 1),
                  100 * (per["middleware"] - per["task"]) / per["bare"]),
              flush=True)


def run_cpu(mode, work, tmp):
    r = subprocess.run([sys.executable, "-c", CHILD, mode, WORK[work]],
                       check=True, env=env(), capture_output=True,
                       text=True, cwd=tmp)
    return float(r.stdout.split()[-1])


def main():
    args = sys.argv[1:]
    rounds = 0
    if args[:1] == ["--requests"]:
        n = int(args[1]) if len(args) > 1 and args[1].isdigit() else 0
        kinds = args[2:] or ["wsgi", "asgi"]
        if n < 1 or any(k not in ("wsgi", "asgi") for k in kinds):
            raise SystemExit("bench-python: --requests N [wsgi|asgi ...], "
                             "N at least 1")
        valgrind = shutil.which(os.environ.get("VALGRIND") or "valgrind")
        if not valgrind:
            raise SystemExit("bench-python: --requests needs valgrind")
        with tempfile.TemporaryDirectory() as tmp:
            requests(valgrind, n, kinds, tmp)
        return
    if args[:1] == ["--cpu"]:
        rounds = int(args[1])
        args = args[2:]
    works = args or ["json", "regex", "churn", "regrtest"]
    for w in works:
        if w not in WORK or w == "none":
            raise SystemExit("bench-python: no workload %r (%s)" % (
                w, ", ".join(k for k in WORK if k != "none")))
    valgrind = shutil.which(os.environ.get("VALGRIND") or "valgrind")
    if not rounds and not valgrind:
        raise SystemExit("bench-python: no valgrind: give --cpu ROUNDS")
    with tempfile.TemporaryDirectory() as tmp:
        if not rounds:
            print("instructions (callgrind), less each mode's empty "
                  "workload; %s" % sys.executable)
            base = {m: run_ir(valgrind, m, "none", tmp) for m in MODES}
            for w in works:
                ir = {m: run_ir(valgrind, m, w, tmp) - base[m]
                      for m in MODES}
                print("%-9s plain %13d  imported %+6.1f %%  after %+6.1f %%"
                      "  limit %+6.1f %%" % (
                          w, ir["plain"],
                          100 * (ir["imported"] / ir["plain"] - 1),
                          100 * (ir["after"] / ir["plain"] - 1),
                          100 * (ir["limit"] / ir["plain"] - 1)), flush=True)
            return
        print("CPU time (s), medians of %d interleaved rounds; %s" % (
            rounds, sys.executable))
        for w in works:
            res = {m: [] for m in MODES}
            for _ in range(rounds):
                for m in MODES:
                    res[m].append(run_cpu(m, w, tmp))
            med = {m: sorted(v)[len(v) // 2] for m, v in res.items()}
            print("%-9s plain %.3f (%.3f-%.3f)" % (
                w, med["plain"], min(res["plain"]), max(res["plain"])) +
                "".join("  %s %+6.1f %% (%.3f-%.3f)" % (
                    m, 100 * (med[m] / med["plain"] - 1), min(res[m]),
                    max(res[m])) for m in MODES[1:]), flush=True)


if __name__ == "__main__":
    main()
