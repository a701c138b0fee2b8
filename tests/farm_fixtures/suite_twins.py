"""Sixteen short tests for twin nodes sharing one suite (tests/test_twins_cluster.py).

The first four are slow (1.5 s) and the rest quick (0.1 s): the twin that starts with the first
contiguous share falls behind, and its twin must steal from it. On a node started with
FARM_TWINS_VICTIM=1 every test takes 4 s, so the node is mid-test whenever it is killed.
"""

import os
import time

import pytest

VICTIM = os.environ.get("FARM_TWINS_VICTIM") == "1"


@pytest.mark.parametrize("n", range(16))
def test_piece(n):
    time.sleep(4.0 if VICTIM else 1.5 if n < 4 else 0.1)
