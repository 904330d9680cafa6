"""The WSGI app test_deploy.py runs under gunicorn with
examples/python/gunicorn.conf.py: no memlimits in the app's own code
(the configuration adds the middleware).  ``/`` is an ordinary request,
answered "ok PID PRELOADED"; ``/runaway`` keeps Python strings;
``/c-runaway`` keeps blocks from C's malloc (through ctypes), which the
preloaded library sees, and the patched objects' references reach without
the preload (docs/python.md)."""
import ctypes
import os

MiB = 1 << 20
# Where a runaway that was not stopped gives up (eight times the test's
# 64 MiB limit) and answers 200: a failed check, not a machine out of
# memory.
GIVE_UP = 512 * MiB

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]


def _answer(start_response, status, text):
    body = text.encode()
    start_response(status, [("Content-Type", "text/plain"),
                            ("Content-Length", str(len(body)))])
    return [body]


def _python_runaway():
    keep = []
    while len(keep) * 48 < GIVE_UP:
        keep.append(str(len(keep)) * 8)
    return "not stopped\n"


def _c_runaway():
    # A C extension's way: blocks from malloc, each touched.  A NULL is
    # the stop (the FAIL delivery); MemoryError says so to the middleware
    # as Python code would.
    blocks = []
    try:
        while len(blocks) * MiB < GIVE_UP:
            p = libc.malloc(MiB)
            if not p:
                raise MemoryError("malloc returned NULL")
            libc.memset(p, 1, MiB)
            blocks.append(p)
        return "not stopped\n"
    finally:
        for p in blocks:
            libc.free(p)


def application(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if path == "/runaway":
        return _answer(start_response, "200 OK", _python_runaway())
    if path == "/c-runaway":
        return _answer(start_response, "200 OK", _c_runaway())
    import memlimits
    pre = memlimits.capabilities()["preloaded"]
    return _answer(start_response, "200 OK",
                   "ok %d %d\n" % (os.getpid(), int(pre)))
