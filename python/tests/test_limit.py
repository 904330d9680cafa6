"""memlimits.limit / call / Task: the rules of docs/python.md, each
tested.  Sampled limits: the sample interval is 80 000 bytes, the seed
fixed by the runner (MEMLIMITS_SEED); each margin says its probability."""
import asyncio
import gc
import threading

import pytest

import memlimits

MiB = 1 << 20


def test_counting_on():
    caps = memlimits.capabilities()
    assert caps["counting"] in ("hooks", "preloaded"), caps


def test_parse_size():
    assert memlimits.parse_size(5) == 5
    assert memlimits.parse_size("50MiB") == 50 * MiB
    assert memlimits.parse_size("64k") == 64 << 10
    assert memlimits.parse_size("2G") == 2 << 30
    assert memlimits.parse_size(None) is None
    for bad in ("", "12 parsecs", "-1", -1, 1.5, True, "MiB"):
        with pytest.raises(ValueError):
            memlimits.parse_size(bad)


def test_held_limit_list_of_str():
    # The example.  The held estimate at the stop (before the
    # allocation refused) is under the limit and within 20 % of it: the
    # sd at 50 MiB is sqrt(50 MiB * S) = 2 MiB (4 %), and the allocation
    # refused is the list's storage growing by realloc (up to 7 MiB here),
    # which the library charges in full before the old block goes: the
    # issue's 10 % is missed by that (seeds 1, 2, 3, 37: 46.7, 46.2, 50.0,
    # 44.4 MiB).
    with pytest.raises(memlimits.LimitExceeded) as ei:
        with memlimits.limit(held="50MiB") as t:
            x = [str(i) for i in range(10**8)]  # noqa: F841
    e = ei.value
    assert isinstance(e, MemoryError)
    assert e.reason == "held_limit" and e.limit == 50 * MiB
    assert 0.8 * 50 * MiB <= e.held <= 50 * MiB, e
    assert t.status == "held_limit"
    # The interpreter carries on: a small block works, outside the block.
    y = [str(i) for i in range(10000)]
    assert len(y) == 10000


def test_alloc_limit_not_held():
    # Allocates and frees far more than it holds: stopped by the
    # allocation limit only (the held limit of 8 MiB is never near: the
    # loop holds one 1 MiB buffer at a time).
    with pytest.raises(memlimits.LimitExceeded) as ei:
        with memlimits.limit(held="8MiB", alloc="256MiB"):
            for i in range(10**6):
                b = bytearray(MiB)
                b[0] = i & 255
                del b
    assert ei.value.reason == "alloc_limit"
    assert ei.value.held < 8 * MiB
    # 256 MiB = 3356 samples: the stop is within 10 % (sd 1.7 %).
    assert abs(ei.value.allocated - 256 * MiB) < 0.1 * 256 * MiB


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
        memlimits.call(build, 10**8, held="16MiB")


def test_exception_inside_goes_through():
    with pytest.raises(KeyError):
        with memlimits.limit(held="16MiB"):
            {}["nope"]


def test_stopped_block_raises_even_if_swallowed():
    with pytest.raises(memlimits.LimitExceeded):
        with memlimits.limit(held="16MiB"):
            try:
                x = [str(i) for i in range(10**8)]  # noqa: F841
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
                x = [str(i) for i in range(10**8)]  # noqa: F841
            except MemoryError:
                pass
            raise ki
    assert t.status == "held_limit"


def test_nesting_inner_stopped():
    with memlimits.limit(held="512MiB") as outer:
        with pytest.raises(memlimits.LimitExceeded):
            with memlimits.limit(held="16MiB"):
                x = [str(i) for i in range(10**8)]  # noqa: F841
        y = [str(i) for i in range(1000)]
    assert outer.status is None and len(y) == 1000
    assert outer.allocated >= 16 * MiB * 0.8


def test_nesting_outer_stopped():
    with pytest.raises(memlimits.LimitExceeded) as ei:
        with memlimits.limit(held="16MiB") as outer:
            with memlimits.limit(held="512MiB") as inner:
                x = [str(i) for i in range(10**8)]  # noqa: F841
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
            x = [str(i) for i in range(10**8)]  # noqa: F841
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


def test_thread_started_inside_is_not_limited():
    out = []

    def other():
        out.append(len([str(i) for i in range(300000)]))  # ~20 MB

    with memlimits.limit(held="8MiB"):
        th = threading.Thread(target=other)
        th.start()
        th.join()
    assert out == [300000]


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


def test_heap_and_metrics(tmp_path):
    assert memlimits.heap() >= 0
    p = tmp_path / "m.txt"
    with open(p, "w") as f:
        memlimits.write_metrics(f)
    assert "memlimits_tasks_started_total" in p.read_text()
