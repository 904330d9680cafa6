"""memlimits.limit / call / Task: the rules of docs/python.md, each
tested.  Sampled limits: the sample interval is 80 000 bytes, the seed
fixed by the runner (MEMLIMITS_SEED); each margin says its probability."""
import json
import os
import subprocess
import sys
import threading

import pytest

import memlimits

MiB = 1 << 20
# The size class of str(i) for i < 10**6: 64 bytes up to 3.11, 48 from
# 3.12 on (PEP 623 took the wstr fields out of str).
STR_CLASS = (sys.getsizeof(str(123456)) + 15) // 16 * 16
# The runaways below make 10**7 strings (about 640 MB, ten times and more
# each limit here), not more: one a limit fails to stop is a failed check,
# not a machine out of memory.


def test_counting_on():
    caps = memlimits.capabilities()
    assert caps["counting"] in ("hooks", "preloaded"), caps


_FIRST_LIMIT = r"""
import json, memlimits
out = {"at_import": memlimits.capabilities()["wrapped"]}
before = [str(i) for i in range(200000)]  # CPython's own allocators
with memlimits.limit(held="1GiB") as t:
    del before  # freed through the wrappers, never noted: nothing held
    keep = [str(i) for i in range(100000)]
out["after"] = memlimits.capabilities()["wrapped"]
out["held"] = t.held
print(json.dumps(out))
"""


