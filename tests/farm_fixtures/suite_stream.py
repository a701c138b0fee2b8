"""Twenty short tests that stream results, then one that blocks: a driver killed mid-run
(tests/test_fault_battery.py) is killed while results are arriving and the job still runs."""

import time

import pytest


@pytest.mark.parametrize("i", range(20))
def test_quick(i):
    time.sleep(0.1)


def test_zz_blocks():
    time.sleep(600)
