"""Bad input (issue 42, item 9): ValueError or TypeError naming the
argument, never a silent no-op or an internal error; sizes read by the
library's own parser, as the memlimits command reads them."""
import os
import subprocess

import pytest

import memlimits
from memlimits import asgi, wsgi

GiB = 1 << 30


def _app(environ, start_response):
    start_response("200 OK", [])
    return [b""]


async def _aapp(scope, receive, send):
    pass


MAKERS = [
    ("limit", lambda **kw: memlimits.limit(**kw)),
    ("call", lambda **kw: memlimits.call(lambda: None, **kw)),
    ("wsgi", lambda **kw: wsgi.LimitMiddleware(_app, **kw)),
    ("asgi", lambda **kw: asgi.LimitMiddleware(_aapp, **kw)),
]


@pytest.mark.parametrize("name,make", MAKERS, ids=[m[0] for m in MAKERS])
def test_no_limit_given(name, make):
    with pytest.raises(ValueError, match="no limit given"):
        make()
    with pytest.raises(ValueError, match="no limit given"):
        make(held=None, alloc=None)


@pytest.mark.parametrize("name,make", MAKERS, ids=[m[0] for m in MAKERS])
@pytest.mark.parametrize("arg", ["held", "alloc"])
def test_bad_sizes_name_the_argument(name, make, arg):
    with pytest.raises(ValueError, match=r"%s=0\b.*leaving the argument "
                       "out" % arg):
        make(**{arg: 0})
    with pytest.raises(ValueError, match=r"%s=.*leaving the argument out"
                       % arg):
        make(**{arg: "0MiB"})
    for bad in ("abc", "-1", "64 MiB", " 64k", "1e3"):
        with pytest.raises(ValueError, match="^%s: not a size" % arg):
            make(**{arg: bad})
    with pytest.raises(ValueError, match="^%s: .*negative" % arg):
        make(**{arg: -5})
    for bad in (1.5, True, b"64k", [1]):
        with pytest.raises(TypeError, match="^%s: " % arg):
            make(**{arg: bad})
    with pytest.raises(ValueError, match="%s=.*2\\*\\*64-1" % arg):
        make(**{arg: (1 << 64) - 1})


@pytest.mark.parametrize("name,make", MAKERS, ids=[m[0] for m in MAKERS])
def test_unknown_keyword(name, make):
    if name == "call":
        # call's other keywords are fn's: fn(helld=...) raises for fn.
        with pytest.raises(TypeError, match="helld"):
            make(held="1GiB", helld="1GiB")
        return
    with pytest.raises(TypeError, match="helld"):
        make(helld="1GiB")


@pytest.mark.parametrize("mw", [wsgi.LimitMiddleware, asgi.LimitMiddleware],
                         ids=["wsgi", "asgi"])
def test_status(mw):
    app = _app if mw is wsgi.LimitMiddleware else _aapp
    lines = ("abc", "99 Too Low", "503", "503 x\r\nX-Evil: 1")
    is_wsgi = mw is wsgi.LimitMiddleware
    for bad in (99, 600, 0, -503) + (lines if is_wsgi else ()):
        with pytest.raises(ValueError, match="^status="):
            mw(app, held="1GiB", status=bad)
    # ASGI's status is an int: a status line is a TypeError there.
    for bad in (None, 503.0, True, b"503 x") + (() if is_wsgi else lines):
        with pytest.raises(TypeError, match="^status="):
            mw(app, held="1GiB", status=bad)
    assert mw(app, held="1GiB", status=507).status in (
        507, "507 Insufficient Storage")
    if mw is wsgi.LimitMiddleware:
        assert mw(app, held="1GiB", status="413 Too Big").status == \
            "413 Too Big"
    else:
        with pytest.raises(TypeError, match="^status="):
            mw(app, held="1GiB", status="413 Too Big")


def test_global_limit_alone_is_a_limit():
    t = memlimits.limit(global_limit=True)
    with t:
        pass
    assert t.status is None
    with pytest.raises(TypeError, match="global_limit"):
        memlimits.limit(held="1GiB", global_limit="yes")


def test_measuring_task_has_no_limit():
    # A block to measure, with no limit: a Task(), not limit().
    with memlimits.Task() as t:
        keep = [str(i) for i in range(1000)]
    assert t.status is None and t.held_limit is None
    del keep


def test_fractions_as_the_command_reads_them():
    assert memlimits.parse_size("1.5G") == 3 * GiB // 2
    assert memlimits.parse_size("0.5k") == 512
    assert memlimits.parse_size("1.0001") == 1  # rounded down
    assert memlimits.parse_size("64b") == 64
    assert memlimits.parse_size("2gib") == 2 * GiB
    t = memlimits.limit(held="1.5G")
    assert t.held_limit == 3 * GiB // 2
    for bad in ("1.", ".5G", "1.5.5G", "1,5G", "64kk", "64 KiB", "64k "):
        with pytest.raises(ValueError):
            memlimits.parse_size(bad)


SIZES = ["1.5G", "64k", "64KiB", "64kb", "64b", "1", "0.5M", "2GiB", "1T",
         "1.0000001M", "64 k", " 64k", "64k ", "1e3", "1.", ".5", "-1",
         "0x10", "abc", "", "64KiBB", "\u0663\u0664", "18446744073709551615",
         "18446744073709551616", "0", "0k"]


def test_sizes_parse_as_in_the_command():
    # memlimits run --heap-limit SIZE true: 0 when the command takes the
    # size, 2 when it refuses it; limit(held=SIZE) takes it or raises.
    cmd = os.environ.get("ML_PY_MEMLIMITS")
    if not cmd or not os.path.exists(cmd):
        pytest.skip("no memlimits command (ML_PY_MEMLIMITS)")
    for s in SIZES:
        r = subprocess.run([cmd, "run", "--heap-limit", s, "true"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode in (0, 2), (s, r.returncode, r.stderr)
        try:
            memlimits.limit(held=s)
            py = True
        except ValueError:
            py = False
        assert py == (r.returncode == 0), (s, r.stderr)
