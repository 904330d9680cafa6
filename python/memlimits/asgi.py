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
or uvicorn's ``WSGIMiddleware`` is limited per request too, and so do
callbacks it schedules (``loop.call_soon``, ``call_later``, ``call_at``,
and so a future's done callbacks added in it).  All are installed by
:func:`install_task_factory`, for the running loop at each request.

A request over its limit fails its next allocation (MemoryError inside
the application); the middleware answers ``status`` (503) when the
response has not started, else ends it.  One log line per stopped
request (logger ``memlimits``)."""

import asyncio
import contextvars
import functools
import logging
import sys
import threading

from . import (LimitExceeded, Task, _capture_stacks, _forget_frames,
               _held_by_text, _http_status, _limit_size, _some_limit)
from . import _memlimits

log = logging.getLogger("memlimits")

current_task = contextvars.ContextVar("memlimits_task", default=None)


# Drives a coroutine one step at a time, each step a slice of its task:
# _Stepper(coro, task, bridge=False), in C (python/src/task.c), as it runs
# at every await of every request.  A step of a stopped task is not run:
# LimitExceeded is thrown into the coroutine instead, so that it unwinds.
# bridge: the coroutine was made while its task was stopped already, not
# by a step of the task (those do not run then) but by a thread or a
# callback acting for it, typically a bridge that waits for the coroutine
# to finish (asgiref's AsyncToSync runs the app's send this way and waits
# on a future the coroutine's own handler sets).  Its first step runs,
# outside the task, so that the handler does; thrown into before it
# started, it would never run, and the pool thread would wait for good.
# (A stopped task stays stopped: every step of such a coroutine finds it
# so.)  Steps are entered and left in C: nothing allocates after a stop
# before the leave.
_Stepper = _memlimits._Stepper


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
    _install_callback_hooks(loop)
    if not _anyio_hooked and "anyio" in sys.modules:
        _install_anyio_hook()
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


_anyio_hooked = False


def _install_anyio_hook():
    """Make anyio's worker threads run a request's functions in its task:
    ``anyio.to_thread.run_sync``, and so Starlette's ``run_in_threadpool``
    (FastAPI's plain ``def`` endpoints and dependencies, sync streaming
    iterators, background tasks) do not go through ``run_in_executor``
    but through a pool of anyio's own.  The hook is on the backend's
    function that ``to_thread.run_sync`` looks up at each call (anyio 3:
    the module's ``run_sync_in_worker_thread(func, *args, ...)``; anyio
    4: ``AsyncIOBackend``'s, ``(func, args, ...)``), so that code that
    imported ``run_sync`` by name is covered too.  The function handed
    on is a slice of the request's task on the worker thread (anyio runs
    it in a copy of the caller's context, which also carries
    ``current_task``)."""
    global _anyio_hooked
    _anyio_hooked = True
    try:
        # anyio imports its backend at its first use: imported here, so
        # that the first request's first call is covered too.
        import anyio._backends._asyncio as backend
    except Exception:  # an anyio this does not know: said once
        log.warning("memlimits: anyio's asyncio backend not found: "
                    "functions run in anyio's worker threads are not "
                    "charged to the request", exc_info=True)
        return
    owner = getattr(backend, "AsyncIOBackend", backend)
    run = getattr(owner, "run_sync_in_worker_thread", None)
    if run is None or getattr(run, "_memlimits", False):
        return

    def run_sync_in_worker_thread(func, *rest, **kw):
        task = current_task.get()
        if task is not None:
            func = functools.partial(_in_task, task, func)
        return run(func, *rest, **kw)

    run_sync_in_worker_thread._memlimits = True
    # A classmethod of anyio 4's class, taken bound: a staticmethod then.
    setattr(owner, "run_sync_in_worker_thread",
            staticmethod(run_sync_in_worker_thread) if owner is not backend
            else run_sync_in_worker_thread)


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
                        "(run_in_executor) and callbacks (call_soon, "
                        "call_later, call_at, futures' callbacks) are not "
                        "charged to the request (use asyncio's loop to "
                        "charge them)", name)


# Callbacks a request schedules (loop.call_soon, call_later, call_at, and
# so a future's done callbacks, which asyncio schedules with call_soon in
# the context they were added in) run as a slice of its task: the
# request's work, wherever the loop runs it.  asyncio's own plumbing is
# left alone: a Task's step and wakeup (the loop's call_soon is how the C
# _asyncio module schedules each step of every task: those are driven by
# the _Stepper already, and a slice entered twice on one thread raises
# RuntimeError), futures' own methods (set_result from a thread) and the
# functions of asyncio's modules (sleep's _set_result_unless_cancelled):
# they only hand values on, and the code they wake runs in a step.
_FUTURES = tuple(c for c in (asyncio.Future,
                             getattr(asyncio.futures, "_PyFuture", None))
                 if c is not None)


# Types whose every callback is a task's step (the C _asyncio module's
# TaskStepMethWrapper, before 3.12), learnt when first seen: tested
# first, so that a step costs the hook one type test.
_step_types = set()


def _own(callback, context):
    """The request task a callback that is no future's method belongs
    to, or None: None for asyncio's own functions, else the task of the
    context it will run in (a future's callback's, copied where it was
    added), else the caller's."""
    if callback is _in_callback or \
            (getattr(callback, "__module__", None) or "").startswith(
                "asyncio."):
        return None
    task = (current_task.get() if context is None
            else context.get(current_task))
    if task is None or getattr(task, "_in_send", False):
        return None
    return task


def _in_callback(task, fn, *args):
    # A callback that runs once its task is stopped cannot run in it (a
    # stopped task raises at its entry) and is not skipped: the
    # frameworks' own control flow goes through callbacks too (anyio's
    # cancel scopes deliver a cancellation with call_soon), and skipped,
    # it left Starlette's streaming response of a stopped request waiting
    # for good.  It runs in a fresh task with the request's limits, as a
    # stopped WSGI request's close() does, so that a runaway there is
    # still bounded.  One that stops the request's task wakes the
    # request, whose next step then unwinds it.
    if task.status_code > 0:
        try:
            with Task(held=task.held_limit, alloc=task.alloc_limit):
                fn(*args)
        except LimitExceeded as e:
            _forget_frames(e)
            log.warning("memlimits: a callback of a stopped request "
                        "stopped: %s (limit %s, held ~%d, allocated ~%d "
                        "bytes)", e.reason, e.limit, e.held, e.allocated)
        return
    try:
        with task:
            fn(*args)
    except LimitExceeded as e:
        _forget_frames(e)
        _wake(task, e)


def _wake(task, exc):
    """Wake the request of a task that one of its callbacks stopped: its
    asyncio task may wait for something that callback would have done
    (a future it would have set).  Cancelled, its next step is a step of
    a stopped task, which the _Stepper turns into LimitExceeded."""
    req = getattr(task, "_request", None)
    if req is None or req.done():
        log.warning("memlimits: a callback stopped after its request "
                    "ended: %s (limit %s, held ~%d, allocated ~%d bytes)",
                    exc.reason, exc.limit, exc.held, exc.allocated)
        return
    task._woken = True
    req.cancel()


def _hook_call(run, delayed):
    # Every step of every task comes through call_soon: its path is kept
    # short (a type test for a step, one isinstance for a wakeup; no star
    # call, whose keyword dict is an allocation counted inside the
    # request's task, for none or one argument).
    steps = _step_types
    futures = _FUTURES
    if delayed:
        def call(when, callback, *args, context=None):
            if not isinstance(getattr(callback, "__self__", None), futures):
                task = _own(callback, context)
                if task is not None:
                    args = (task, callback) + args
                    callback = _in_callback
            return run(when, callback, *args, context=context)
    else:
        def call(callback, *args, context=None):
            if type(callback) in steps:
                return run(callback, context=context)
            if isinstance(getattr(callback, "__self__", None), futures):
                if not steps and \
                        type(callback).__name__ == "TaskStepMethWrapper":
                    steps.add(type(callback))
            else:
                task = _own(callback, context)
                if task is not None:
                    return run(_in_callback, task, callback, *args,
                               context=context)
            if not args:
                return run(callback, context=context)
            if len(args) == 1:
                return run(callback, args[0], context=context)
            return run(callback, *args, context=context)
    call._memlimits = True
    return call


def _install_callback_hooks(loop):
    # call_later calls self.call_at in asyncio's loop: a callback already
    # wrapped is not wrapped again (_in_callback as the callback).
    if getattr(loop.call_soon, "_memlimits", False):
        return  # at every request: one test
    for name in ("call_soon", "call_later", "call_at"):
        run = getattr(loop, name)
        if getattr(run, "_memlimits", False):
            continue
        try:
            setattr(loop, name, _hook_call(run, name != "call_soon"))
        except (AttributeError, TypeError):
            return  # uvloop: said once by _install_executor_hook


async def _wrap(coro, task, bridge=False):
    return await _Stepper(coro, task, bridge)


# Never turned into the middleware's answer, stopped or not.
_PASS_THROUGH = (KeyboardInterrupt, SystemExit, GeneratorExit,
                 asyncio.CancelledError)


def _log_stop(scope, exc):
    log.warning("memlimits: %s %s stopped: %s (limit %s, held ~%d, "
                "allocated ~%d bytes)%s", scope.get("method", scope["type"]),
                scope.get("path", "?"), exc.reason, exc.limit, exc.held,
                exc.allocated, _held_by_text(exc))


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
        # Stacks at samples, for the log's "held by" of a stopped request.
        _capture_stacks()

    async def __call__(self, scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        install_task_factory()
        task = Task(held=self.held, alloc=self.alloc,
                    global_limit=self.global_limit)
        started = ended = False

        async def tracked_send(message):
            nonlocal started, ended
            if task.status is not None:
                # The app's own answer to its stop (Flask's 500 through a
                # WSGI bridge) is not sent: the request gets ours.
                raise task._exceeded(task.status_code)
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and \
                    not message.get("more_body", False):
                ended = True
            # The server's own work in send (uvicorn's keep-alive timer,
            # scheduled with call_later at the response's end) is not the
            # request's: its callbacks are not put in the request's task,
            # where a later stop would keep them from running.  (A flag,
            # not the context variable set and reset: that cost a request
            # 2 % more.)
            task._in_send = True
            try:
                await send(message)
            finally:
                task._in_send = False

        # The asyncio task a callback's stop wakes (_wake).
        task._request = asyncio.current_task()
        task._in_send = False
        token = current_task.set(task)
        try:
            await _Stepper(self.app(scope, receive, tracked_send), task)
        except BaseException as e:
            # A stopped app may turn MemoryError into any exception, and
            # into one that is no Exception: anyio 3's ExceptionGroup (a
            # BaseException), which Starlette's StreamingResponse raises
            # from its task group when its sync iterator was stopped.
            if task.status is None or isinstance(e, _PASS_THROUGH):
                raise
            if getattr(task, "_woken", False):
                # Our own cancel (_wake), answered here: the request's
                # asyncio task is not left cancelling (Python 3.11+).
                uncancel = getattr(task._request, "uncancel", None)
                if uncancel is not None:
                    uncancel()
            exc = e if isinstance(e, LimitExceeded) else \
                task._exceeded(task.status_code)
            _log_stop(scope, exc)
            # The stopped frames' locals (the runaway's) go back now.
            _forget_frames(e)
            # Our answer is the server's work, as in tracked_send.
            task._in_send = True
            if scope["type"] == "http" and not started:
                body = b"memory limit exceeded\n"
                await send({"type": "http.response.start",
                            "status": self.status,
                            "headers": [(b"content-type", b"text/plain"),
                                        (b"content-length",
                                         str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})
            elif scope["type"] == "http" and not ended:
                # (An ended response is left as it is: a background task
                # that Starlette runs after the response, in the request,
                # was stopped; the server refuses a message after the
                # last.)
                await send({"type": "http.response.body", "body": b"",
                            "more_body": False})
        finally:
            current_task.reset(token)
            task._request = None
            task._in_send = False

