"""Three quick tests: what a healthy device job streams back."""

import os


def test_one():
    assert 1 + 1 == 2


def test_two():
    assert len("two") == 3


def test_three_reports_arch():
    # The device job sets the emulated architecture for the subprocess.
    assert os.environ.get("DFLASH2_DEVICE_ARCH", "").startswith("applegpu_")
