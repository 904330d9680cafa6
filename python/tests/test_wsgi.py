"""memlimits.wsgi.LimitMiddleware, called directly as a WSGI server
would: a runaway request gets 503 and one log line, ordinary requests 200,
and a request stopped while its body streams ends there."""
import logging

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
