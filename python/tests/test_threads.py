"""Threads and pools started inside a block run inside its task (issue
42, item 3): threading.Thread.start, concurrent.futures'
ThreadPoolExecutor and multiprocessing.pool's ThreadPool; opting out with
memlimits.inherit_threads(False) or thread.memlimits_inherit = False.
Each case in a child process of its own, so that its peak (VmHWM) is its
own: under twice the limit.  Runaways make 10**7 strings at most."""
import json
import os
import subprocess
import sys

import pytest

MiB = 1 << 20

_CHILD = r"""
import json, sys, threading, memlimits
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.pool import ThreadPool

def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) << 10

def runaway():
    keep = [str(i) for i in range(10 ** 7)]
    return len(keep)

def bounded():
    # 300 000 strs (about 20 MB) and their list, then let go.
    keep = [str(i) for i in range(300000)]
    return len(keep)

errors = []
threading.excepthook = lambda a: errors.append(a.exc_type.__name__)
case = sys.argv[1]
out = {}
h0 = hwm()
outside_pool = ThreadPoolExecutor(2)
t = memlimits.limit(held="32MiB")
try:
    with t:
        if case == "thread":
            th = threading.Thread(target=runaway)
            th.start()
            th.join()
        elif case == "executor":
            with ThreadPoolExecutor(2) as ex:
                f = ex.submit(runaway)
                out["future"] = type(f.exception()).__name__
        elif case == "executor_made_outside":
            out["future"] = type(
                outside_pool.submit(runaway).exception()).__name__
        elif case == "threadpool":
            with ThreadPool(2) as p:
                try:
                    p.apply(runaway)
                except MemoryError as e:
                    out["apply"] = type(e).__name__
        elif case == "opt_out_all":
            memlimits.inherit_threads(False)
            th = threading.Thread(target=bounded)
            th.start()
            th.join()
            out["future"] = outside_pool.submit(bounded).result()
            memlimits.inherit_threads(True)
        elif case == "opt_out_one":
            th = threading.Thread(target=bounded)
            th.memlimits_inherit = False
            th.start()
            th.join()
    out["stopped"] = False
except memlimits.LimitExceeded:
    out["stopped"] = True
out["status"] = t.status
out["held"] = t.held
out["peak"] = hwm() - h0
out["thread_errors"] = errors
print(json.dumps(out))
"""


def _child(case):
    env = dict(os.environ, MEMLIMITS_SEED="37")
    r = subprocess.run([sys.executable, "-c", _CHILD, case],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("case", ["thread", "executor",
                                  "executor_made_outside", "threadpool"])
def test_started_inside_runs_inside(case, measured):
    # Before: each ran to its end, +958 MiB under a 64 MiB limit, the
    # block untouched.
    out = _child(case)
    assert out["stopped"] and out["status"] == "held_limit", out
    assert out["peak"] < 2 * 32 * MiB, out
    if case == "thread":
        assert out["thread_errors"] == ["LimitExceeded"], out
    if case.startswith("executor"):
        assert out["future"] == "LimitExceeded", out
    if case == "threadpool":
        assert out["apply"] == "LimitExceeded", out
    measured("a runaway in a %s started inside held=32MiB: the block "
             "stopped, peak +%.1f MiB" % (case, out["peak"] / MiB))


@pytest.mark.parametrize("case", ["opt_out_all", "opt_out_one"])
def test_opting_out(case):
    # 20 MB on the other threads, none of it the block's (its own
    # allocations: a few kB), under its 32 MiB limit either way.
    out = _child(case)
    assert not out["stopped"] and out["status"] is None, out
    assert out["held"] < MiB, out
    assert out["thread_errors"] == [], out
