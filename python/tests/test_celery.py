"""memlimits.celery (issue 43, item 3): the decorator and install() on
Debian's Celery, first in the test's own process (arguments, eager runs,
the exception's round trips), then under real workers (prefork, threads
and solo pools) on a redis-server of the test's own, on a free port,
killed at the end (and with the test, PR_SET_PDEATHSIG).  The app is
celery_app.py.  A runaway must end FAILURE with LimitExceeded and its
traceback in the result backend, and the worker process that ran it must
run the next task (same pid, the worker still up, no restart in its
log)."""
import ctypes
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

celery = pytest.importorskip("celery", reason="no celery (Debian: "
                             "python3-celery)")

import memlimits  # noqa: E402
import memlimits.celery  # noqa: E402
from memlimits import LimitExceeded  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20
# The hang limit of one result: a backstop that fails with a message.
HANG_S = 120
pytestmark = pytest.mark.skipif(bool(os.environ.get("ML_SKIP_SERVERS")),
                                reason=os.environ.get("ML_SKIP_SERVERS", ""))


def _app():
    # No broker is reached: eager runs and argument checks only.  Its
    # tasks are made with shared=False: a shared task (Celery's default)
    # of the same name made by another test would be this app's.
    return celery.Celery("t", broker="memory://", backend="cache+memory://")


def _grow():
    keep = []
    for i in range(2 * 10 ** 6):
        keep.append(str(10 ** 7 + i) * 4)
    return len(keep)


# -- in this process --------------------------------------------------

@pytest.mark.parametrize("kw,err,text", [
    ({}, ValueError, "no limit given"),
    ({"held": 0}, ValueError, "held=0"),
    ({"alloc": "abc"}, ValueError, "alloc: not a size"),
    ({"held": 1.5}, TypeError, "held: a size"),
    ({"held": "8MiB", "global_limit": 1}, TypeError, "global_limit"),
])
def test_bad_arguments(kw, err, text):
    with pytest.raises(err, match=text):
        memlimits.celery.limit(**kw)
    with pytest.raises(err, match=text):
        memlimits.celery.install(_app(), **kw)


def test_misuse_is_refused():
    app = _app()
    with pytest.raises(TypeError, match="takes sizes"):
        @memlimits.celery.limit
        def f():
            pass
    with pytest.raises(TypeError, match="goes under @app.task"):
        @memlimits.celery.limit(held="8MiB")
        @app.task(shared=False)
        def g():
            pass
    with pytest.raises(TypeError, match="a Celery app"):
        memlimits.celery.install(object(), held="8MiB")


def test_decorator_keeps_name_and_signature():
    app = _app()

    @app.task(shared=False)
    @memlimits.celery.limit(held="8MiB")
    def add(x, y=1):
        return x + y
    assert add.name.endswith(".add"), add.name
    assert add(2, y=3) == 5
    # Celery checks a call's arguments against the function's at delay():
    # refused here, before any message (without __signature__ it was
    # sent, the wrapper taking *args).
    with pytest.raises(TypeError):
        add.delay(1, 2, 3)


def test_eager_runaway_fails_with_limitexceeded():
    app = _app()

    @app.task(shared=False)
    @memlimits.celery.limit(held="16MiB")
    def runaway():
        return _grow()

    r = runaway.apply()
    assert r.state == "FAILURE"
    assert isinstance(r.result, LimitExceeded), r.result
    assert r.result.reason == "held_limit" and r.result.limit == 16 * MiB
    assert "LimitExceeded" in r.traceback


def test_install_limits_every_task_and_keeps_the_request():
    app = _app()

    @app.task(bind=True, shared=False)
    def runaway(self):
        assert self.request.id is not None
        return _grow()

    @app.task(bind=True, shared=False)
    def ident(self):
        return self.request.id

    memlimits.celery.install(app, held="16MiB")

    @app.task(shared=False)
    def later():
        return _grow()
    r = runaway.apply()
    assert r.state == "FAILURE" and isinstance(r.result, LimitExceeded), \
        r.traceback
    assert r.result.limit == 16 * MiB
    # A task registered after install(): the app finalized (as a worker
    # does) wraps it.
    r = later.apply()
    assert isinstance(r.result, LimitExceeded), r.traceback
    r = ident.apply(task_id="abc")
    assert r.result == "abc"
    memlimits.celery.uninstall(app)
    assert runaway.apply().result == 2 * 10 ** 6


def test_exception_round_trips():
    e = LimitExceeded("held_limit", 64 * MiB, 64 * MiB, 100 * MiB, "x")
    for again in (pickle.loads(pickle.dumps(e)),):
        assert type(again) is LimitExceeded
        assert (again.reason, again.limit, again.held, again.allocated,
                again.detail) == ("held_limit", 64 * MiB, 64 * MiB,
                                  100 * MiB, "x")
        assert str(again) == str(e)
    # Celery's JSON result backend stores the class name and the args and
    # calls the class with them (with the message alone as args this gave
    # a plain Exception).
    from celery.backends.base import Backend
    b = Backend(app=_app(), serializer="json")
    again = b.exception_to_python(b.prepare_exception(e))
    assert type(again) is LimitExceeded and again.limit == 64 * MiB
    assert str(again) == str(e)
    t = memlimits.celery.TaskLimitExceeded(*e.args)
    assert not isinstance(t, MemoryError) and str(t) == str(e)
    assert pickle.loads(pickle.dumps(t)).held == 64 * MiB