def test_wrappers_from_the_first_limit():
    # No limit yet: CPython's allocators as they are (a wrapper costs
    # its inlined pymalloc, docs/python.md).  From the first limit on,
    # wrapped; the objects made before are freed through the wrappers.
    r = subprocess.run([sys.executable, "-c", _FIRST_LIMIT],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["at_import"] is False and out["after"] is True, out
    # Held: the 100 000 strs (STR_CLASS bytes each: 7.2 MB in all on
    # 3.11) and the list (0.8 MB), within 5.5 sd (sqrt(7.2 MB * S) =
    # 0.76 MB: P < 4e-8); the 200 000 freed before the block's end count
    # nothing either way.
    want = 100000 * STR_CLASS + 0.8e6
    assert abs(out["held"] - want) < 5.5 * 0.76e6, (out, want)


def test_parse_size():
    assert memlimits.parse_size(5) == 5
    assert memlimits.parse_size("50MiB") == 50 * MiB
    assert memlimits.parse_size("64k") == 64 << 10
    assert memlimits.parse_size("2G") == 2 << 30
    assert memlimits.parse_size(None) is None
    for bad in ("", "12 parsecs", "-1", -1, "MiB",
                "\u0663\u0664", "\uff13\uff14", "\u0663\u0664KiB"):
        with pytest.raises(ValueError):
            memlimits.parse_size(bad)
    for bad in (1.5, True, b"64k"):
        with pytest.raises(TypeError):
            memlimits.parse_size(bad)


# The two examples, each in a child of its own per seed (the
# sampler's seed is read at start: MEMLIMITS_SEED), so that each is the
# same process whatever ran before.  The child prints one line per case.
_EXAMPLES = r"""
import json, memlimits
MiB = 1 << 20
out = {}
try:
    with memlimits.limit(held="50MiB") as t:
        x = [str(i) for i in range(10**7)]
except memlimits.LimitExceeded as e:
    out["held"] = [e.reason, e.limit, e.held, e.allocated, t.status,
                   isinstance(e, MemoryError)]
out["after_held"] = len([str(i) for i in range(10000)])
try:
    with memlimits.limit(held="8MiB", alloc="256MiB") as t:
        for i in range(10**6):
            b = bytearray(MiB)
            b[0] = i & 255
            del b
except memlimits.LimitExceeded as e:
    out["alloc"] = [e.reason, e.limit, e.held, e.allocated, t.status,
                    isinstance(e, MemoryError)]
out["after_alloc"] = len([str(i) for i in range(10000)])
print(json.dumps(out))
"""

# 16 fixed seeds (the runner's 37 among them).
SEEDS = [37] + list(range(101, 116))


@pytest.fixture(scope="module")
def examples():
    res = {}
    for seed in SEEDS:
        env = dict(os.environ, MEMLIMITS_SEED=str(seed))
        r = subprocess.run([sys.executable, "-c", _EXAMPLES], env=env,
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (seed, r.stderr[-2000:])
        res[seed] = json.loads(r.stdout)
    return res


def stopped(seed, out, kind, lim):
    # out[kind]'s stop: by the kind's limit of lim, a MemoryError; its
    # (held, allocated) estimates.
    reason, limit, held, allocated, status, is_mem = out[kind]
    want = kind + "_limit"
    assert (reason, limit, status, is_mem) == \
        (want, lim, want, True), (seed, out)
    return held, allocated


def test_held_limit_list_of_str(examples):
    # The example: stopped by the held limit, the estimate at the
    # stop within 10 % of 50 MiB, for each seed.  It is below the limit by
    # what the allocation refused adds: one sample (78 KiB) for an object,
    # for the list's storage growing by realloc what that changes (the new
    # block's samples less the old one's: lib/tasks/held.c).  Below 45 MiB
    # only when the storage's growth carries 66 samples more than the
    # estimate's distance to the limit: with H' the samples of the strs
    # (55 bytes or less: pymalloc's 64-byte class), Y the old storage's
    # and X the new one's (independent Poisson), P(H' + Y <= 589 and
    # H' + X >= 656) summed over the list's reallocs is 3.1e-8 a seed,
    # 5e-7 for the 16 seeds.  With the old block counted
    # too (before the fix), these seeds gave 44.2 to 50.0 MiB (102: 44.2).
    lim = 50 * MiB
    for seed, out in examples.items():
        held, _ = stopped(seed, out, "held", lim)
        assert abs(held - lim) <= 0.1 * lim, \
            "seed %d: held %.1f MiB at the stop" % (seed, held / MiB)
        # The interpreter carries on: a small block works, outside it.
        assert out["after_held"] == 10000


def test_alloc_limit_not_held(examples):
    # Allocates and frees far more than it holds: stopped by the
    # allocation limit only.  The held limit of 8 MiB is never near: one
    # 1 MiB buffer at a time, which would need 105 samples (Poisson mean
    # 13: P < 1e-50).  The estimate at the stop is the k-th sample
    # (k = 3356) plus the rest of the buffer that carried it (1 MiB, 13
    # samples on average): within 10 % of 256 MiB for every seed.
    lim = 256 * MiB
    for seed, out in examples.items():
        held, allocated = stopped(seed, out, "alloc", lim)
        assert held < 8 * MiB, (seed, out)
        assert abs(allocated - lim) <= 0.1 * lim, \
            "seed %d: allocated %.1f MiB at the stop" % (seed,
                                                         allocated / MiB)
        assert out["after_alloc"] == 10000


def test_not_stopped_returns_estimates():
    with memlimits.limit(held="64MiB") as t:
        x = [bytes(1000) for _ in range(10000)]
    assert t.status is None
    # 10 MB held: the estimate within 6 sd (sd sqrt(10 MB * S) = 0.9 MB).
    assert abs(t.held - 10000 * 1033) < 6 * 0.9e6, t.held
    del x


def test_call():
    def build(n):
        return [str(i) for i in range(n)]
    assert len(memlimits.call(build, 1000, held="16MiB")) == 1000
    with pytest.raises(memlimits.LimitExceeded):
        memlimits.call(build, 10**7, held="16MiB")


def test_exception_inside_goes_through():
    with pytest.raises(KeyError):
        with memlimits.limit(held="16MiB"):
            {}["nope"]


def test_stopped_block_raises_even_if_swallowed():
    with pytest.raises(memlimits.LimitExceeded):
        with memlimits.limit(held="16MiB"):
            try:
                x = [str(i) for i in range(10**7)]  # noqa: F841
            except MemoryError:
                pass


def test_keyboard_interrupt_goes_through():
    with pytest.raises(KeyboardInterrupt):
        with memlimits.limit(held="16MiB") as t:
            raise KeyboardInterrupt
    assert t.status is None


@pytest.mark.xfail(reason="inside a stopped block every allocation fails "
                   "except while an exception propagates: an except "
                   "clause's own allocations fail, and a KeyboardInterrupt "
                   "may come out as LimitExceeded (docs/python.md)",
                   strict=False)
def test_keyboard_interrupt_from_stopped_block():
    # Made before: inside a stopped block
    # every allocation fails, a new exception object's too.
    ki = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        with memlimits.limit(held="16MiB") as t:
            try:
                x = [str(i) for i in range(10**7)]  # noqa: F841
            except MemoryError:
                pass
            raise ki
    assert t.status == "held_limit"


def test_nesting_inner_stopped():
    with memlimits.limit(held="512MiB") as outer:
        with pytest.raises(memlimits.LimitExceeded):
            with memlimits.limit(held="16MiB"):
                x = [str(i) for i in range(10**7)]  # noqa: F841
        y = [str(i) for i in range(1000)]
    assert outer.status is None and len(y) == 1000
    assert outer.allocated >= 16 * MiB * 0.8


def test_nesting_outer_stopped():
    with pytest.raises(memlimits.LimitExceeded) as ei:
        with memlimits.limit(held="16MiB") as outer:
            with memlimits.limit(held="512MiB") as inner:
                x = [str(i) for i in range(10**7)]  # noqa: F841
    assert outer.status == "held_limit" and inner.status is None
    assert ei.value.limit == 16 * MiB


def test_task_reentered_on_one_thread():
    t = memlimits.Task(held="16MiB")
    with t:
        with pytest.raises(RuntimeError):
            with t:
                pass


def test_stopped_task_refuses_entry():
    t = memlimits.Task(held="16MiB")
    with pytest.raises(memlimits.LimitExceeded):
        with t:
            x = [str(i) for i in range(10**7)]  # noqa: F841
    with pytest.raises(memlimits.LimitExceeded):
        with t:
            pass


def test_task_across_threads():
    # Four threads, 8 MiB each in one task of 24 MiB held: together over.
    t = memlimits.Task(held="24MiB")
    barrier = threading.Barrier(4)
    results = []

    def work():
        keep = None
        try:
            with t:
                barrier.wait(timeout=120)  # a backstop, not an order
                keep = [bytes(1000) for _ in range(8 * 1024)]
            results.append("ok")
        except memlimits.LimitExceeded:
            results.append("stopped")
        finally:
            # Each keeps its blocks until all four are done.
            barrier.wait(timeout=120)
            del keep

    ths = [threading.Thread(target=work) for _ in range(4)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    assert t.status == "held_limit"
    assert "stopped" in results


@pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_thread_started_inside_runs_inside():
    # The thread's 20 MB count for the block (test_threads.py has the
    # runaways and the ways out): its allocations fail (MemoryError in
    # its code), and its run ends with LimitExceeded (not caught here).
    out = []

    def other():
        try:
            out.append(len([str(i) for i in range(300000)]))  # ~20 MB
        except MemoryError as e:
            out.append(type(e).__name__)

    with pytest.raises(memlimits.LimitExceeded):
        with memlimits.limit(held="8MiB"):
            th = threading.Thread(target=other)
            th.start()
            th.join()
    assert out == ["MemoryError"]


def test_generator_follows_the_thread():
    def gen():
        for i in range(300000):
            yield str(i)

    with memlimits.limit(held="8MiB") as t:
        g = gen()
    # Consumed outside the block: not charged to it.
    data = list(g)
    assert len(data) == 300000 and t.status is None
    assert t.held < 4 * MiB


def test_global_limit_roundtrip():
    old = memlimits.global_limit()
    try:
        memlimits.set_global_limit("64GiB")
        assert memlimits.global_limit() == 64 << 30
    finally:
        memlimits.set_global_limit(old)


def test_global_limit_counts_every_thread():
    # Outside any task, objects are noted only while a global limit is
    # set (the heap it reads): then 300 000 strs (STR_CLASS each, 19 MB,
    # and the list's 2.4 MB) made on a thread in no task count in heap().
    # The meter is exact up to its batches (32 KiB a thread).
    old = memlimits.global_limit()
    try:
        with memlimits.Task():
            pass  # the wrappers are in
        memlimits.set_global_limit("64GiB")
        h0 = memlimits.heap()
        x = [str(i) for i in range(300000)]
        grown = memlimits.heap() - h0
        assert grown >= 300000 * STR_CLASS, grown
        del x
    finally:
        memlimits.set_global_limit(old)


def test_heap_and_metrics(tmp_path):
    assert memlimits.heap() >= 0
    p = tmp_path / "m.txt"
    with open(p, "w") as f:
        memlimits.write_metrics(f)
    assert "memlimits_tasks_started_total" in p.read_text()
