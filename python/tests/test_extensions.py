"""C extensions' own malloc reaches the library without the preload
(issue 42, item 1): at import the module has the library rewrite every
loaded object's references to the malloc and mmap families
(ml_patch_objects(3)), and dlopen's, so that objects loaded later are
rewritten too.  Each case runs in a fresh plain python3 (no LD_PRELOAD),
patched and with MEMLIMITS_NO_PATCH=1 (the before: the same work runs to
completion).  Sampled limits: the seed is fixed (MEMLIMITS_SEED)."""
import ctypes.util
import json
import os
import subprocess
import sys

import pytest

import memlimits

MiB = 1 << 20
LIMIT = 64 * MiB

_HWM = """
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM"):
            return int(line.split()[1]) * 1024
"""

# One MiB at a time, kept, up to 1 GiB; what was kept when it stopped.
_NUMPY = _HWM + """
import json, sys
first = sys.argv[1]
if first == "numpy":
    import numpy
import memlimits
import numpy
h0 = hwm()
keep = []
out = {"ext": memlimits.capabilities()["extensions"]}
try:
    with memlimits.limit(held="64MiB"):
        for i in range(1024):
            keep.append(numpy.ones(1 << 17))
    out["stopped"] = False
except memlimits.LimitExceeded as e:
    out["stopped"] = True
    out["held"] = e.held
out["kept"] = len(keep) * (1 << 20)
out["peak"] = hwm() - h0
print(json.dumps(out))
"""

_SQLITE = _HWM + """
import json, sqlite3
import memlimits
h0 = hwm()
c = sqlite3.connect(":memory:")
c.execute("create table t(b)")
n = 0
out = {"ext": memlimits.capabilities()["extensions"]}
try:
    with memlimits.limit(held="64MiB"):
        for i in range(1000):
            c.execute("insert into t values(randomblob(1000000))")
            n += 1
    out["stopped"] = False
except memlimits.LimitExceeded as e:
    out["stopped"] = True
    out["held"] = e.held
out["kept"] = n * 1000000
out["peak"] = hwm() - h0
c.close()
print(json.dumps(out))
"""

# A library dlopened after the import (ctypes), calling malloc from its
# own object: the dlopen path.  sqlite3_malloc64 is sqlite's malloc.
_DLOPEN = _HWM + """
import ctypes, json, sys
import memlimits
before = memlimits.capabilities()["extensions"]["patched"]
lib = ctypes.CDLL(sys.argv[1])
after = memlimits.capabilities()["extensions"]
lib.sqlite3_malloc64.restype = ctypes.c_void_p
lib.sqlite3_malloc64.argtypes = [ctypes.c_uint64]
lib.sqlite3_free.argtypes = [ctypes.c_void_p]
h0 = hwm()
keep = []
out = {"ext": after, "before": before}
try:
    with memlimits.limit(held="64MiB"):
        for i in range(1024):
            p = lib.sqlite3_malloc64(1 << 20)
            if not p:
                break
            ctypes.memset(p, 1, 1 << 20)
            keep.append(p)
    out["stopped"] = False
except memlimits.LimitExceeded as e:
    out["stopped"] = True
    out["held"] = e.held
out["kept"] = len(keep) * (1 << 20)
out["peak"] = hwm() - h0
for p in keep:
    lib.sqlite3_free(p)
print(json.dumps(out))
"""

# The mmap family: Python's mmap module's private anonymous mappings (its
# own mmap call, patched), one MiB each, written and kept.
_MMAP = _HWM + """
import json, mmap
import memlimits
h0 = hwm()
keep = []
out = {"ext": memlimits.capabilities()["extensions"]}
try:
    with memlimits.limit(held="64MiB"):
        for i in range(1024):
            m = mmap.mmap(-1, 1 << 20, flags=mmap.MAP_PRIVATE)
            m.write(b"x" * (1 << 20))
            keep.append(m)
    out["stopped"] = False
except memlimits.LimitExceeded as e:
    out["stopped"] = True
    out["held"] = e.held
out["kept"] = len(keep) * (1 << 20)
out["peak"] = hwm() - h0
print(json.dumps(out))
"""

