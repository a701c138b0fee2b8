"""Forty-eight tests of 0.5 s each spent waiting on the device, not on the host's CPU (a kernel
running on a Mac's GPU): what twins can share without contending for the driver host's cores.
Timed by bench/bench_twins.py."""

import time

import pytest


@pytest.mark.parametrize("n", range(48))
def test_device_bound(n):
    time.sleep(0.5)
