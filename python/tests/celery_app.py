"""The Celery app of test_celery.py, imported by the test (to send tasks
and read results) and by the worker it starts (celery -A celery_app).

ML_CELERY_BROKER: the redis URL of the test's own redis-server (broker and
result backend).  ML_CELERY_INSTALL=1: memlimits.celery.install(app,
held="96MiB") over every task; else only the decorated tasks are limited.
"""
import os

from celery import Celery

import memlimits.celery

url = os.environ.get("ML_CELERY_BROKER", "redis://127.0.0.1:1/0")
app = Celery("celery_app", broker=url, backend=url)
app.conf.update(
    task_serializer="json", result_serializer="json",
    accept_content=["json"],
    task_acks_late=False, broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False, worker_redirect_stdouts=False)

INSTALLED = os.environ.get("ML_CELERY_INSTALL") == "1"


# 2e6 strings of 28 to 32 characters: about 170 MiB held at the end, over
# each limit below (32 and 96 MiB), and done (the count) where none is.
RUNAWAY = 2 * 10 ** 6


def _runaway(pid_file):
    # The pid of the process that ran away: the next task must run there.
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    keep = []
    for i in range(RUNAWAY):
        keep.append(str(10 ** 7 + i) * 4)
    return len(keep)


@app.task
def pid():
    return os.getpid()


@app.task
@memlimits.celery.limit(held="32MiB")
def runaway_held(pid_file):
    return _runaway(pid_file)


@app.task(bind=True)
@memlimits.celery.limit(held="64MiB", alloc="128MiB")
def churn(self, pid_file):
    # Holds 1 MiB at a time: only the allocation limit can stop it.
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    assert self.request.id
    n = 0
    for _ in range(10 ** 5):
        n += len(bytearray(1 << 20))
    return n


@app.task
def runaway_plain(pid_file):
    # Limited only where the app is installed.
    return _runaway(pid_file)


@app.task
@memlimits.celery.limit(held="32MiB")
def ordinary(n):
    return sum(len(str(i)) for i in range(n))


if INSTALLED:
    memlimits.celery.install(app, held="96MiB")
