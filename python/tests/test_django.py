"""Django (Debian's 3.2) under real servers, through memlimits' middleware
as a Django user wraps it (django_app/wsgi.py and asgi.py, docs/python.md,
"Django"): under gunicorn (gthread) with the WSGI middleware and under
uvicorn (asyncio, h11) with the ASGI one.  A runaway view of each kind,
sync and async, gets 503, a streaming response that runs away is cut,
while ordinary requests of both kinds, each with
a query on a sqlite database, all get 200 from the workers that booted
first.  The servers, the load and the log waits are test_servers.py's;
times are reported (the measured fixture), never checked."""
import os
import re
import threading

import pytest

from test_servers import (Load, Server, get, gunicorn_argv, uvicorn_argv,
                          wait_for_log)

pytestmark = pytest.mark.skipif(bool(os.environ.get("ML_SKIP_SERVERS")),
                                reason=os.environ.get("ML_SKIP_SERVERS", ""))
MiB = 1 << 20
RUNAWAYS = ["/runaway", "/async-runaway"]
# The middleware's line per stopped request.
STOP = (r"memlimits: GET (/[\w-]+) stopped: held_limit \(limit 67108864, "
        r"held ~(\d+)")


def need_django():
    pytest.importorskip("django", reason="no Django (Debian: "
                        "python3-django)")
    pytest.importorskip("asgiref", reason="no asgiref (Debian: "
                        "python3-asgiref)")


def at_once(port, paths):
    """GET each of paths on a thread of its own, all started together:
    their (status, body, seconds) in paths' order."""
    out = [None] * len(paths)
    go = threading.Barrier(len(paths))

    def one(i):
        go.wait(timeout=60)
        try:
            out[i] = get(port, paths[i])
        except Exception as e:  # noqa: BLE001
            out[i] = (None, repr(e), None)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(len(paths))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def run_django(srv, booted):
    """The load and the runaways against a started server: ordinary sync
    views from 8 threads and async ones from 4 while a sync and an async
    runaway run at once, then one of each alone, then a streaming
    response whose iterator runs away; then 20 more ordinary
    requests of each kind.  Returns (runaways + [the streaming
    runaway], ordinary, stops, log)."""
    sync_load = Load(srv.port, 8, least=200, path="/").start()
    async_load = Load(srv.port, 4, least=60, path="/async").start()
    sync_load.wait_done(20)
    runaways = at_once(srv.port, RUNAWAYS)
    runaways += [get(srv.port, p) for p in RUNAWAYS]
    stream = get(srv.port, "/stream-runaway")
    ordinary = sync_load.stop() + async_load.stop()
    # The threads that ran the runaways serve on, in no stopped task.
    ordinary += [get(srv.port, p)[:2] for p in ["/", "/async"] * 20]
    stops = wait_for_log(srv, STOP, 5)
    log = srv.text()
    for pid in booted:
        os.kill(pid, 0)  # still there: raises if a worker went
    assert srv.alive(), log
    assert [r[0] for r in runaways] == [503] * 4, (runaways, log)
    assert all(r[1] == b"memory limit exceeded\n" for r in runaways), \
        runaways
    # The streaming response was cut after its start (its headers had
    # gone out): 200, its body ended where it was.
    assert stream[0] == 200 and stream[1].startswith(b"start\n.") and \
        b"not stopped" not in stream[1], (stream[:2], log)
    assert sorted(s[0] for s in stops) == sorted(
        RUNAWAYS * 2 + ["/stream-runaway"]), log
    # Django's own handling of the view's MemoryError does not run to
    # its end in a stopped task (settings.py sends django.request's
    # errors to the log): under WSGI it runs in the task and its
    # allocations fail, under ASGI sync_to_async hands it to a thread
    # pool in the stopped task, which is not entered.  The middleware's
    # line is the record, and nothing half-formatted is logged.
    # (Without the ASGI middleware's run_in_executor hook, Django logged
    # "Internal Server Error" with a traceback per middleware layer.)
    for word in ("Internal Server Error", "Logging error"):
        assert word not in log, log
    bad = [r for r in ordinary if r[0] != 200 or not r[1].startswith(b"ok ")]
    assert bad == [], (bad[:5], log)
    kinds = [r[1].split()[2] for r in ordinary]
    assert kinds.count(b"sync") >= 220 and kinds.count(b"async") >= 80, \
        (kinds.count(b"sync"), kinds.count(b"async"))
    pids = [int(r[1].split()[1]) for r in ordinary]
    assert set(pids) <= booted, (set(pids), booted)
    return runaways + [stream], ordinary, stops, log


def describe(runaways, ordinary, stops):
    return ("a sync and an async runaway at once 503 in %.2f, %.2f s, "
            "then one of each alone in %.2f, %.2f s; a streaming "
            "response's runaway iterator cut (200) in %.2f s; %d ordinary "
            "200 "
            "(%d sync, %d async views) at concurrency 12; held at the "
            "stops %s MiB"
            % tuple([r[2] for r in runaways] + [
                len(ordinary),
                sum(1 for r in ordinary if r[1].split()[2] == b"sync"),
                sum(1 for r in ordinary if r[1].split()[2] == b"async"),
                [round(int(s[1]) / MiB, 1) for s in stops]]))


def test_gunicorn_django(measured, tmp_path, monkeypatch):
    need_django()
    pytest.importorskip("gunicorn", reason="no gunicorn (Debian: gunicorn)")
    monkeypatch.setenv("DJANGO_APP_DB", str(tmp_path / "db.sqlite3"))
    argv = gunicorn_argv("django_app.wsgi:application")
    with Server(argv, str(tmp_path / "gunicorn.log")) as srv:
        booted = set(int(p) for p in wait_for_log(
            srv, r"Booting worker with pid: (\d+)", 2))
        runaways, ordinary, stops, log = run_django(srv, booted)
    # No worker restarted: the two booted at the start are the only ones.
    assert len(re.findall(r"Booting worker", log)) == 2, log
    for word in ("WORKER TIMEOUT", "Worker exiting", "was sent SIG"):
        assert word not in log, log
    pids = [int(r[1].split()[1]) for r in ordinary]
    measured("gunicorn gthread 2x4 + Django %s, WSGI middleware held "
             "64MiB: %s; per worker %s"
             % (__import__("django").get_version(),
                describe(runaways, ordinary, stops),
                sorted(pids.count(p) for p in set(pids))))


def test_uvicorn_django(measured, tmp_path, monkeypatch):
    need_django()
    pytest.importorskip("uvicorn", reason="no uvicorn (Debian: "
                        "python3-uvicorn)")
    monkeypatch.setenv("DJANGO_APP_DB", str(tmp_path / "db.sqlite3"))
    # uvicorn's lifespan left at its default, as a user runs it: Django
    # 3.2 refuses the lifespan scope and uvicorn goes on without it.
    # Lifespan at uvicorn's default, as a user runs it.
    argv = uvicorn_argv("django_app.asgi:application", lifespan="auto")
    with Server(argv, str(tmp_path / "uvicorn.log")) as srv:
        first = get(srv.port, "/")
        assert first[0] == 200, (first, srv.text())
        pid = int(first[1].split()[1])
        runaways, ordinary, stops, log = run_django(srv, {pid})
    assert "Traceback" not in log, log
    measured("uvicorn (asyncio, h11) + Django %s, ASGI middleware held "
             "64MiB: %s; one pid"
             % (__import__("django").get_version(),
                describe(runaways, ordinary, stops)))
