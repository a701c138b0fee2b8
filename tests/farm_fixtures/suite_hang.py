"""A test that hangs between two healthy ones: timeout, and the rest still run."""

import time


def test_before():
    pass


def test_hangs():
    time.sleep(3600)


def test_after():
    pass
