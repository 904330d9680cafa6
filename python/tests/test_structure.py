"""The module's C source, split by concern (issue 42, item 8): each file
under 400 lines and opening with one comment that says its job, as lib/
does; the extension exports its init function alone (every name the files
share is hidden)."""
import glob
import os
import subprocess

import pytest

import memlimits

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def _sources():
    return sorted(glob.glob(os.path.join(SRC, "*.c")) +
                  glob.glob(os.path.join(SRC, "*.h")))


def test_split_by_concern():
    files = _sources()
    assert len(files) >= 4, files
    for path in files:
        with open(path) as f:
            text = f.read()
        lines = text.count("\n")
        assert lines < 400, "%s: %d lines" % (path, lines)
        assert text.startswith("/* "), "%s: no opening comment" % path
        first = text[:text.index("*/")]
        # One comment that says what the file does, in whole sentences.
        assert len(first.split()) >= 12, "%s: %r" % (path, first)


def test_exports_only_the_init():
    so = memlimits._memlimits.__file__
    try:
        out = subprocess.run(["nm", "-D", "--defined-only", so],
                             capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip("no nm: %s" % e)
    names = {line.split()[-1] for line in out.stdout.splitlines()
             if line.split() and line.split()[-2:-1] in (["T"], ["D"],
                                                        ["B"])}
    assert names == {"PyInit__memlimits"}, names
