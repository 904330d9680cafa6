"""The app test_servers.py runs under real servers: a Flask app for
gunicorn (``make_flask_app()``), the same app for uvicorn behind a WSGI
bridge (``flask_asgiref()``, ``flask_uvicorn_wsgi()``) and the same two
endpoints as a native ASGI app for uvicorn (``asgi_app``), each behind
memlimits' LimitMiddleware with held="64MiB".

``/`` is an ordinary request (a little JSON work); its body is
"ok PID GROWING": the worker's pid and, under ASGI, how many runaways
were growing on the loop when it ran.  ``/runaway`` appends strings to
a list forever; under ASGI, ``/reached`` says how many each stopped
runaway had appended."""
import asyncio
import json
import os

import memlimits.asgi
import memlimits.wsgi

HELD = "64MiB"


def ordinary_work():
    doc = json.dumps({"items": [{"id": i, "name": "n%d" % i}
                                for i in range(100)]})
    return len(json.loads(doc)["items"])


# A runaway that is not stopped ends here (about 500 MB, eight times the
# limit) and answers 200: a failed check, not a machine out of memory.
RUNAWAY_END = 5 * 10**6


def run_away(keep):
    # One step of the runaway: 2000 strings of ~40 bytes.
    for _ in range(2000):
        keep.append(str(len(keep)) * 8)


def make_flask_app(limit=True):
    from flask import Flask

    app = Flask(__name__)

    @app.route("/")
    def ordinary():
        assert ordinary_work() == 100
        return "ok %d 0\n" % os.getpid()

    @app.route("/runaway")
    def runaway():
        keep = []
        while len(keep) < RUNAWAY_END:
            run_away(keep)
        return "not stopped %d\n" % os.getpid()

    # Flask turns the view's MemoryError into its own 500: the
    # middleware still answers 503, as the request's task was stopped.
    if limit:
        app.wsgi_app = memlimits.wsgi.LimitMiddleware(app.wsgi_app,
                                                      held=HELD)
    return app


def flask_asgi(bridge):
    """The same Flask app under an ASGI server: a WSGI bridge that runs
    it in a thread pool (asgiref's WsgiToAsgi, one thread for all;
    uvicorn's WSGIMiddleware, ten), behind the ASGI LimitMiddleware."""
    app = make_flask_app(limit=False)
    if bridge == "asgiref":
        from asgiref.wsgi import WsgiToAsgi
        inner = WsgiToAsgi(app)
    else:
        from uvicorn.middleware.wsgi import WSGIMiddleware
        inner = WSGIMiddleware(app)
    return memlimits.asgi.LimitMiddleware(inner, held=HELD)


def flask_asgiref():
    return flask_asgi("asgiref")


def flask_uvicorn_wsgi():
    return flask_asgi("uvicorn")


class _Loop:
    """The runaways' meeting points on the event loop (one process, one
    loop under uvicorn): two runaways start together, and after 4 MiB
    each they wait until an ordinary request has run while both grow,
    so that the overlap is certain rather than likely."""

    def __init__(self):
        self.arrived = 0
        self.growing = 0
        self.both = None
        self.served = None
        # How many strings each runaway had when it was stopped (room
        # made here, outside the runaways' tasks).
        self.reached = [None] * 64

    def events(self):
        if self.both is None:
            self.both = asyncio.Event()
            self.served = asyncio.Event()


state = _Loop()


async def _body(send, status, text):
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": text.encode()})


async def _asgi(scope, receive, send):
    if scope["type"] != "http":
        return
    state.events()
    while (await receive()).get("more_body"):
        pass
    if scope["path"] == "/runaway":
        state.arrived += 1
        me = state.arrived - 1
        if state.arrived % 2 == 0:
            state.both.set()
        await state.both.wait()
        state.growing += 1
        keep = []
        try:
            while len(keep) < RUNAWAY_END:
                run_away(keep)
                if len(keep) == 100000:
                    await state.served.wait()
                # not ordering: a yield, the loop's other requests run
                await asyncio.sleep(0)
        finally:
            state.growing -= 1
            state.reached[me] = len(keep)
    if scope["path"] == "/reached":
        await _body(send, 200, " ".join(str(n) for n in state.reached
                                        if n is not None))
        return
    growing = state.growing
    if growing == 2:
        state.served.set()
    assert ordinary_work() == 100
    await asyncio.sleep(0)  # not ordering: a yield, as a real handler's
    await _body(send, 200, "ok %d %d\n" % (os.getpid(), growing))


asgi_app = memlimits.asgi.LimitMiddleware(_asgi, held=HELD)



# FastAPI's and Starlette's synchronous code (issue 43, item 1): plain
# ``def`` endpoints, sync dependencies, sync streaming iterators and
# background tasks run in anyio's worker threads (anyio.to_thread.run_sync,
# Starlette's run_in_threadpool), each call a slice of its request's task.

def grow():
    keep = []
    while len(keep) < RUNAWAY_END:
        run_away(keep)
    return len(keep)


def grow_stream():
    keep = []
    yield "start\n"
    while len(keep) < RUNAWAY_END:
        run_away(keep)
        yield ""
    yield "not stopped\n"


def ordinary_text():
    assert ordinary_work() == 100
    return "ok %d 0\n" % os.getpid()


def fastapi_app():
    from fastapi import BackgroundTasks, Depends, FastAPI
    from fastapi.responses import PlainTextResponse, StreamingResponse

    api = FastAPI()

    @api.get("/", response_class=PlainTextResponse)
    def ordinary():
        return ordinary_text()

    @api.get("/async", response_class=PlainTextResponse)
    async def ordinary_async():
        return ordinary_text()

    @api.get("/runaway", response_class=PlainTextResponse)
    def runaway():
        return "not stopped %d %d\n" % (grow(), os.getpid())

    @api.get("/dependency", response_class=PlainTextResponse)
    async def dependency(n: int = Depends(grow)):
        return "not stopped %d\n" % n

    @api.get("/stream")
    def stream():
        return StreamingResponse(grow_stream(), media_type="text/plain")

    @api.get("/background", response_class=PlainTextResponse)
    def background(tasks: BackgroundTasks):
        tasks.add_task(grow)
        return "ok %d background\n" % os.getpid()

    return memlimits.asgi.LimitMiddleware(api, held=HELD)


def starlette_app():
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    def ordinary(request):
        return PlainTextResponse(ordinary_text())

    async def pool(request):
        # An async endpoint handing its work to the thread pool.
        return PlainTextResponse("not stopped %d\n"
                                 % await run_in_threadpool(grow))

    def runaway(request):
        return PlainTextResponse("not stopped %d\n" % grow())

    app = Starlette(routes=[Route("/", ordinary), Route("/pool", pool),
                            Route("/runaway", runaway)])
    return memlimits.asgi.LimitMiddleware(app, held=HELD)
