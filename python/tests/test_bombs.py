"""Bombs, each stopped inside its own ``with`` while another thread keeps
parsing ordinary documents (which must all succeed)."""
import io
import json
import threading

import pytest

import memlimits

yaml = pytest.importorskip("yaml")


class Bystander:
    """Parses ordinary documents on another thread until stopped."""

    def __init__(self):
        self.done = threading.Event()
        self.count = 0
        self.errors = []
        self.thread = threading.Thread(target=self.run)

    def run(self):
        doc = json.dumps({"items": [{"id": i, "name": "n%d" % i}
                                    for i in range(200)]})
        ydoc = yaml.safe_dump({"a": list(range(50)), "b": {"c": "d"}})
        while not self.done.is_set():
            try:
                assert len(json.loads(doc)["items"]) == 200
                assert yaml.safe_load(ydoc)["b"] == {"c": "d"}
                self.count += 1
            except Exception as e:  # noqa: BLE001
                self.errors.append(repr(e))
                return

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        assert self.errors == []
        assert self.count > 0


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


def expand(node):
    # What a consumer does with the document: the aliases made real.
    if isinstance(node, list):
        return [expand(x) for x in node]
    if isinstance(node, dict):
        return {k: expand(v) for k, v in node.items()}
    return node


def test_yaml_billion_laughs():
    with Bystander():
        with pytest.raises(memlimits.LimitExceeded) as ei:
            with memlimits.limit(held="64MiB"):
                expand(yaml.safe_load(BILLION_LAUGHS))
    assert ei.value.reason == "held_limit"


def test_json_wide():
    text = "[" + ",".join(['"%08d"' % i for i in range(2 * 10**6)]) + "]"
    with Bystander():
        with pytest.raises(memlimits.LimitExceeded):
            with memlimits.limit(held="32MiB"):
                json.loads(text)


def test_json_deep_dicts():
    # Deep nesting stops at the recursion limit; a deep-ish and wide one
    # at the memory limit.
    inner = "{" + ",".join('"k%d": [%d]' % (i, i) for i in range(1000)) + "}"
    text = "[" + ",".join([inner] * 2000) + "]"
    with Bystander():
        with pytest.raises(memlimits.LimitExceeded):
            with memlimits.limit(held="64MiB"):
                json.loads(text)


def test_png_decompression_bomb():
    # PIL allocates its pixels with malloc from C: the module's hooks see
    # only the interpreter's allocations, so this one needs the library
    # preloaded (memlimits run, or LD_PRELOAD).
    if not memlimits.capabilities()["preloaded"]:
        pytest.skip("PIL's own malloc is counted only with the library "
                    "preloaded")
    Image = pytest.importorskip("PIL.Image")
    buf = io.BytesIO()
    Image.new("L", (8000, 8000)).save(buf, "PNG")
    data = buf.getvalue()
    assert len(data) < 1 << 20
    Image.MAX_IMAGE_PIXELS = None
    with Bystander():
        with pytest.raises(memlimits.LimitExceeded):
            with memlimits.limit(held="16MiB"):
                Image.open(io.BytesIO(data)).load()
