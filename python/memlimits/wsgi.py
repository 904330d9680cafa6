"""A memory limit per WSGI request.

    from memlimits.wsgi import LimitMiddleware
    app = LimitMiddleware(app, held="64MiB")

Each request runs in a :class:`memlimits.Task` of its own: the call of the
application and each step of the response iterable are slices of it, on
whichever threads the server runs them (gthread, threads of a pool).  A
request that goes over its limit fails its next allocation; the
middleware answers ``status`` (503) when the response has not started
(start_response may still be replaced: nothing was sent), else ends the
response where it is.  One line per stopped request goes to the logger
``memlimits`` with the limit, the estimates and the Python frames that
held most of its memory.  Other requests, the
worker and the process carry on."""

import logging

from . import (LimitExceeded, Task, _capture_stacks, _forget_frames,
               _held_by_text, _http_status, _limit_size, _some_limit)

log = logging.getLogger("memlimits")

_REASON_TEXT = {503: "503 Service Unavailable",
                507: "507 Insufficient Storage",
                500: "500 Internal Server Error",
                413: "413 Content Too Large"}


def _status_line(status):
    if isinstance(status, str):
        return status
    return _REASON_TEXT.get(status, "%d Memory Limit" % status)


def _log_stop(where, exc):
    log.warning("memlimits: %s stopped: %s (limit %s, held ~%d, allocated "
                "~%d bytes)%s", where, exc.reason, exc.limit, exc.held,
                exc.allocated, _held_by_text(exc))


class LimitMiddleware:
    """WSGI middleware: ``held`` and ``alloc`` limits (sizes) per request,
    ``status`` the answer to a stopped request (an int or a status line),
    ``global_limit`` to make each request a candidate of the process's
    global limit (memlimits.set_global_limit)."""

    def __init__(self, app, held=None, alloc=None, status=503,
                 global_limit=False):
        _some_limit("LimitMiddleware", held, alloc, global_limit)
        self.app = app
        self.held = _limit_size(held, "held")
        self.alloc = _limit_size(alloc, "alloc")
        self.status = _status_line(_http_status(status, True))
        self.global_limit = global_limit
        # Stacks at samples, for the log's "held by" of a stopped request.
        _capture_stacks()

    def _refuse(self, start_response, exc):
        body = b"memory limit exceeded\n"
        start_response(self.status,
                       [("Content-Type", "text/plain"),
                        ("Content-Length", str(len(body)))],
                       (type(exc), exc, exc.__traceback__))
        return [body]

    def __call__(self, environ, start_response):
        task = Task(held=self.held, alloc=self.alloc,
                    global_limit=self.global_limit)
        where = "%s %s" % (environ.get("REQUEST_METHOD", "?"),
                           environ.get("PATH_INFO", "?"))
        result = None
        try:
            with task:
                result = self.app(environ, start_response)
        except LimitExceeded as e:
            _log_stop(where, e)
            # An app that caught its MemoryError may still have returned
            # a response (Django's 500): the server never sees it, so its
            # close() (Django's request_finished) is called here.
            _close(result, task, where, self)
            return self._refuse(start_response, _forget_frames(e))
        return _Body(result, task, where, self, start_response)

    def _closing_task(self):
        # The task a stopped request's close() runs in: the request's
        # own cannot be entered again (a stopped task raises at once),
        # and outside any task a runaway teardown would be unlimited.
        # It gets the request's limits afresh.
        return Task(held=self.held, alloc=self.alloc,
                    global_limit=self.global_limit)


def _close(result, task, where, mw):
    """Call the response's close() (a generator's finally, Django's
    request_finished) once, inside the request's task, or, the task
    being stopped, inside a fresh one with the request's limits.  A stop
    there is logged and not raised: the response was answered."""
    close = getattr(result, "close", None)
    if close is None:
        return
    if task.status is not None:
        task = mw._closing_task()
    try:
        with task:
            close()
    except LimitExceeded as e:
        _log_stop(where + " close()", _forget_frames(e))
    except Exception:
        log.exception("memlimits: closing the response of %s", where)


class _Body:
    """The response iterable: each step a slice of the request's task,
    and so is its close().  The first chunk is fetched before the server
    sends the headers, so a stop there still gets the 503."""

    def __init__(self, result, task, where, mw, start_response):
        self._result = result
        self._it = None
        self._task = task
        self._where = where
        self._mw = mw
        self._start_response = start_response
        self._sent = False

    def __iter__(self):
        return self

    def __next__(self):
        try:
            with self._task:
                if self._it is None:
                    self._it = iter(self._result)
                chunk = next(self._it)
        except LimitExceeded as e:
            _log_stop(self._where, _forget_frames(e))
            if self._sent:
                self._result_close()
                raise StopIteration
            self._sent = True
            self._it = iter(self._mw._refuse(self._start_response, e))
            self._result_close()
            return next(self._it)
        self._sent = True
        return chunk

    def _result_close(self):
        result, self._result = self._result, ()
        _close(result, self._task, self._where, self._mw)

    def close(self):
        self._result_close()
