"""Bombs, each stopped inside its own ``with`` while another thread keeps
parsing ordinary documents (which must all succeed, and are not charged
to the bomb's block: Bystander checks that first).  Sampled limits: the
sample interval is 80 000 bytes, the seed fixed by the runner
(MEMLIMITS_SEED)."""
import io
import json
import os
import re
import struct
import subprocess
import sys
import threading
import time
import xml.dom.minidom
import zlib
from xml.parsers import expat as pyexpat
from xml.parsers.expat import ExpatError

import pytest

import memlimits

yaml = pytest.importorskip("yaml")

MiB = 1 << 20


def ordinary_parse(doc, ydoc):
    assert len(json.loads(doc)["items"]) == 200
    assert yaml.safe_load(ydoc)["b"] == {"c": "d"}
    assert xml.dom.minidom.parseString(
        "<r><a x='1'>t</a><a/></r>").documentElement.tagName == "r"


class Bystander:
    """Parses ordinary documents on another thread, outside any limit,
    until stopped: every parse must succeed."""

    def __init__(self):
        self.done = threading.Event()
        self.cv = threading.Condition()
        self.count = 0
        self.errors = []
        self.thread = threading.Thread(target=self.run)
        self.doc = json.dumps({"items": [{"id": i, "name": "n%d" % i}
                                         for i in range(200)]})
        self.ydoc = yaml.safe_dump({"a": list(range(50)), "b": {"c": "d"}})

    def run(self):
        while not self.done.is_set():
            try:
                ordinary_parse(self.doc, self.ydoc)
            except BaseException as e:  # noqa: BLE001
                self.errors.append(repr(e))
                with self.cv:
                    self.cv.notify_all()
                return
            with self.cv:
                self.count += 1
                self.cv.notify_all()

    def wait_for(self, n):
        with self.cv:
            assert self.cv.wait_for(
                lambda: self.count >= n or self.errors, timeout=120), \
                "hang limit: the bystander made no progress in 120 s"
        assert self.errors == []

    def __enter__(self):
        # What one parse allocates, from 20 charged to a block of their own
        # here (about 11 MB, 140 samples, sd 8.5 %: twice too high is
        # 11 sd away; too low only lengthens the wait below).
        with memlimits.Task() as some:
            for _ in range(20):
                ordinary_parse(self.doc, self.ydoc)
        assert some.allocated > 0
        per = some.allocated / 20
        self.thread.start()
        self.wait_for(1)
        # Not charged: a block on this thread that only waits while the
        # bystander allocates about 32 MiB (over 16 MiB, 210 samples)
        # charges (nearly) nothing: were it charged, an estimate under
        # 1 MiB would have probability < 1e-70; the wait itself allocates
        # a few hundred bytes.
        with memlimits.Task() as idle:
            self.wait_for(self.count + int(32 * MiB / per) + 1)
        assert idle.allocated < MiB, (idle.allocated, per)
        self.before = self.count
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        assert self.errors == []
        self.during = self.count - self.before
        return False


def bomb(measured, name, held, fn, *args):
    """fn(*args) in a block of its own limited to held, while a
    Bystander parses: the LimitExceeded it raised (the test fails when
    it was not stopped)."""
    with Bystander() as by:
        t0 = time.monotonic()
        with pytest.raises(memlimits.LimitExceeded) as ei:
            with memlimits.limit(held=held):
                fn(*args)
        took = time.monotonic() - t0
    e = ei.value
    measured("%s: stopped (%s) in %.2f s, held ~%.1f MiB of %s, allocated "
             "~%.1f MiB; %d ordinary parses on the other thread meanwhile"
             % (name, e.reason, took, e.held / MiB, held, e.allocated / MiB,
                by.during))
    return e


