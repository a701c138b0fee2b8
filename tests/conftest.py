"""Test-session settings every test and every `farm` subprocess it starts inherit."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

# A warm fleet the developer keeps up (`farm fleet up`) must not be attached to by the tests'
# own `farm run`s: the tests look for warm-fleet state in an empty directory of their own
# (tests/test_fleet_up.py sets its own per test).
# A pytest that a test starts (a device job running tests/farm_fixtures/, an xdist worker)
# loads this file too: it keeps the outer session's directory, which only that session removes
# (a device job killed by a test's SIGKILL removes nothing: 86 empty directories were left in
# /tmp by one afternoon's test runs when each such pytest made its own).
_outer = os.environ.get("FARM_STATE_DIR", "")
_OWN = not (os.path.basename(_outer).startswith("farm-test-state-") and os.path.isdir(_outer))
if _OWN:
    os.environ["FARM_STATE_DIR"] = _state = tempfile.mkdtemp(prefix="farm-test-state-")
    atexit.register(shutil.rmtree, _state, True)
