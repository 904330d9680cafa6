"""A memory limit per ASGI request.

    from memlimits.asgi import LimitMiddleware
    app = LimitMiddleware(app, held="64MiB")

Each HTTP (or websocket) connection runs in a :class:`memlimits.Task` of
its own that follows it across its awaits: every step of the request's
coroutine (each resumption, from one await to the next) is a slice of the
request's task, entered before the step and left after it, so that
requests interleaved on one event loop are charged separately.  asyncio
tasks the application creates while handling the request inherit it
through a context variable (the loop's task factory wraps their
coroutines the same way: :func:`install_task_factory`, called for the
running loop at the first request).

A request over its limit fails its next allocation (MemoryError inside
the application); the middleware answers ``status`` (503) when the
response has not started, else ends it.  One log line per stopped
request (logger ``memlimits``)."""

import asyncio
import contextvars
import logging

from . import LimitExceeded, Task, parse_size

log = logging.getLogger("memlimits")

current_task = contextvars.ContextVar("memlimits_task", default=None)


class _Stepper:
    """Drives a coroutine one step at a time, each step a slice of task.
    A step of a stopped task is not run: LimitExceeded is thrown into
    the coroutine instead, so that it unwinds."""

    __slots__ = ("_coro", "_task")

    def __init__(self, coro, task):
        self._coro = coro
        self._task = task

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def _step(self, fn, *args):
        t = self._task
        code = t.status_code
        if code > 0:
            return self._coro.throw(t._exceeded(code))
        # Entered and left in C: nothing allocates after a stop before
        # the leave.
        return t.step(fn, *args)

    def send(self, value):
        return self._step(self._coro.send, value)

    def throw(self, *exc):
        return self._step(self._coro.throw, *exc)

    def close(self):
        return self._coro.close()


def run_in_task(coro, task):
    """An awaitable running coro with each of its steps a slice of task."""
    return _Stepper(coro, task)


def install_task_factory(loop=None):
    """Make asyncio tasks created inside a request's task run their steps
    in it too (wraps the loop's task factory; idempotent)."""
    loop = loop or asyncio.get_running_loop()
    inner = loop.get_task_factory()
    # Ours already when the loop's factory says so.  (Not a set of
    # id(loop): a new loop can get a closed one's address, and was then
    # left without the factory, its requests' child tasks unlimited.)
    if getattr(inner, "_memlimits", False):
        return

    def factory(loop, coro, **kw):
        task = current_task.get()
        if task is not None:
            coro = _wrap(coro, task)
        if inner is not None:
            return inner(loop, coro, **kw)
        return asyncio.Task(coro, loop=loop, **kw)

    factory._memlimits = True
    loop.set_task_factory(factory)


async def _wrap(coro, task):
    return await _Stepper(coro, task)


def _log_stop(scope, exc):
    log.warning("memlimits: %s %s stopped: %s (limit %s, held ~%d, "
                "allocated ~%d bytes)", scope.get("method", scope["type"]),
                scope.get("path", "?"), exc.reason, exc.limit, exc.held,
                exc.allocated)


class LimitMiddleware:
    """ASGI middleware: ``held`` and ``alloc`` limits (sizes) per
    connection, ``status`` the answer to a stopped request."""

    def __init__(self, app, held=None, alloc=None, status=503,
                 global_limit=False):
        self.app = app
        self.held = parse_size(held)
        self.alloc = parse_size(alloc)
        self.status = status
        self.global_limit = global_limit

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        install_task_factory()
        task = Task(held=self.held, alloc=self.alloc,
                    global_limit=self.global_limit)
        started = False

        async def tracked_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        token = current_task.set(task)
        try:
            await _Stepper(self.app(scope, receive, tracked_send), task)
        except Exception as e:  # a stopped app may turn MemoryError into any
            if task.status is None:
                raise
            exc = e if isinstance(e, LimitExceeded) else \
                task._exceeded(task.status_code)
            _log_stop(scope, exc)
            if scope["type"] == "http" and not started:
                body = b"memory limit exceeded\n"
                await send({"type": "http.response.start",
                            "status": self.status,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"content-length",
                                         str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
            elif scope["type"] == "http":
                await send({"type": "http.response.body", "body": b"",
                            "more_body": False})
        finally:
            current_task.reset(token)

