"""memlimits.asgi.LimitMiddleware on one event loop, called directly: two
concurrent runaways are stopped (503) while ordinary requests interleaved
with them on the same loop get 200: each request's steps are charged to
its own task."""
import asyncio
import logging
import threading

import pytest

from memlimits.asgi import LimitMiddleware, install_task_factory

# A runaway that is not stopped ends here (about 400 MB, 12 times the
# limit) and its request gets 200: a failed check, not a machine out of
# memory (a child task left unlimited once took the CI machine's memory).
RUNAWAY_END = 2 * 10**6


def run_away(keep):
    # One step of a runaway: 2000 more strings of ~140 bytes.
    for _ in range(2000):
        keep.append(str(len(keep)) * 20)


def run_away_sync():
    keep = []
    while len(keep) < RUNAWAY_END:
        run_away(keep)


async def run_away_async():
    keep = []
    while len(keep) < RUNAWAY_END:
        run_away(keep)
        await asyncio.sleep(0)  # not ordering: a yield, the others run


async def app(scope, receive, send):
    await receive()
    if scope["path"] == "/bomb":
        await run_away_async()
    if scope["path"] == "/child":
        # A child asyncio task runs in the request's task too.
        await asyncio.create_task(run_away_async())
    small = [str(i) for i in range(2000)]
    await asyncio.sleep(0)  # not ordering: a yield to the loop
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body",
                "body": str(len(small)).encode()})


