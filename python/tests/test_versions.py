"""CPython 3.9 to 3.13 (issue 42, item 7).  The module is built and this
suite run against each CPython the machine has by
tests/python/test-python-versions.sh; here, what holds on the version
running it."""
import subprocess
import sys

import pytest

import memlimits

CHILD = r"""
import sys
try:
    import _interpreters as si          # 3.13
    i = si.create("isolated")
    r = si.exec(i, "import memlimits")
    print("refused" if r is not None and "ImportError" in r.formatted
          else "imported: %r" % (r,))
except ImportError:
    import _xxsubinterpreters as si     # 3.12
    i = si.create(isolated=True)
    try:
        si.run_string(i, "import memlimits")
        print("imported")
    except Exception as e:
        print("refused" if "ImportError" in str(e) else "error: %s" % e)
"""


def test_counting_on_this_version():
    # The thread state's exception field and pymalloc's pool header are
    # read as this version lays them out (src/guard.c, src/pymalloc.c).
    caps = memlimits.capabilities()
    assert caps["counting"] in ("hooks", "preloaded"), (sys.version, caps)


@pytest.mark.skipif(sys.version_info < (3, 12),
                    reason="no interpreters with their own GIL before 3.12")
def test_own_gil_subinterpreter_refused():
    # The arena bitmap, the wrappers' switch and the refusal guard's
    # per-thread state assume one GIL: the module is single-phase (no
    # Py_mod_multiple_interpreters slot), so that an interpreter with a
    # GIL of its own refuses to import it, with ImportError.
    r = subprocess.run([sys.executable, "-c", CHILD], capture_output=True,
                       text=True, timeout=120)
    if "ModuleNotFoundError" in r.stderr:
        pytest.skip("no subinterpreter module in this build")
    assert r.stdout.strip() == "refused", (r.stdout, r.stderr[-2000:])


def test_stopped_block_unwinds_on_this_version():
    # The refusal guard lets the unwinding's own allocations through
    # (the exception field above): the block ends with LimitExceeded,
    # not a fatal error or a loop.
    with pytest.raises(memlimits.LimitExceeded):
        with memlimits.limit(held="8MiB"):
            keep = [str(i) for i in range(10 ** 7)]
            del keep
