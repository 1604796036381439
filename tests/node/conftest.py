"""One real node per pytest session. The rig enters its own network and mount namespace, so it
starts before pytest runs any thread; logs stay in a directory printed on failure."""

import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "lib"))  # testkit
sys.path.insert(0, str(HERE.parents[0] / "e2e"))  # rig (control plane, API client)

from noderig import NodeRig, node_binary  # noqa: E402
from noderig import package as packaged  # noqa: E402
from noderig.cnpg import (CLUSTER, CLUSTER_NAMESPACE, POOLER, Operator, pod_monitor_scrape_config,  # noqa: E402
                          pooler_pod_monitor_scrape_config, provide_volumes)
from noderig.node import NETWORK  # noqa: E402
from noderig.redis import FAILOVER, REDIS_NAMESPACE, redis_scrape_config  # noqa: E402
from testkit import TOOLS, upstream, versions  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402


INTERRUPTED = []


def _interrupt(signum, frame):
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


# A CI timeout or ^C must still run the teardown that removes the node (and keep its logs).
signal.signal(signal.SIGTERM, _interrupt)
signal.signal(signal.SIGINT, _interrupt)


# The figures the run measured, printed at the end (docs/e2e.md, Real node).
TIMINGS: dict[str, float | int | str] = {}


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.section("real node figures")
        for what, value in TIMINGS.items():
            # Seconds, a count (an int) or what happened (a str).
            shown = (value if isinstance(value, str) else f"{value:7d}" if isinstance(value, int)
                     else f"{value:7.1f} s")
            terminalreporter.write_line(f"{what:50s} {shown}")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test's report says whether the kubelet was evicting or under pressure: a full disk
    otherwise reads as pods that vanished and an operator that stopped working."""
    outcome = yield
    report = outcome.get_result()
    rig = item.funcargs.get("node") if report.failed else None
    if isinstance(rig, NodeRig) and (pressure := rig.pressure()):
        report.sections.append(("node pressure", pressure))


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


@pytest.fixture(scope="session")
def cnpg(node):
    """The real CloudNativePG operator as a pod, with static volumes for the suite's Cluster."""
    t = time.monotonic()
    provide_volumes(node.kube, node.dir / "pv", 8)
    op = Operator(node.node, node.kube, node_binary("cnpg-manager", versions()["CNPG_OPERATOR_VERSION"]),
                  upstream("cnpg-operator"), TOOLS / "node/rootfs/postgresql.tar").install()
    TIMINGS["CNPG operator available"] = time.monotonic() - t
    return op


@pytest.fixture(scope="session")
def metrics(node):
    """VictoriaMetrics on the node's address (the scaler's pods query it), scraping the suite's
    Cluster and Pooler with the jobs CNPG's PodMonitors produce, the RedisFailover's exporters, and
    the kubelet's cAdvisor."""
    config = node.dir / "scrape.json"
    config.write_text(json.dumps({"scrape_configs": [
        pod_monitor_scrape_config(node.cp, CLUSTER_NAMESPACE, CLUSTER),
        pooler_pod_monitor_scrape_config(node.cp, CLUSTER_NAMESPACE, POOLER),
        redis_scrape_config(node.cp, REDIS_NAMESPACE, FAILOVER), node.node.cadvisor_scrape_config()]}))
    return VictoriaMetrics(node.dir / "vm", extra_args=(f"-promscrape.config={config}",),
                           spawn=node.group.start, host=NETWORK.ip).start()


@pytest.fixture(scope="session")
def package(node, cnpg, metrics):
    """The package installed with helm, as pods of the project's image (noderig/package.py)."""
    return packaged.install(node, metrics)


@pytest.fixture(scope="session")
def keda_running(node, package):
    packaged.start_keda(node)
