"""Test-session settings every test and every `farm` subprocess it starts inherit."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# A warm fleet the developer keeps up (`farm fleet up`) must not be attached to by the tests'
# own `farm run`s: the tests look for warm-fleet state in an empty directory of their own
# (tests/test_fleet_up.py sets its own per test).
os.environ["FARM_STATE_DIR"] = _state = tempfile.mkdtemp(prefix="farm-test-state-")
atexit.register(shutil.rmtree, _state, True)