async def request(mw, path):
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await mw({"type": "http", "method": "GET", "path": path,
              "query_string": b"", "headers": [], "http_version": "1.1",
              "scheme": "http", "root_path": "",
              "server": ("127.0.0.1", 80)}, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_concurrent_runaways_and_ordinary(caplog):
    caplog.set_level(logging.WARNING, logger="memlimits")
    mw = LimitMiddleware(app, held="32MiB")

    async def main():
        paths = ["/bomb", "/bomb"] + ["/"] * 50
        return await asyncio.gather(*(request(mw, p) for p in paths))

    results = asyncio.run(main())
    assert [s for s, _ in results[:2]] == [503, 503]
    assert all(r == (200, b"2000") for r in results[2:])
    lines = [r for r in caplog.records if "stopped" in r.getMessage()]
    assert len(lines) == 2


def test_child_task_charged_to_request():
    mw = LimitMiddleware(app, held="32MiB")

    async def main():
        return await asyncio.gather(request(mw, "/child"),
                                    *(request(mw, "/") for _ in range(10)))

    results = asyncio.run(main())
    assert results[0][0] == 503
    assert all(r[0] == 200 for r in results[1:])


def test_child_task_charged_on_every_new_loop():
    # asyncio.run makes a new loop each time, often at the address of the
    # one before (19 distinct of 20 here): each loop gets the factory, so
    # each request's child task is stopped.
    mw = LimitMiddleware(app, held="32MiB")
    for _ in range(20):
        status, _ = asyncio.run(request(mw, "/child"))
        assert status == 503


def test_task_factory_reinstalled_when_replaced():
    async def main():
        loop = asyncio.get_running_loop()
        install_task_factory(loop)
        ours = loop.get_task_factory()
        assert ours is not None
        install_task_factory(loop)  # idempotent
        assert loop.get_task_factory() is ours
        loop.set_task_factory(None)  # the application's own choice
        install_task_factory(loop)
        return loop.get_task_factory()

    assert asyncio.run(main()) is not None


def _runaway_then_500(environ, start_response):
    # A WSGI app that runs away, catches its MemoryError and answers 500
    # itself, as Flask does.
    try:
        run_away_sync()
    except MemoryError:
        start_response("500 Internal Server Error", [])
        return [b"internal error"]
    start_response("200 OK", [])
    return [b"not stopped"]


def test_thread_pool_work_charged():
    # Work a request hands to a thread pool runs in its task there.
    async def app(scope, receive, send):
        if scope["path"] == "/to_thread":
            await asyncio.to_thread(run_away_sync)
        else:
            await asyncio.get_running_loop().run_in_executor(
                None, run_away_sync)
        await send({"type": "http.response.start", "status": 200,
                    "headers": []})
        await send({"type": "http.response.body", "body": b"not stopped"})

    mw = LimitMiddleware(app, held="32MiB")

    async def main():
        return await asyncio.gather(request(mw, "/executor"),
                                    request(mw, "/to_thread"),
                                    request(mw_small, "/"))

    async def small(scope, receive, send):
        n = await asyncio.get_running_loop().run_in_executor(
            None, lambda: len([str(i) for i in range(1000)]))
        await send({"type": "http.response.start", "status": 200,
                    "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % n})

    mw_small = LimitMiddleware(small, held="32MiB")
    results = asyncio.run(main())
    assert [s for s, _ in results] == [503, 503, 200]
    assert results[2][1] == b"1000"


def test_wsgi_app_behind_asgiref():
    # asgiref's WsgiToAsgi runs the app on a pool thread and its send on
    # the loop, waiting there for a coroutine made after the stop: that
    # one's first step runs (its handler reports back), the app's own 500
    # is not sent, and the request gets 503.  Thrown into before it
    # started, the coroutine never ran and the pool thread waited for
    # good (then every later request behind it: one thread for all).
    wsgi = pytest.importorskip("asgiref.wsgi", reason="no asgiref "
                               "(Debian: python3-asgiref)")
    mw = LimitMiddleware(wsgi.WsgiToAsgi(_runaway_then_500), held="32MiB")

    async def main():
        first = await asyncio.wait_for(request(mw, "/"), 120)  # backstop
        second = await asyncio.wait_for(request(mw, "/"), 120)
        return first, second

    first, second = asyncio.run(main())
    assert first == (503, b"memory limit exceeded\n")
    assert second[0] == 503


def test_sync_async_sync_on_one_thread():
    # Django's pattern: a sync view run in the pool calls async_to_sync,
    # whose coroutine calls sync_to_async (thread-sensitive): asgiref
    # brings that call back to the view's thread, inside the request's
    # task already.  It runs there, charged once.
    sync = pytest.importorskip("asgiref.sync", reason="no asgiref "
                               "(Debian: python3-asgiref)")

    def inner():
        return len([str(i) for i in range(1000)])

    async def middle():
        return await sync.sync_to_async(inner)()

    def view():
        return sync.async_to_sync(middle)()

    async def app(scope, receive, send):
        n = await sync.sync_to_async(view)()
        await send({"type": "http.response.start", "status": 200,
                    "headers": []})
        await send({"type": "http.response.body", "body": b"%d" % n})

    mw = LimitMiddleware(app, held="32MiB")
    assert asyncio.run(request(mw, "/")) == (200, b"1000")


def _work_then_set(fut):
    # A callback's work for its request: it runs away, then would hand
    # its result on.
    run_away_sync()
    if not fut.done():
        fut.set_result("not stopped")


async def callback_app(scope, receive, send):
    # Each path schedules the runaway as a callback of the loop and waits
    # for the future it would set: stopped, the callback wakes the
    # request, which unwinds to the middleware's 503.
    loop = asyncio.get_running_loop()
    fut = loop.create_future()
    if scope["path"] == "/soon":
        loop.call_soon(_work_then_set, fut)
    elif scope["path"] == "/later":
        loop.call_later(0.001, _work_then_set, fut)
    elif scope["path"] == "/at":
        loop.call_at(loop.time(), _work_then_set, fut)
    elif scope["path"] == "/done":
        # A done callback runs in the context it was added in: this
        # request's, though the future is set from outside any request
        # (a thread, through call_soon_threadsafe).
        first = loop.create_future()
        first.add_done_callback(lambda _: _work_then_set(fut))
        threading.Thread(target=loop.call_soon_threadsafe,
                         args=(first.set_result, 1)).start()
    else:
        loop.call_soon(fut.set_result, len([str(i) for i in range(2000)]))
    result = await fut
    await send({"type": "http.response.start", "status": 200,
                "headers": []})
    await send({"type": "http.response.body", "body": str(result).encode()})


@pytest.mark.parametrize("path", ["/soon", "/later", "/at", "/done"])
def test_callback_charged_to_request(path, caplog):
    # Before, the callback ran outside any task: it ran to RUNAWAY_END
    # and its request answered 200 "not stopped".
    caplog.set_level(logging.WARNING, logger="memlimits")
    mw = LimitMiddleware(callback_app, held="32MiB")

    async def main():
        return await asyncio.wait_for(asyncio.gather(
            request(mw, path), *(request(mw, "/") for _ in range(20))),
            120)  # backstop: a request left waiting fails here

    results = asyncio.run(main())
    assert results[0] == (503, b"memory limit exceeded\n")
    assert all(r == (200, b"2000") for r in results[1:])
    lines = [r.getMessage() for r in caplog.records
             if "stopped" in r.getMessage()]
    assert len(lines) == 1 and "GET %s stopped" % path in lines[0]


def test_callback_hooks_idempotent_and_steps_left_alone():
    # Installed once per loop; asyncio's own steps and wakeups, and a
    # future's set_result, reach the loop's call_soon unwrapped (the
    # steps are _Stepper's: entered twice, a slice raises RuntimeError),
    # while a plain function is wrapped.  The spy sits under the hooks,
    # where it sees what they hand on.
    seen = []

    async def main():
        loop = asyncio.get_running_loop()
        inner = loop.call_soon

        def spy(cb, *args, context=None):
            seen.append(cb)
            return inner(cb, *args, context=context)
        loop.call_soon = spy
        install_task_factory(loop)
        hooks = (loop.call_soon, loop.call_later, loop.call_at)
        install_task_factory(loop)
        assert (loop.call_soon, loop.call_later, loop.call_at) == hooks
        mw = LimitMiddleware(callback_app, held="32MiB")
        before = len(seen)
        plain = await request(mw, "/")
        steps = seen[before:]
        await request(mw, "/soon")
        return plain, steps, seen[before + len(steps):]

    from memlimits.asgi import _in_callback
    plain, steps, soon = asyncio.run(main())
    assert plain == (200, b"2000")
    assert steps and not any(cb is _in_callback for cb in steps)
    assert sum(cb is _in_callback for cb in soon) == 1


def test_callback_after_the_stop_bounded():
    # A callback of a request that runs after its stop (a done callback
    # added inside the request, on a future set after its 503) runs in a
    # fresh task with the request's limits (the stopped one cannot be
    # entered): a runaway there is stopped too.  Run outside any task,
    # it ran to RUNAWAY_END.
    done = []
    pending = []

    def late(_):
        try:
            _work_then_set(asyncio.get_running_loop().create_future())
        finally:
            done.append(_memlimits_current())

    async def app(scope, receive, send):
        fut = asyncio.get_running_loop().create_future()
        fut.add_done_callback(late)
        pending.append(fut)
        await run_away_async()

    async def main():
        result = await request(LimitMiddleware(app, held="32MiB"), "/")
        pending[0].set_result(None)
        while not done:
            await asyncio.sleep(0.01)  # not ordering: waits for the callback
        return result

    assert asyncio.run(main())[0] == 503
    assert len(done) == 1 and done[0] != 0


def _memlimits_current():
    from memlimits import _memlimits
    return _memlimits.current_task_id()