# lxml's libxml2 (loaded with lxml.etree, after the import: the dlopen
# path) expanding a billion laughs with huge_tree.
_LXML = _HWM + """
import json, time
import memlimits
from lxml import etree
ents = '<!ENTITY a0 "' + "x" * 100 + '">' + "".join(
    '<!ENTITY a%d "%s">' % (i, ("&a%d;" % (i - 1)) * 10) for i in range(1, 8))
doc = ('<?xml version="1.0"?><!DOCTYPE r [%s]><r>&a7;</r>' % ents).encode()
parser = etree.XMLParser(huge_tree=True, resolve_entities=True)
h0 = hwm()
t = time.monotonic()
out = {"ext": memlimits.capabilities()["extensions"], "kept": 0}
try:
    with memlimits.limit(held="64MiB"):
        out["kept"] = len(etree.tostring(etree.fromstring(doc, parser)))
    out["stopped"] = False
except (memlimits.LimitExceeded, etree.XMLSyntaxError) as e:
    out["stopped"] = isinstance(e, memlimits.LimitExceeded)
    out["error"] = type(e).__name__
out["seconds"] = time.monotonic() - t
out["peak"] = hwm() - h0
print(json.dumps(out))
"""

# Blocks glibc made before the import, freed (and grown) after it through
# the patched objects: numpy's arrays of every size class, from the arena
# and mmapped; sqlite's pages; inside a limit and outside.
_OLD_BLOCKS = """
import json, random, sqlite3
import numpy
rng = random.Random(37)
old = [numpy.empty(rng.choice([1, 8, 100, 1000, 5000, 40000, 300000]),
                   dtype=numpy.uint8) for i in range(20000)]
grow = [numpy.zeros(rng.randint(1, 4096), dtype=numpy.uint8)
        for i in range(2000)]
c = sqlite3.connect(":memory:")
c.execute("create table t(b)")
for i in range(200):
    c.execute("insert into t values(randomblob(10000))")
import memlimits
rng.shuffle(old)
with memlimits.limit(held="1GiB"):
    del old[:10000]
    for a in grow[:1000]:
        a.resize(a.size * 3 + 17, refcheck=False)  # realloc of an old block
del old[:]
for a in grow[1000:]:
    a.resize(a.size * 5 + 3, refcheck=False)
grow = None
c.execute("delete from t")
c.close()
print(json.dumps({"ok": True,
                  "ext": memlimits.capabilities()["extensions"]}))
"""


def _child(code, *args, patch=True):
    env = dict(os.environ, MEMLIMITS_SEED="37")
    env.pop("LD_PRELOAD", None)
    if patch:
        env.pop("MEMLIMITS_NO_PATCH", None)
    else:
        env["MEMLIMITS_NO_PATCH"] = "1"
    r = subprocess.run([sys.executable, "-c", code] + list(args),
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.splitlines()[-1])


def _needs_patch():
    if memlimits.capabilities()["preloaded"]:
        pytest.skip("under the preload every object reaches the library")


def _stopped_near_limit(out, what):
    assert out["ext"]["mode"] == "patched", out
    assert out["stopped"], (what, out)
    # The held estimate at the stop is within 15 % of the limit, and so is
    # what the loop kept; the process's peak stays under twice the limit.
    assert abs(out["held"] - LIMIT) <= 0.15 * LIMIT, (what, out)
    assert abs(out["kept"] - LIMIT) <= 0.15 * LIMIT, (what, out)
    assert out["peak"] < 2 * LIMIT, (what, out)