# -- real workers ------------------------------------------------------

def _die_with_parent():
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _stop(proc):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("no redis-server (Debian: redis-server)")
    pytest.importorskip("redis", reason="no redis client (Debian: "
                        "python3-redis)")
    import redis
    d = tmp_path_factory.mktemp("redis")
    # A free port may be taken between the probe and redis' bind: retried.
    for attempt in range(5):
        port = _free_port()
        log = open(d / "redis.log", "wb")
        proc = subprocess.Popen(
            [server, "--port", str(port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(d)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent)
        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + HANG_S
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)  # not ordering: the poll of redis' ping
        if proc.poll() is None and client.ping():
            break
        _stop(proc)
        log.close()
    else:
        pytest.fail("redis-server did not start: %s"
                    % (d / "redis.log").read_text())
    url = "redis://127.0.0.1:%d/0" % port
    try:
        yield url
    finally:
        _stop(proc)
        log.close()


@pytest.fixture(scope="module")
def tasks(redis_url):
    os.environ["ML_CELERY_BROKER"] = redis_url
    sys.path.insert(0, HERE)
    try:
        import celery_app
    finally:
        sys.path.remove(HERE)
    assert celery_app.url == redis_url
    return celery_app


class Worker:
    def __init__(self, tasks, pool, install, log_path):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [HERE] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                      if p])
        env["ML_CELERY_INSTALL"] = "1" if install else "0"
        # One child under prefork: the next task runs in the process that
        # ran away or in none.  Four threads: ordinary tasks run beside a
        # runaway.
        conc = {"prefork": "1", "threads": "4", "solo": "1"}[pool]
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "celery_app", "worker",
             "-P", pool, "-c", conc, "-l", "info", "--without-heartbeat",
             "--without-gossip", "--without-mingle",
             "-n", "ml-%s-%d@%%h" % (pool, install)],
            env=env, cwd=os.path.dirname(log_path), stdin=subprocess.DEVNULL,
            stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent)

    def text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode(errors="replace")

    def close(self):
        _stop(self.proc)
        self.log.close()


def _failure(result):
    with pytest.raises(Exception) as info:
        result.get(timeout=HANG_S)
    return info.value


@pytest.mark.parametrize("install", [True, False],
                         ids=["install", "decorator"])
@pytest.mark.parametrize("pool", ["prefork", "threads", "solo"])
def test_worker(tasks, pool, install, tmp_path, measured):
    # Left by an earlier worker of the same app: not this one's.
    tasks.app.control.purge()
    w = Worker(tasks, pool, install, str(tmp_path / "worker.log"))
    try:
        pid0 = tasks.pid.delay().get(timeout=HANG_S)
        pid_file = str(tmp_path / "pid")
        cases = [("runaway_held", "held_limit", 32 * MiB),
                 ("churn", "alloc_limit", 128 * MiB)]
        if install:
            cases.append(("runaway_plain", "held_limit", 96 * MiB))
        for name, reason, lim in cases:
            os.unlink(pid_file) if os.path.exists(pid_file) else None
            t0 = time.monotonic()
            r = getattr(tasks, name).delay(pid_file)
            exc = _failure(r)
            measured("celery %s %s %s: %s after %.2f s, held ~%.1f MiB"
                     % (pool, "install" if install else "decorator", name,
                        type(exc).__name__, time.monotonic() - t0,
                        getattr(exc, "held", 0) / MiB))
            assert r.state == "FAILURE"
            assert isinstance(exc, LimitExceeded), (repr(exc), r.traceback)
            assert (exc.reason, exc.limit) == (reason, lim)
            # The traceback in the result backend: where it stopped.
            assert "memlimits.LimitExceeded: memlimits: %s" \
                % reason.replace("_", " ") in r.traceback, r.traceback
            with open(pid_file) as f:
                ran_in = int(f.read())
            assert ran_in == pid0
            assert tasks.pid.delay().get(timeout=HANG_S) == pid0
        if not install:
            # The same runaway with no limit: done (the test's "before").
            assert tasks.runaway_plain.delay(pid_file).get(
                timeout=HANG_S) == tasks.RUNAWAY
        # Ordinary tasks beside a runaway (at once under threads): all
        # succeed.
        r = tasks.runaway_held.delay(pid_file)
        ordinary = [tasks.ordinary.delay(2000) for _ in range(16)]
        assert isinstance(_failure(r), LimitExceeded)
        assert [o.get(timeout=HANG_S) for o in ordinary] == [6890] * 16
        assert w.proc.poll() is None, w.text()
        text = w.text()
        # Celery ends a worker whose task failed with a MemoryError
        # ("Process got: ..."); a pool replaces a child that died.
        for bad in ("Process got", "Unrecoverable error", "WorkerLostError",
                    "exited with"):
            assert bad not in text, text
        assert pid0 == tasks.pid.delay().get(timeout=HANG_S)
    finally:
        w.close()
