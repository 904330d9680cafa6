# gunicorn configuration that puts a memory limit on every request of any
# WSGI app (Flask, Django, ...), without a change to the app's code.
#
#   LD_PRELOAD=libmemlimits.so.0 gunicorn -c gunicorn.conf.py myproject.wsgi
#
# The preload is optional: without it each request's Python allocations
# are limited; with it, also what C extensions get from malloc (PIL's
# pixels, libxml2's trees: docs/python.md, "Deployment").  The limits are
# read from the environment so that a unit file or a container can set
# them: MEMLIMITS_REQUEST_HELD (default 256MiB) and MEMLIMITS_REQUEST_ALLOC
# (default none), in the units of memlimits run (64MiB, 1.5G).
import os

bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "2"))
# Threads: a stopped request ends on its own thread; the worker's other
# requests carry on, so there is no need to recycle workers for memory
# (max_requests stays at gunicorn's default, off).
worker_class = "gthread"
threads = int(os.environ.get("GUNICORN_THREADS", "4"))
graceful_timeout = 10


def post_worker_init(worker):
    # Runs in each worker after the app is loaded and before it serves:
    # wrap the loaded app in the middleware.  A limit that cannot be read
    # fails the worker's start with memlimits' ValueError, naming the
    # setting, instead of serving without a limit.
    import memlimits.wsgi

    held = os.environ.get("MEMLIMITS_REQUEST_HELD", "256MiB")
    alloc = os.environ.get("MEMLIMITS_REQUEST_ALLOC") or None
    worker.wsgi = memlimits.wsgi.LimitMiddleware(worker.wsgi, held=held,
                                                 alloc=alloc)
