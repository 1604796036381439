"""One rig per pytest session: every scenario runs against the same control plane, each in its own
namespaces. Logs of every process stay in the session's temp dir (path printed on failure)."""

import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))  # testkit

from rig import Rig  # noqa: E402
import scaleadapter  # noqa: E402
import secured  # noqa: E402


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


# A CI timeout or ^C must still run the fixture teardown that stops every process of the rig.
signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope="session")
def rig(request):
    workdir = Path(tempfile.mkdtemp(prefix="cozy-e2e-"))
    r = Rig(workdir)
    try:
        r.start()
    except BaseException:
        r.stop()
        print(f"\nrig failed to start; logs in {r.logs}")
        raise
    yield r
    r.stop()
    if os.environ.get("E2E_KEEP") == "1" or request.session.testsfailed:
        print(f"\nrig logs kept in {r.logs}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def package(rig):
    """The package chart installed with the real helm: (helm, chart)."""
    return secured.install_package(rig)


@pytest.fixture(scope="session")
def scaler(rig, package):
    """The scaler every scenario's ScaledObjects dial, over mTLS as the package wires it."""
    return secured.SecuredScaler(rig).start()


@pytest.fixture(scope="module")
def scale_adapter(rig, package):
    """The scale adapter controller (scaleadapter.py), leading, for the module that asks for it."""
    proc = scaleadapter.start(rig, package)
    yield proc
    proc.stop()
