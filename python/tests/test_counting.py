"""Counting stays right (issue 42, item 4): the wrappers checked at every
enter and put back after a hook took them out, frees of objects never
counted, a generator collected with its block open.  Each runs in a
fresh interpreter (a hook taken out, or tracemalloc started before the
import, is process state)."""
import json
import subprocess
import sys

MiB = 1 << 20

# A runaway: 10**7 strs (640 MB), ten times the limit and more.
_RUNAWAY = r"""
def runaway(lim):
    keep = []
    try:
        with memlimits.limit(held=lim) as t:
            for i in range(10**7):
                keep.append(str(i))
    except memlimits.LimitExceeded:
        return {"stopped": True, "held": t.held, "n": len(keep)}
    return {"stopped": False, "held": t.held, "n": len(keep)}
"""


def run(body):
    src = "import json\n" + body.replace("RUNAWAY", _RUNAWAY)
    r = subprocess.run([sys.executable, "-c", src], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_tracemalloc_stopped_after_the_first_limit():
    # The first limit wraps tracemalloc's hooks; tracemalloc.stop() puts
    # back what it saved at its start (CPython's plain allocators): no
    # wrapper left.  Before the enter's check the runaway made all its
    # 10**7 strings (held 0); now the next enter puts ours back.
    out = run(r"""
import tracemalloc
tracemalloc.start()
import memlimits
RUNAWAY
with memlimits.limit(held="1GiB"):
    pass
tracemalloc.stop()
print(json.dumps(runaway("64MiB")))
""")
    assert out["stopped"], out
    assert abs(out["held"] - 64 * MiB) < 0.15 * 64 * MiB, out


def test_tracemalloc_started_inside_chains_to_ours():
    # Started inside a block, tracemalloc's hooks wrap ours: the enter's
    # probe reaches ours through them and leaves them in (tracemalloc
    # still traces), and a runaway is still stopped.  Stopped inside a
    # block, ours come back as they were.
    out = run(r"""
import tracemalloc
import memlimits
RUNAWAY
res = {}
with memlimits.limit(held="1GiB"):
    tracemalloc.start()
    res["inside"] = runaway("64MiB")
    keep = [str(i) for i in range(100000)]
    res["traced"] = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
res["after"] = runaway("64MiB")
print(json.dumps(res))
""")
    for k in ("inside", "after"):
        assert out[k]["stopped"], out
        assert abs(out[k]["held"] - 64 * MiB) < 0.15 * 64 * MiB, out
    # tracemalloc saw the 100 000 strs (4.8 MB at least): its hooks
    # were left in, not replaced.
    assert out["traced"] > 100000 * 48, out


_SET_ALLOCATOR = r"""
import ctypes
class Alloc(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p),
                ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]
api = ctypes.pythonapi
api.PyMem_GetAllocator.argtypes = [ctypes.c_int, ctypes.POINTER(Alloc)]
api.PyMem_SetAllocator.argtypes = [ctypes.c_int, ctypes.POINTER(Alloc)]
plain = {d: Alloc() for d in (0, 1, 2)}  # RAW, MEM, OBJ
for d, a in plain.items():
    api.PyMem_GetAllocator(d, ctypes.byref(a))
"""


def test_another_hook_over_ours_without_chaining():
    # An extension's PyMem_SetAllocator of its own allocators over ours,
    # in all three domains, forwarding nowhere near ours (CPython's
    # plain ones, saved before the first limit): put back at the next
    # enter.
    out = run(_SET_ALLOCATOR + r"""
import memlimits
RUNAWAY
with memlimits.limit(held="1GiB"):
    pass
for d, a in plain.items():
    api.PyMem_SetAllocator(d, ctypes.byref(a))
print(json.dumps(runaway("64MiB")))
""")
    assert out["stopped"], out
    assert abs(out["held"] - 64 * MiB) < 0.15 * 64 * MiB, out


def test_raw_domain_put_back():
    # The RAW domain alone replaced: bytearrays of 1 MB (RAW blocks)
    # count again after the next enter.
    out = run(_SET_ALLOCATOR + r"""
import memlimits
with memlimits.limit(held="1GiB"):
    pass
api.PyMem_SetAllocator(0, ctypes.byref(plain[0]))
keep = []
try:
    with memlimits.limit(held="64MiB") as t:
        for i in range(1000):
            keep.append(bytearray(10**6))
    res = {"stopped": False}
except memlimits.LimitExceeded:
    res = {"stopped": True}
res["n"] = len(keep)
print(json.dumps(res))
""")
    assert out["stopped"] and out["n"] < 80, out


_GENERATOR = r"""
import gc
import memlimits
cur = memlimits._memlimits.current_task_id
def gen():
    with memlimits.limit(held="8MiB"):
        keep = []
        try:
            for i in range(10**7):
                keep.append(str(i))
        except MemoryError:
            pass
        yield 1  # the block stopped, and open across the yield
        yield 2
res = {}
OUTER
def allocations():
    ok = 0
    for _ in range(10):
        try:
            x = [str(j) for j in range(100000)]
            ok += 1
        except MemoryError:
            pass
    return ok
res["after"] = cur()
res["ok_after"] = allocations()
print(json.dumps(res))
"""


def test_generator_collected_inside_another_block():
    # The generator's stopped block was the thread's innermost slice
    # until its collection, which came inside another block: its exit
    # could not leave it (not innermost), and the thread stayed inside
    # the stopped task after both blocks: 10 of 10 allocations outside
    # any block failed.  Now the thread is in the other block after the
    # collection, and in no task after it.
    out = run(_GENERATOR.replace("OUTER", r"""
g = gen()
next(g)
with memlimits.limit(held="1GiB") as other:
    del g
    gc.collect()
    res["inside"] = cur() == other.task_id
    res["ok_inside"] = len([str(j) for j in range(100000)])
"""))
    assert out["inside"] and out["ok_inside"] == 100000, out
    assert out["after"] == 0 and out["ok_after"] == 10, out


def test_generator_collected_between_two_blocks():
    # Opened inside block a, collected inside block b (a > gen > b on
    # the thread): the collection leaves the generator's slice from
    # under b's, and the thread goes back to b, then a, then none.
    out = run(_GENERATOR.replace("OUTER", r"""
with memlimits.limit(held="1GiB") as a:
    g = gen()
    next(g)
    with memlimits.limit(held="1GiB") as b:
        del g
        gc.collect()
        res["in_b"] = cur() == b.task_id
    res["in_a"] = cur() == a.task_id
    res["ok_in_a"] = len([str(j) for j in range(100000)])
"""))
    assert out["in_b"] and out["in_a"] and out["ok_in_a"] == 100000, out
    assert out["after"] == 0 and out["ok_after"] == 10, out


def test_generator_collected_inside_a_stopped_block():
    # Collected inside a stopped block, which the library would not
    # enter again once left: the generator's slice stays under it until
    # it is left, then goes too.  The stopped block still raises.
    out = run(r"""
import gc
import memlimits
cur = memlimits._memlimits.current_task_id
def gen():
    with memlimits.limit(held="1GiB"):
        yield 1
        yield 2
res = {}
g = gen()
next(g)
try:
    with memlimits.limit(held="8MiB") as b:
        keep = []
        try:
            for i in range(10**7):
                keep.append(str(i))
        except MemoryError:
            pass
        del g
        gc.collect()
        res["in_b"] = cur() == b.task_id
    res["raised"] = False
except memlimits.LimitExceeded:
    res["raised"] = True
del keep
res["after"] = cur()
res["ok_after"] = len([str(j) for j in range(100000)])
print(json.dumps(res))
""")
    assert out["in_b"] and out["raised"], out
    assert out["after"] == 0 and out["ok_after"] == 100000, out


def test_free_of_an_object_never_counted_lowers_no_block():
    # 3e6 strs (about 150 MB with the list) made outside any task, freed
    # inside a block under held=64MiB: the block's estimate is of
    # sampled records only (a free of a block never sampled finds none),
    # so the runaway after still stops near 64 MiB, not at 64 + 150.
    # Passed before this change too: a guard on the rule.
    out = run(r"""
import memlimits
with memlimits.limit(held="1GiB"):
    pass
before = [str(i) for i in range(3 * 10**6)]
keep = []
res = {}
try:
    with memlimits.limit(held="64MiB") as t:
        del before
        res["held_after_free"] = t.held
        for i in range(10**7):
            keep.append(str(i))
    res["stopped"] = False
except memlimits.LimitExceeded:
    res["stopped"] = True
res["held"] = t.held
print(json.dumps(res))
""")
    assert out["held_after_free"] == 0 and out["stopped"], out
    assert abs(out["held"] - 64 * MiB) < 0.15 * 64 * MiB, out


def test_heap_after_a_late_global_limit():
    # A global limit set after 3e6 strs were made (the meter counts from
    # then): their frees subtracted from it, heap() read 0 with 48 MB of
    # new strs alive, and stayed low by their 144 MB for good.  Now the
    # objects alive at the switch-on are a debt the first frees pay:
    # heap() covers the 10**6 strs made after (STR_CLASS each).
    out = run(r"""
import sys
import memlimits
STR_CLASS = (sys.getsizeof(str(123456)) + 15) // 16 * 16
with memlimits.limit(held="1GiB"):
    pass
before = [str(i) for i in range(3 * 10**6)]
memlimits.set_global_limit("64GiB")
del before
keep = [str(i) for i in range(10**6)]
res = {"heap": memlimits.heap(), "want": 10**6 * STR_CLASS}
rss = open("/proc/self/status").read().split("VmRSS:")[1].split()[0]
res["rss"] = int(rss) * 1024
print(json.dumps(res))
""")
    assert out["heap"] >= out["want"], out
    assert out["heap"] <= out["rss"], out


# Under the preload (memlimits run) with the module imported: a str that
# CPython finishes with a shrinking realloc ("%d" % i, str.format, a + b
# resized in place) was moved by pymalloc, from a buffer in a pool made
# before the import, into one of the module's arenas with pymalloc's own
# malloc, past the wrapper: never counted, then subtracted at its free.
# A runaway of them reached 1.5 GB resident under --heap-limit 200MiB
# where the same program without the import stopped at 210 MB.
_MOVED = r"""
import json, os, sys, memlimits
assert memlimits.capabilities()["preloaded"]
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf(
        "SC_PAGE_SIZE")
out = {}
keep = [None] * 300000
for name, make in (("percent", lambda i: "row %d of the table" % i),
                   ("format", lambda i: "row {} of the table".format(i)),
                   ("concat", lambda i: "row " + str(i) + " of the table")):
    h, r = memlimits.heap(), rss()
    for i in range(len(keep)):
        keep[i] = make(i)
    out[name] = [memlimits.heap() - h, rss() - r]
    # What pymalloc holds for them: each in its 16-byte size class.
    out[name + " want"] = sum((sys.getsizeof(s) + 15) & ~15 for s in keep)
    h = memlimits.heap()
    for i in range(len(keep)):
        keep[i] = None
    out[name + " freed"] = [h - memlimits.heap(), 0]
print(json.dumps(out))
"""


def _library():
    import memlimits
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if path.rpartition("/")[2].startswith("libmemlimits.so"):
                return path
    raise AssertionError("no libmemlimits.so mapped (%r)"
                         % memlimits.capabilities())


def test_strings_moved_by_realloc_count_under_the_preload():
    import os
    env = dict(os.environ, LD_PRELOAD=_library(),
               MEMLIMITS_HEAP_LIMIT="2GiB")
    r = subprocess.run([sys.executable, "-c", _MOVED], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.splitlines()[-1])
    for name in ("percent", "format", "concat"):
        counted, resident = got[name]
        freed = got[name + " freed"][0]
        # 300 000 strs of 64 (3.12 and later) or 80 bytes (before): 18
        # or 23 MiB in size classes.  Resident memory grows by pools and
        # arenas, some of them there before the loop, so it is at least
        # four fifths of that.  The heap is counted by size class, as
        # resident memory grows by pools: the two agree within 15 %, and
        # what was counted is given back.
        assert resident > 0.8 * got[name + " want"], got
        assert abs(counted - resident) < 0.15 * resident, (name, got)
        assert abs(freed - counted) < 0.05 * counted, (name, got)


def test_percent_runaway_stops_under_run_mode():
    import os
    cmd = os.environ.get("ML_PY_MEMLIMITS")
    if not cmd:
        import pytest
        pytest.skip("no memlimits command (ML_PY_MEMLIMITS)")
    src = ("import memlimits\nrows = []\ntry:\n    while True:\n"
           "        rows.append('row %d of the table' % len(rows))\n"
           "except MemoryError:\n    del rows\n"
           "    print([l for l in open('/proc/self/status')\n"
           "           if l.startswith('VmHWM')][0])\n")
    r = subprocess.run([cmd, "run", "--heap-limit", "128MiB", "--",
                        sys.executable, "-c", src], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and "VmHWM" in r.stdout, r.stderr[-3000:]
    peak = int(r.stdout.split()[1]) * 1024
    # It ran to 1.5 GB before; the peak under twice the limit.
    assert peak < 2 * 128 * MiB, (peak, r.stderr[-3000:])
