"""One real node per pytest session. The rig enters its own network and mount namespace, so it
starts before pytest runs any thread; logs stay in a directory printed on failure."""

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "lib"))  # testkit
sys.path.insert(0, str(HERE.parents[0] / "e2e"))  # rig (control plane, API client)

from noderig import NodeRig  # noqa: E402


INTERRUPTED = []


def _interrupt(signum, frame):
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


# A CI timeout or ^C must still run the teardown that removes the node (and keep its logs).
signal.signal(signal.SIGTERM, _interrupt)
signal.signal(signal.SIGINT, _interrupt)


# The figures the run measured, printed at the end (docs/e2e.md, Real node).
TIMINGS: dict[str, float] = {}


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.section("real node figures")
        for what, seconds in TIMINGS.items():
            terminalreporter.write_line(f"{what:50s} {seconds:7.1f} s")


@pytest.fixture(scope="session")
def node(request):
    # Outside /tmp: the run's directory becomes the node's private /tmp (noderig/host.py).
    workdir = Path(tempfile.mkdtemp(prefix="cozy-node-", dir="/var/tmp"))
    logs = Path(tempfile.mkdtemp(prefix="cozy-node-logs-", dir="/var/tmp"))
    r = NodeRig(workdir, logs, TIMINGS)
    try:
        r.start()
        yield r
    finally:
        problems = r.stop()
        if os.environ.get("NODE_KEEP") == "1" or request.session.testsfailed or problems or INTERRUPTED:
            print(f"\nnode logs kept in {logs}")
        else:
            shutil.rmtree(logs, ignore_errors=True)
        if problems:
            pytest.fail(f"the node's cleanup left: {problems}")
