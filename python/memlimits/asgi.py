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
coroutines the same way), and so do functions it runs in a thread pool
through ``loop.run_in_executor`` (each call a slice of the request's
task on the pool's thread): a WSGI app behind asgiref's ``WsgiToAsgi``
or uvicorn's ``WSGIMiddleware`` is limited per request too.  Both are
installed by :func:`install_task_factory`, for the running loop at each
request.

A request over its limit fails its next allocation (MemoryError inside
the application); the middleware answers ``status`` (503) when the
response has not started, else ends it.  One log line per stopped
request (logger ``memlimits``)."""

import asyncio
import contextvars
import functools
import logging
import threading

from . import LimitExceeded, Task, _http_status, _limit_size, _some_limit
from . import _memlimits

log = logging.getLogger("memlimits")

current_task = contextvars.ContextVar("memlimits_task", default=None)


class _Stepper:
    """Drives a coroutine one step at a time, each step a slice of task.
    A step of a stopped task is not run: LimitExceeded is thrown into
    the coroutine instead, so that it unwinds."""

    __slots__ = ("_coro", "_task", "_bridge")

    def __init__(self, coro, task, bridge=False):
        self._coro = coro
        self._task = task
        # Made while its task was already stopped: not by a step of the
        # task (those do not run then) but by a thread or a callback
        # acting for it, typically a bridge that waits for the coroutine
        # to finish (asgiref's AsyncToSync runs the app's send this way
        # and waits on a future the coroutine's own handler sets).  Its
        # first step runs, outside the task, so that the handler does;
        # thrown into before it started, it would never run, and the
        # pool thread would wait for good.  (A stopped task stays
        # stopped: every step of such a coroutine finds it so.)
        self._bridge = bridge

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
            if self._bridge:
                self._bridge = False
                return fn(*args)
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
    """Make work started inside a request's task run in it too: asyncio
    tasks it creates (the loop's task factory, wrapped) and functions it
    hands to a thread pool with ``loop.run_in_executor`` (asyncio's
    ``to_thread``, asgiref's ``sync_to_async`` and ``WsgiToAsgi``,
    uvicorn's ``WSGIMiddleware``), each call a slice of the task on the
    pool's thread.  Idempotent."""
    loop = loop or asyncio.get_running_loop()
    _install_executor_hook(loop)
    inner = loop.get_task_factory()
    # Ours already when the loop's factory says so.  (Not a set of
    # id(loop): a new loop can get a closed one's address, and was then
    # left without the factory, its requests' child tasks unlimited.)
    if getattr(inner, "_memlimits", False):
        return

    def factory(loop, coro, **kw):
        task = current_task.get()
        if task is not None:
            coro = _wrap(coro, task, task.status_code > 0)
        if inner is not None:
            return inner(loop, coro, **kw)
        return asyncio.Task(coro, loop=loop, **kw)

    factory._memlimits = True
    loop.set_task_factory(factory)


_pool_thread = threading.local()


def _in_task(task, fn, *args):
    # On the pool's thread: a stopped task is not entered (LimitExceeded
    # at once), and one stopped during fn raises LimitExceeded at the
    # block's end, whatever fn made of its MemoryError.
    inside = getattr(_pool_thread, "tasks", None)
    if inside is None:
        inside = _pool_thread.tasks = []
    if _memlimits.current_task_id() == task.task_id:
        # Entered here already: by the executor's own wrapper (work
        # submitted inside a task runs inside it, memlimits' rule for
        # ThreadPoolExecutor.submit, which asyncio's default executor
        # is).
        return fn(*args)
    if any(t is task for t in inside):
        # Brought back to a thread inside the task already, which waits
        # for it (asgiref's thread-sensitive sync_to_async under the
        # async_to_sync of a function run here): it runs as it is, in the
        # slice open here.  Entering again would raise RuntimeError.
        return fn(*args)
    inside.append(task)
    try:
        with task:
            return fn(*args)
    finally:
        inside.pop()


_warned_loops = set()


def _install_executor_hook(loop):
    run = loop.run_in_executor
    if getattr(run, "_memlimits", False):
        return

    def run_in_executor(executor, fn, *args):
        task = current_task.get()
        if task is not None:
            return run(executor, functools.partial(_in_task, task, fn),
                       *args)
        return run(executor, fn, *args)

    run_in_executor._memlimits = True
    try:
        loop.run_in_executor = run_in_executor
    except (AttributeError, TypeError):
        # A loop written in C (uvloop) takes no attribute: its thread
        # pools run outside the requests' tasks.  Said once per type.
        name = type(loop).__module__ + "." + type(loop).__qualname__
        if name not in _warned_loops:
            _warned_loops.add(name)
            log.warning("memlimits: %s: functions run in a thread pool "
                        "(run_in_executor) are not charged to the "
                        "request (use asyncio's loop to charge them)",
                        name)


async def _wrap(coro, task, bridge=False):
    return await _Stepper(coro, task, bridge)


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
        _some_limit("LimitMiddleware", held, alloc, global_limit)
        self.app = app
        self.held = _limit_size(held, "held")
        self.alloc = _limit_size(alloc, "alloc")
        self.status = _http_status(status, False)
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
            if task.status is not None:
                # The app's own answer to its stop (Flask's 500 through a
                # WSGI bridge) is not sent: the request gets ours.
                raise task._exceeded(task.status_code)
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

