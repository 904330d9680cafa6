"""A stopped block stops (issue 42, item 2): whatever builds its objects
("%" and str.format, whose strings CPython finishes with a shrinking
realloc, f-strings, str()), and however it treats MemoryError (a block
that catches each one and goes on keeps at most the refusal guard's
grace, 1 MiB, past its stop).  Each case in a child process of its own,
so that its peak (VmHWM) is its own: under twice the limit.  Sampled
limits: the sample interval is 80 000 bytes, the seed fixed (37, for
each child: MEMLIMITS_SEED)."""
import json
import os
import subprocess
import sys

import pytest

MiB = 1 << 20

_PRELUDE = r"""
import json, sys, memlimits
def hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM"):
                return int(line.split()[1]) << 10
"""

# Five blocks one after the other, each with held=64MiB and 10**7
# strings at most (640 MB and more: ten times the limit).  A block that
# ran on is one whose loop ended: n == N.
_FORMAT = _PRELUDE + r"""
kind = sys.argv[1]
N = 10 ** 7
out = []
h0 = hwm()
for block in range(5):
    n = 0
    t = memlimits.limit(held="64MiB")
    try:
        with t:
            keep = []
            for i in range(N):
                if kind == "percent":
                    keep.append("string number %d" % i)
                elif kind == "format":
                    keep.append("{}".format(i))
                elif kind == "fstring":
                    keep.append(f"string number {i}")
                else:
                    keep.append(str(i))
                n = i + 1
        out.append({"n": n, "stopped": False})
    except memlimits.LimitExceeded as e:
        out.append({"n": n, "stopped": True, "held": e.held,
                    "peak": hwm() - h0})
    keep = None
print(json.dumps(out))
"""


def _child(code, *args, seed="37"):
    env = dict(os.environ, MEMLIMITS_SEED=seed)
    r = subprocess.run([sys.executable, "-c", code] + list(args),
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.parametrize("kind", ["percent", "format", "fstring", "str"])
def test_string_loops_stop(kind, measured):
    # Before: "%" and str.format ran on after the stop in 18 of 22
    # blocks (the writer's buffer came from a pool of an arena pymalloc
    # made before the import, unseen; the realloc that finished each
    # string moved it into an arena after the old block was gone, where
    # a refusal could not be undone).
    out = _child(_FORMAT, kind)
    limit = 64 * MiB
    for b in out:
        assert b["stopped"] and b["n"] < 10 ** 7, (kind, out)
        # The held estimate at the stop crosses the limit by at most a
        # sample's weight; the true held is within 4 sd of it (sd
        # sqrt(64 MiB * 80 kB) = 2.3 MB, 3.6 %): 15 % is 4 sd, and the
        # peak adds the interpreter's own few MiB.
        assert abs(b["held"] - limit) <= 0.15 * limit, (kind, b)
        assert b["peak"] < 2 * limit, (kind, b)
    measured("%s loop under held 64MiB: stopped in 5 of 5 blocks, after "
             "%s strings, held at the stops %s MiB, peak +%.1f MiB"
             % (kind, [b["n"] for b in out],
                [round(b["held"] / MiB, 1) for b in out],
                max(b["peak"] for b in out) / MiB))


# Every MemoryError caught, the loop goes on: a bounded amount kept past
# the stop, and the block still ends with LimitExceeded.
_SWALLOW = _PRELUDE + r"""
kind, count = sys.argv[1], int(sys.argv[2])
keep = []
granted = 0
h0 = hwm()
t = memlimits.limit(held="8MiB")
stopped = False
try:
    with t:
        for i in range(count):
            try:
                if kind == "bytearray_1MB":
                    keep.append(bytearray(10 ** 6))
                elif kind == "bytearray_10kB":
                    keep.append(bytearray(10 ** 4))
                else:
                    keep.append("x%d" % i * 3)
                granted += 1
            except MemoryError:
                pass
except memlimits.LimitExceeded:
    stopped = True
print(json.dumps({"stopped": stopped, "granted": granted,
                  "held": t.held, "peak": hwm() - h0}))
"""


@pytest.mark.parametrize("kind,count", [("bytearray_1MB", 1000),
                                        ("bytearray_10kB", 10 ** 5),
                                        ("strings", 2 * 10 ** 6)])
def test_swallowed_memoryerrors_keep_a_bounded_amount(kind, count,
                                                       measured):
    # Before: 996 of the 1000 1 MB bytearrays granted (the guard let
    # the 256 allocations after each refusal through, whatever their
    # size): 949 MiB kept under 8 MiB; 10**5 of the 10 kB ones, 1 GB
    # (2 * 10**6 of them reached 19 GB).  At most 1 GB each, should a
    # limit fail: a failed check, not a machine out of memory.
    out = _child(_SWALLOW, kind, str(count))
    limit = 8 * MiB
    assert out["stopped"], out
    # The stop itself comes with the estimate at the limit (see above:
    # 15 %), then at most the guard's grace, 1 MiB, goes through.
    assert out["held"] < 1.15 * limit + MiB, out
    assert out["peak"] < 2 * limit, out
    if kind == "bytearray_1MB":
        # A 1 MB block is never granted by the grace: only those before
        # the stop (8 MiB of them, and one sample's weight).
        assert out["granted"] <= 10, out
    measured("%d x %s, MemoryError swallowed, held 8MiB: %d granted, held "
             "%.1f MiB at the end, peak +%.1f MiB, LimitExceeded at the end"
             % (count, kind, out["granted"], out["held"] / MiB,
                out["peak"] / MiB))
