"""Four tests sharing one module-scoped fixture that notes each set-up in FARM_FIXTURE_SETUPS:
a twin that pulls its tests one at a time must still set it up once, not once per test."""

import os

import pytest


@pytest.fixture(scope="module")
def shared():
    with open(os.environ["FARM_FIXTURE_SETUPS"], "a") as f:
        f.write("setup\n")
    return 42


@pytest.mark.parametrize("n", range(4))
def test_uses_shared(shared, n):
    assert shared == 42
