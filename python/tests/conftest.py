import gc
import os
import sys

import pytest

# Imported first: the module takes pymalloc's arenas at import.
import memlimits  # noqa: F401


@pytest.fixture(autouse=True)
def _collect():
    # What an earlier test left for the collector is not this test's.
    gc.collect()
    yield


@pytest.fixture
def measured():
    """measured(line): a number for the report, not a check (make check
    has no wall-clock thresholds): appended to $ML_PY_MEASURED, which
    tests/python/test-python.sh prints as TAP comments, else stderr."""
    path = os.environ.get("ML_PY_MEASURED")

    def report(line):
        if path:
            with open(path, "a") as f:
                f.write(line + "\n")
        else:
            sys.stderr.write("# measured: %s\n" % line)
    return report