BILLION_LAUGHS = """
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_yaml_billion_laughs(measured):
    # PyYAML shares an alias's node: safe_load itself stays small, and
    # what the consumer does with the document (here: json.dumps, 9**8
    # strings) expands it.
    e = bomb(measured, "YAML billion laughs", "64MiB",
             lambda: json.dumps(yaml.safe_load(BILLION_LAUGHS)))
    assert e.reason == "held_limit"


def test_json_wide(measured):
    text = "[" + ",".join(['"%08d"' % i for i in range(2 * 10**6)]) + "]"
    e = bomb(measured, "JSON wide (2e6 strings)", "32MiB", json.loads, text)
    assert e.reason == "held_limit"


def test_json_deep_dicts(measured):
    # Deep-ish and wide: 2000 objects of 1000 keys each.
    inner = "{" + ",".join('"k%d": [%d]' % (i, i) for i in range(1000)) + "}"
    text = "[" + ",".join([inner] * 2000) + "]"
    e = bomb(measured, "JSON 2000 objects of 1000 keys", "64MiB",
             json.loads, text)
    assert e.reason == "held_limit"


def test_json_deeply_nested(measured):
    # Nesting beyond the recursion limit is json's RecursionError, not
    # memory: the block lets it through and is not stopped.  Nested
    # 900 deep (under the limit) with 3000 strings at every level (10 MB
    # of text, 150 MB of objects) is stopped by the memory limit.
    deep = "[" * 100000 + "]" * 100000
    with memlimits.limit(held="64MiB") as t:
        with pytest.raises(RecursionError):
            json.loads(deep)
    assert t.status is None
    level = ",".join(['"ab"'] * 3000)
    text = ("[" + level + ",") * 900 + "[]" + "]" * 900
    assert len(text) < 16 * MiB
    e = bomb(measured, "JSON nested 900 deep, 3000 strings a level",
             "64MiB", json.loads, text)
    assert e.reason == "held_limit"


XML_LAUGHS = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "' + "lol" * 10
              + '">' + "".join('<!ENTITY %s "%s">' % (chr(98 + i),
                                                       ("&%s;" % chr(97 + i))
                                                       * 10)
                               for i in range(8))
              + ']><l>&i;</l>')


def test_xml_entity_expansion(measured):
    # Expat 2.4 and later refuse the classic billion laughs themselves
    # (amplification over 100 past 8 MiB of output): ExpatError, and the
    # block is not stopped.
    with memlimits.limit(held="64MiB") as t:
        with pytest.raises(ExpatError, match="amplification"):
            xml.dom.minidom.parseString(XML_LAUGHS)
    assert t.status is None
    # An expansion under that factor (250 bytes for each 3-byte "&e;",
    # about 75 over the document) passes expat: a 3 MiB document that
    # would make 240 MB of text in minidom is stopped by the limit.
    doc = ('<?xml version="1.0"?><!DOCTYPE r [<!ENTITY e "' + "x" * 250
           + '">]><r>' + ("<a>" + "&e;" * 20 + "</a>") * 50000 + "</r>")
    assert len(doc) < 4 * MiB
    e = bomb(measured, "XML entity expansion x75 (minidom, expat %s)"
             % pyexpat.EXPAT_VERSION, "64MiB", xml.dom.minidom.parseString,
             doc)
    assert e.reason == "held_limit"


def test_re_catastrophic_backtracking_is_cpu():
    # The classic catastrophic pattern backtracks 2**n times in constant
    # memory: a memory limit does not see it (a deadline is the tool).
    with memlimits.limit(alloc="1MiB") as t:
        assert re.match(r"(a+)+$", "a" * 16 + "b") is None
    assert t.status is None and t.allocated < MiB


def test_re_nested_repeat_over_huge_string(measured):
    # A repeat of an alternation keeps a backtracking frame per
    # iteration on sre's data stack (grown by realloc): over a 20 MB
    # string it asks for hundreds of MB before it fails to match.
    s = "ab" * 10**7
    e = bomb(measured, "re.match((?:ab|a)*c) over 20 MB", "64MiB",
             re.match, r"(?:ab|a)*c", s)
    assert e.reason == "held_limit"


def test_re_findall_huge_list(measured):
    # findall with groups: a tuple per match, 10**7 of them.
    s = "ab" * 10**7
    e = bomb(measured, "re.findall((\\w)(\\w)) over 20 MB", "64MiB",
             re.findall, r"(\w)(\w)", s)
    assert e.reason == "held_limit"


def png_bomb(width, height):
    """A grey PNG of width x height zero pixels, compressed (a few hundred
    KB), made a row at a time: nothing the size of the image here."""
    def chunk(kind, data):
        body = kind + data
        return (struct.pack(">I", len(data)) + body
                + struct.pack(">I", zlib.crc32(body)))
    z = zlib.compressobj(9)
    row = bytes(width + 1)  # filter byte 0, then the pixels
    idat = b"".join(z.compress(row) for _ in range(height)) + z.flush()
    return (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0,
                                         0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def png_child():
    # Run with the library preloaded (test_png_decompression_bomb).
    from PIL import Image
    assert memlimits.capabilities()["preloaded"]
    data = png_bomb(16000, 16000)  # 256 MB of pixels
    assert len(data) < MiB
    Image.MAX_IMAGE_PIXELS = None
    try:
        bomb(lambda line: print("measured", line),
             "PIL 16000x16000 PNG of %d KiB (preloaded)" % (len(data) >> 10),
             "64MiB", lambda: Image.open(io.BytesIO(data)).load())
    except BaseException as e:  # noqa: BLE001
        print("not stopped:", repr(e))
        return 1
    return 0


def preloadable_library():
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libmemlimits.so"):
                return path
    return None


def peak_rss_kib():
    # VmHWM, this process's own: getrusage's ru_maxrss is carried across
    # execve, and a child spawned by pytest (vfork) started from pytest's
    # peak (its growth read 0).
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM in /proc/self/status")


def lxml_child():
    # Run with the library preloaded (test_lxml_billion_laughs).
    from lxml import etree
    assert memlimits.capabilities()["preloaded"]
    parser = etree.XMLParser(resolve_entities=True, huge_tree=True)
    before = peak_rss_kib()
    try:
        bomb(lambda line: print("measured", line),
             "XML billion laughs (lxml %s, libxml2 %s, huge_tree; "
             "preloaded)" % (".".join(map(str, etree.LXML_VERSION)),
                             ".".join(map(str, etree.LIBXML_VERSION))),
             "64MiB", etree.fromstring, XML_LAUGHS.encode(), parser)
    except BaseException as e:  # noqa: BLE001
        print("not stopped:", repr(e))
        return 1
    grew = peak_rss_kib() - before
    print("peak RSS grew by %d KiB" % grew)
    return 0


CHILDREN = {"png": png_child, "lxml": lxml_child}


def run_preloaded(name):
    """CHILDREN[name] in a child with the library preloaded: (its
    "measured" line, its whole output)."""
    lib = preloadable_library()
    assert lib is not None
    env = dict(os.environ, LD_PRELOAD=lib)
    r = subprocess.run([sys.executable, __file__, name], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300)
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0, out
    lines = [x for x in out.splitlines() if x.startswith("measured ")]
    assert len(lines) == 1 and "stopped (held_limit)" in lines[0], out
    return lines[0][len("measured "):], out


def test_png_decompression_bomb(measured):
    # PIL allocates its pixels with malloc from C, which the module's
    # hooks do not see (docs/python.md): it runs in a child with the
    # library preloaded, as under memlimits run.
    pytest.importorskip("PIL.Image")
    measured(run_preloaded("png")[0])


def test_lxml_billion_laughs(measured):
    # libxml2 (under lxml, entities resolved, its own amplification
    # check off with huge_tree) expands the classic billion laughs with
    # malloc from C: preloaded, as PIL.  It goes on after a NULL from
    # malloc, so the module's refusal guard grants C code no grace: with
    # it, 256 allocations went through after each refusal and the peak
    # RSS reached 1.2 GB under the 64 MiB limit.  Twice the limit is the
    # bound test-run.sh puts on xmllint's bomb.
    pytest.importorskip("lxml.etree", reason="no lxml (Debian: "
                        "python3-lxml)")
    line, out = run_preloaded("lxml")
    grew = [int(m) for m in re.findall(r"peak RSS grew by (\d+) KiB", out)]
    assert len(grew) == 1 and grew[0] < 2 * 64 * 1024, out
    measured("%s; peak RSS grew by %.1f MiB" % (line, grew[0] / 1024))


if __name__ == "__main__" and sys.argv[1:2] and sys.argv[1] in CHILDREN:
    sys.exit(CHILDREN[sys.argv[1]]())
