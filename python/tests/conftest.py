import gc
import os
import sys

import pytest

import memlimits


@pytest.fixture(autouse=True)
def _collect():
    # What an earlier test left for the collector is not this test's.
    gc.collect()
    yield
