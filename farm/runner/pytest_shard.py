"""pytest plugin the farm loads into a twin's device job (``-p farm.runner.pytest_shard``): the
tests this pytest runs are pulled one at a time from the job's queue instead of run in order.

The device job that spawned it answers over a pipe pair named by ``FARM_SHARD_FDS`` ("R,W": this
process reads answers from R and writes requests to W, one JSON object per line). Once collection
is over it sends ``{"op": "collected", "ids": [...]}``, then asks ``{"op": "next"}`` and gets
``{"id": nodeid}`` or ``{"id": null}`` (nothing left). Like an xdist worker it keeps one test in
hand beyond the one running, so the running test's teardown knows the next item (module and
session fixtures stay up between neighbours). A test it did not collect is named back
(``{"op": "missing", "id": ...}``) for the device job to report. No Ray and no farm import
here: the device job does the talking to the queue.
"""

from __future__ import annotations

import json
import os

import pytest

from farm.runner.shard_relay import ENV_SHARD_FDS


class Channel:
    def __init__(self, spec: str):
        r, w = (int(x) for x in spec.split(","))
        self.rfile = os.fdopen(r, "rb")
        self.wfd = w

    def send(self, msg: dict) -> None:
        os.write(self.wfd, (json.dumps(msg) + "\n").encode())

    def next(self) -> str | None:
        try:
            self.send({"op": "next"})
            line = self.rfile.readline()
        except OSError:  # the device job is gone: nothing more to run
            return None
        if not line:
            return None
        answer = json.loads(line)
        return answer.get("id") if isinstance(answer, dict) else None


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    spec = os.environ.get(ENV_SHARD_FDS)
    if not spec:
        return None  # pytest's own loop
    if session.testsfailed and not session.config.option.continue_on_collection_errors:
        n = session.testsfailed
        raise session.Interrupted(f"{n} error{'s' if n != 1 else ''} during collection")
    if session.config.option.collectonly:
        return True
    chan = Channel(spec)
    items = {item.nodeid: item for item in session.items}
    chan.send({"op": "collected", "ids": list(items)})
    current = chan.next()
    while current is not None:
        following = chan.next()
        item = items.get(current)
        if item is None:
            chan.send({"op": "missing", "id": current})
        else:
            nextitem = items.get(following) if following is not None else None
            item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        if session.shouldfail:
            raise session.Failed(session.shouldfail)
        if session.shouldstop:
            raise session.Interrupted(session.shouldstop)
        current = following
    return True
