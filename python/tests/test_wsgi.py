"""memlimits.wsgi.LimitMiddleware, called directly as a WSGI server
would: a runaway request gets 503 and one log line, ordinary requests 200,
and a request stopped while its body streams ends there."""
import logging

import pytest

from memlimits import _memlimits
from memlimits.wsgi import LimitMiddleware

# Where a runaway not stopped ends (hundreds of MB, over ten times each
# limit here): a failed check rather than a machine out of memory.
RUNAWAY_END = 4 * 10**6


def app(environ, start_response):
    path = environ["PATH_INFO"]
    if path == "/bomb":
        x = [str(i) for i in range(RUNAWAY_END)]  # noqa: F841
    start_response("200 OK", [("Content-Type", "text/plain")])
    if path == "/stream-bomb":
        def body():
            yield b"start\n"
            keep = []
            while len(keep) < RUNAWAY_END:
                keep.append(str(len(keep)) * 10)
                if len(keep) % 10000 == 0:
                    yield b"."
            yield b"not stopped"
        return body()
    return [b"hello ", str(sum(range(1000))).encode()]


def call(mw, path):
    seen = {}

    def start_response(status, headers, exc_info=None):
        if "status" in seen and exc_info is None:
            raise AssertionError("start_response called twice")
        seen["status"] = status
        seen["headers"] = headers

    it = mw({"REQUEST_METHOD": "GET", "PATH_INFO": path}, start_response)
    body = b"".join(it)
    close = getattr(it, "close", None)
    if close:
        close()
    return seen["status"], body


def test_ordinary_and_runaway(caplog):
    mw = LimitMiddleware(app, held="32MiB")
    caplog.set_level(logging.WARNING, logger="memlimits")
    assert call(mw, "/")[0] == "200 OK"
    status, body = call(mw, "/bomb")
    assert status.startswith("503") and b"memory limit" in body
    lines = [r for r in caplog.records if "stopped" in r.getMessage()]
    assert len(lines) == 1
    assert "GET /bomb" in lines[0].getMessage()
    assert "limit 33554432" in lines[0].getMessage()
    for _ in range(20):
        assert call(mw, "/") == ("200 OK", b"hello 499500")


def test_stopped_while_streaming():
    mw = LimitMiddleware(app, held="16MiB")
    status, body = call(mw, "/stream-bomb")
    # The headers went with the first chunk: the response ends there.
    assert status == "200 OK" and body.startswith(b"start\n")
    assert not body.endswith(b"not stopped")
    assert call(mw, "/")[0] == "200 OK"


def test_custom_status():
    mw = LimitMiddleware(app, held="16MiB", status=507)
    assert call(mw, "/bomb")[0].startswith("507")


class Closing:
    """A response iterable that records each call of its close() and the
    task it ran in (0: none); ``close_work`` runs there."""

    def __init__(self, chunks, close_work=None):
        self.chunks = chunks
        self.close_work = close_work
        self.closed_in = []

    def __iter__(self):
        return iter(self.chunks())

    def close(self):
        self.closed_in.append(_memlimits.current_task_id())
        if self.close_work:
            self.close_work()


def run_away_in_close():
    keep = []
    while len(keep) < RUNAWAY_END:
        keep.append(str(len(keep)) * 10)


def test_close_charged_to_request(caplog):
    # The response's close() (Django's request_finished, a generator's
    # finally) runs inside the request's task: a runaway there is
    # stopped and logged as the request's.  Outside the task (before),
    # it ran to RUNAWAY_END.
    caplog.set_level(logging.WARNING, logger="memlimits")
    resp = Closing(lambda: [b"done"], run_away_in_close)

    def close_app(environ, start_response):
        start_response("200 OK", [])
        return resp

    mw = LimitMiddleware(close_app, held="16MiB")
    assert call(mw, "/close-bomb") == ("200 OK", b"done")
    assert len(resp.closed_in) == 1 and resp.closed_in[0] != 0
    lines = [r.getMessage() for r in caplog.records
             if "stopped" in r.getMessage()]
    assert len(lines) == 1 and "GET /close-bomb close() stopped" in lines[0]
    assert call(mw, "/close-bomb")[0] == "200 OK"


def _stream_then_run_away():
    yield b"start\n"
    run_away_in_close()
    yield b"not stopped"


@pytest.mark.parametrize("path", ["/", "/stream-bomb", "/bomb-caught"])
def test_close_called_once(path):
    # close() is called exactly once, inside a task, on each path: a
    # normal end, a stop while the body streams, and a stop before the
    # response started where the app caught its MemoryError and still
    # returned a response (the server never sees that one; before, its
    # close() was never called).
    resp = Closing(_stream_then_run_away if path == "/stream-bomb"
                   else lambda: [b"hello"])

    def app(environ, start_response):
        if path == "/bomb-caught":
            try:
                run_away_in_close()
            except MemoryError:
                pass
        start_response("200 OK", [])
        return resp

    mw = LimitMiddleware(app, held="16MiB")
    status, body = call(mw, path)
    assert status.startswith("503" if path == "/bomb-caught" else "200")
    assert len(resp.closed_in) == 1 and resp.closed_in[0] != 0