def _report(measured, what, before, after):
    measured("%s under held=64MiB: MEMLIMITS_NO_PATCH=1 %s, kept %d MiB, "
             "peak +%d MiB; patched: %s at %d MiB kept, peak +%d MiB" % (
                 what, "stopped" if before["stopped"] else "completed",
                 before["kept"] // MiB, before["peak"] // MiB,
                 "stopped" if after["stopped"] else "completed",
                 after["kept"] // MiB, after["peak"] // MiB))


@pytest.mark.parametrize("first", ["numpy", "memlimits"])
def test_numpy_arrays_stop(first, measured):
    pytest.importorskip("numpy")
    _needs_patch()
    after = _child(_NUMPY, first)
    _stopped_near_limit(after, "numpy")
    before = _child(_NUMPY, first, patch=False)
    assert before["ext"]["mode"].startswith("off"), before
    assert not before["stopped"] and before["kept"] == 1024 * MiB, before
    _report(measured, "numpy 1 GiB in 1 MiB arrays (%s first)" % first,
            before, after)


def test_sqlite_memory_database_stops(measured):
    _needs_patch()
    after = _child(_SQLITE)
    assert after["ext"]["mode"] == "patched", after
    assert after["stopped"], after
    assert abs(after["held"] - LIMIT) <= 0.15 * LIMIT, after
    # sqlite keeps each row's blob in its pages: the rows inserted are a
    # little under the limit, the peak under twice it.
    assert after["kept"] <= LIMIT * 1.15, after
    assert after["peak"] < 2 * LIMIT, after
    before = _child(_SQLITE, patch=False)
    assert not before["stopped"] and before["kept"] == 1000 * 1000000, before
    _report(measured, "sqlite3 :memory: 1000 x randomblob(1e6)", before,
            after)


def test_library_loaded_after_import_stops(measured):
    _needs_patch()
    name = ctypes.util.find_library("sqlite3")
    if not name:
        pytest.skip("no libsqlite3")
    after = _child(_DLOPEN, name)
    # Its dlopen brought one more patched object.
    assert after["ext"]["patched"] > after["before"], after
    _stopped_near_limit(after, "dlopen")
    before = _child(_DLOPEN, name, patch=False)
    assert not before["stopped"] and before["kept"] == 1024 * MiB, before
    _report(measured, "ctypes CDLL(libsqlite3) after the import, "
            "sqlite3_malloc64(1 MiB) x 1024", before, after)


def test_private_mappings_stop(measured):
    _needs_patch()
    after = _child(_MMAP)
    _stopped_near_limit(after, "mmap")
    before = _child(_MMAP, patch=False)
    assert not before["stopped"] and before["kept"] == 1024 * MiB, before
    _report(measured, "mmap.mmap(-1, 1 MiB, MAP_PRIVATE) x 1024, written",
            before, after)


def test_lxml_billion_laughs_stops(measured):
    pytest.importorskip("lxml.etree")
    _needs_patch()
    # Before (MEMLIMITS_NO_PATCH=1, measured by hand, not rerun here: 3 GB
    # and half a minute): +2978 MiB in 34 s, stopped only when Python's
    # own string of the result was refused.
    after = _child(_LXML)
    assert after["ext"]["mode"] == "patched", after
    assert after["stopped"], after
    # libxml2 frees its buffers as it unwinds from the refusal: the peak,
    # not the held estimate at the stop, is what it reached.
    assert after["peak"] < 3 * LIMIT and after["seconds"] < 30, after
    measured("lxml billion laughs (huge_tree) under held=64MiB, patched: "
             "stopped in %.2f s, peak +%d MiB"
             % (after["seconds"], after["peak"] // MiB))


def test_blocks_from_before_the_import_free():
    pytest.importorskip("numpy")
    _needs_patch()
    out = _child(_OLD_BLOCKS)
    assert out["ok"] and out["ext"]["mode"] == "patched", out


# Libraries loaded on several threads at once after the import (each
# dlopen's pass, or the pass another thread runs, rewrites them), while
# the main thread allocates through the patched interpreter.
_THREADS = """
import ctypes, ctypes.util, json, threading
import memlimits
names = [n for n in (ctypes.util.find_library(x) for x in
         ("z", "bz2", "lzma", "sqlite3", "expat", "ffi", "crypto", "ssl",
          "uuid", "gdbm", "readline", "ncursesw", "mpdec", "xml2"))
         if n]
before = memlimits.capabilities()["extensions"]["patched"]
go = threading.Barrier(len(names) + 1)
libs = {}
def load(n):
    go.wait()
    libs[n] = ctypes.CDLL(n)
ts = [threading.Thread(target=load, args=(n,)) for n in names]
for t in ts:
    t.start()
go.wait()
junk = [bytearray(1000 + i) for i in range(20000)]
for t in ts:
    t.join()
print(json.dumps({"names": len(names), "loaded": len(libs),
                  "before": before,
                  "after": memlimits.capabilities()["extensions"]}))
"""


def test_libraries_loaded_on_many_threads():
    _needs_patch()
    out = _child(_THREADS)
    assert out["loaded"] == out["names"], out
    assert out["after"]["mode"] == "patched", out
    # Some of them were loaded already (libz, libffi: Python's own).
    assert out["after"]["patched"] >= out["before"], out


def test_capabilities_say_what_is_covered():
    ext = memlimits.capabilities()["extensions"]
    if memlimits.capabilities()["preloaded"]:
        assert ext["mode"] == "preloaded", ext
    elif os.environ.get("MEMLIMITS_NO_PATCH", "0") not in ("", "0"):
        assert ext["mode"].startswith("off"), ext
    else:
        # The interpreter itself, libm, libz, the extensions loaded so far.
        assert ext["mode"] == "patched" and ext["patched"] >= 3, ext
