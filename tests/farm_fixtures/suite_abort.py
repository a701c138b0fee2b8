"""A test that kills its interpreter between two healthy ones: crashed, and the rest still run."""

import os


def test_before():
    pass


def test_aborts():
    os.abort()


def test_after():
    pass
