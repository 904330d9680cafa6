"""Python's frames in held profiles (issue 43, item 6): the profile at a
block's stop names the Python functions ("file:function", ":line" after
the innermost one) that held
the memory, between the C frames; LimitExceeded.held_by and the
middlewares' log lines name them; memlimits flamegraph --held draws them.
No statistics: a runaway of 64 MiB under a 16 MiB held limit is sampled
hundreds of times at the default interval."""
import asyncio
import inspect
import logging
import os
import re
import subprocess

import pytest

import memlimits
from memlimits import _memlimits

pytestmark = pytest.mark.skipif(
    not memlimits.capabilities().get("python_frames"),
    reason="Python frames are read on CPython 3.11 only (src/frames.c)")

HERE = os.path.abspath(__file__)
if HERE.endswith("c"):
    HERE = HERE[:-1]


def load_rows(rows):
    while len(rows) < 10**7:
        rows.append("row %d of the table" % len(rows))  # the runaway line


def cache_everything():
    rows = []
    load_rows(rows)
    return rows


def line_of(fn, text):
    src, first = inspect.getsourcelines(fn)
    for i, line in enumerate(src):
        if text in line:
            return first + i
    raise AssertionError(text)


LOAD = "%s:load_rows:%d" % (HERE, line_of(load_rows, "the runaway line"))
# Callers are named without their line: one stack per calling function,
# not per calling line, so that the library's fixed table of stacks holds
# a long-running program's.
CACHE = "%s:cache_everything" % HERE


@pytest.fixture
def stop_file(tmp_path):
    path = tmp_path / "stop.prof"
    was = memlimits.profile_at_stop(path)
    yield path
    memlimits.profile_at_stop(was)


def lines_of(profile):
    out = []
    for line in profile.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        stack, _, n = line.rpartition(" ")
        out.append((stack.split(";"), int(n)))
    return out


def test_profile_at_stop_names_the_python_functions(stop_file):
    with pytest.raises(memlimits.LimitExceeded) as info:
        with memlimits.limit(held="16MiB"):
            cache_everything()
    text = stop_file.read_text()
    head = text.splitlines()[:5]
    assert head[0] == "# memlimits held at the stop"
    assert "# pid %d" % os.getpid() in head
    assert "# held_limit %d" % (16 << 20) in text
    lines = lines_of(text)
    total = sum(n for _, n in lines)
    held = int(re.search(r"^# held_bytes (\d+)$", text, re.M).group(1))
    assert total == held > 0
    # Most of it was appended by load_rows called from cache_everything:
    # caller first (profiles are root first), a C frame of the
    # interpreter's inside load_rows, and C frames under the outermost.
    py = re.compile(memlimits._PY_FRAME)
    ours = 0
    for frames, n in lines:
        if LOAD in frames and CACHE in frames:
            i, j = frames.index(CACHE), frames.index(LOAD)
            assert i < j, frames
            assert j + 1 < len(frames), "no C frame inside load_rows"
            assert not py.search(frames[j + 1]), frames
            assert any(not py.search(f) for f in frames[:i]), frames
            # Only the innermost Python frame has its line.
            assert not any(re.search(r"\.py:[^;:]*:\d+$", f)
                           for f in frames[:j]), frames
            ours += n
    assert ours >= 0.9 * total, (ours, total, text[:2000])
    # The eval loop's own C frame is where the Python frames stand.
    assert "_PyEval_EvalFrameDefault" not in text
    exc = info.value
    assert exc.held_by and exc.held_by[0][0] == "%s < %s" % (LOAD, CACHE)
    assert exc.held_by[0][1] >= 0.9 * total


def test_flamegraph_draws_them(stop_file, tmp_path):
    cmd = os.environ.get("ML_PY_MEMLIMITS")
    if not cmd:
        pytest.skip("no memlimits command (ML_PY_MEMLIMITS)")
    with pytest.raises(memlimits.LimitExceeded):
        with memlimits.limit(held="16MiB"):
            cache_everything()
    svg = tmp_path / "stop.svg"
    subprocess.run([cmd, "flamegraph", "--held", str(stop_file), "-o",
                    str(svg)], check=True)
    pic = svg.read_text()
    assert "held at the stop" in pic
    assert "load_rows" in pic and "cache_everything" in pic


def test_each_stop_writes_the_file_anew(stop_file):
    def other_runaway():
        keep = []
        while True:
            keep.append(bytearray(1000))
    with pytest.raises(memlimits.LimitExceeded):
        with memlimits.limit(held="16MiB"):
            cache_everything()
    with pytest.raises(memlimits.LimitExceeded):
        with memlimits.limit(held="8MiB"):
            other_runaway()
    text = stop_file.read_text()
    assert text.count("# memlimits held at the stop") == 1
    assert "other_runaway" in text and "load_rows" not in text
    assert "# held_limit %d" % (8 << 20) in text
    assert not [p for p in os.listdir(stop_file.parent) if ".tmp" in p]


def test_bad_paths():
    with pytest.raises(TypeError, match="path"):
        memlimits.profile_at_stop(3)
    with pytest.raises(ValueError, match="path"):
        memlimits.profile_at_stop("")
    assert memlimits.profile_at_stop(None) is None


def test_wsgi_log_names_the_frames(caplog):
    from memlimits.wsgi import LimitMiddleware
    caplog.set_level(logging.WARNING, logger="memlimits")

    def app(environ, start_response):
        cache_everything()

    mw = LimitMiddleware(app, held="16MiB")
    statuses = []
    body = mw({"REQUEST_METHOD": "GET", "PATH_INFO": "/rows"},
              lambda status, headers, exc_info=None: statuses.append(status))
    assert statuses == ["503 Service Unavailable"] and body
    line = [r.getMessage() for r in caplog.records
            if "stopped" in r.getMessage()]
    assert len(line) == 1
    assert "GET /rows stopped" in line[0]
    assert "held by %s < %s (" % (LOAD, CACHE) in line[0], line[0]


def test_asgi_log_names_the_frames(caplog):
    from memlimits.asgi import LimitMiddleware
    caplog.set_level(logging.WARNING, logger="memlimits")

    async def app(scope, receive, send):
        cache_everything()

    mw = LimitMiddleware(app, held="16MiB")
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(mw({"type": "http", "method": "POST", "path": "/load",
                    "query_string": b"", "headers": []}, receive, send))
    assert sent[0]["status"] == 503
    line = [r.getMessage() for r in caplog.records
            if "stopped" in r.getMessage()]
    assert len(line) == 1 and "POST /load stopped" in line[0]
    assert "held by %s < %s (" % (LOAD, CACHE) in line[0], line[0]


def test_threads_name_their_own_frames():
    # A thread in the task: the frames of what it held are its own
    # chain's (threading's bootstrap, worker), not those of the thread
    # that started it.
    import threading
    _memlimits.set_stack_capture(True)
    kept = []
    task = memlimits.Task(held="16MiB")

    def worker():
        try:
            with task:
                load_rows(kept)
        except memlimits.LimitExceeded:
            pass
    t = threading.Thread(target=worker)
    t.memlimits_inherit = False
    t.start()
    t.join()
    assert task.status == "held_limit"
    text = _memlimits.held_profile(task).decode()
    rows = [line for line in text.splitlines() if LOAD in line]
    assert rows
    for line in rows:
        frames = line.rpartition(" ")[0].split(";")
        assert any(f.endswith(".worker") for f in frames), line
        assert any(f.endswith("._bootstrap") for f in frames), line
        assert not any(f.endswith(":test_threads_name_their_own_frames")
                       for f in frames), line
    del kept[:]
