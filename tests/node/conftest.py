"""One real node per pytest session. The rig enters its own network and mount namespace, so it
starts before pytest runs any thread; logs stay in a directory printed on failure.

The Redis module (test_5_redis.py) shares nothing with the CNPG modules but the node and the
package, so it runs beside them: test_9_beside.py's session starts it as a pytest of its own, a
child process that inherits the node's namespaces and attaches to the rig (NODE_ATTACH names the
state file; noderig.AttachedRig), while the CNPG loop runs, and waits for it at the end."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[0] / "lib"))  # testkit
sys.path.insert(0, str(HERE.parents[0] / "e2e"))  # rig (control plane, API client)

from noderig import AttachedRig, NodeRig, node_binary  # noqa: E402
from noderig import package as packaged  # noqa: E402
from noderig.cnpg import (CLUSTER, CLUSTER_NAMESPACE, POOLER, Operator, pod_monitor_scrape_config,  # noqa: E402
                          pooler_pod_monitor_scrape_config, provide_volumes)
from noderig.node import NETWORK  # noqa: E402
from noderig.redis import FAILOVER, REDIS_NAMESPACE, redis_scrape_config  # noqa: E402
from testkit import TOOLS, Proc, upstream, versions  # noqa: E402
from vm import VictoriaMetrics  # noqa: E402


INTERRUPTED = []
# Set in the Redis module's own session: the state file of the node it attaches to.
ATTACH = os.environ.get("NODE_ATTACH")
if not ATTACH:
    collect_ignore = ["test_5_redis.py"]  # run by test_9_beside.py's child session


def _interrupt(signum, frame):
    INTERRUPTED.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


# A CI timeout or ^C must still run the teardown that removes the node (and keep its logs).
signal.signal(signal.SIGTERM, _interrupt)
signal.signal(signal.SIGINT, _interrupt)


# The figures the run measured, printed at the end (docs/e2e.md, Real node).
TIMINGS: dict[str, float | int | str] = {}


def pytest_terminal_summary(terminalreporter):
    if ATTACH:
        # The parent session prints them with its own (test_9_beside.py).
        Path(ATTACH).with_name("redis-timings.json").write_text(json.dumps(TIMINGS))
        return
    for title, text in BESIDE_OUTPUT:
        terminalreporter.section(title)
        terminalreporter.write_line(text)
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
    if isinstance(rig, (NodeRig, AttachedRig)) and (pressure := rig.pressure()):
        report.sections.append(("node pressure", pressure))


@pytest.fixture(scope="session")
def node(request):
    if ATTACH:
        yield AttachedRig(json.loads(Path(ATTACH).read_text()), TIMINGS)
        return
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
def package(request, node):
    """The package installed with helm, as pods of the project's image (noderig/package.py), with
    the CNPG operator (its Cluster index watches Clusters) and VictoriaMetrics; an attached session
    gets what its parent installed."""
    if isinstance(node, AttachedRig):
        return node.package
    request.getfixturevalue("cnpg")
    return packaged.install(node, request.getfixturevalue("metrics"))


@pytest.fixture(scope="session")
def keda_running(node, package):
    if not isinstance(node, AttachedRig):
        packaged.start_keda(node)


# (title, text) sections the terminal summary prints: the Redis module's own report.
BESIDE_OUTPUT: list[tuple[str, str]] = []
BESIDE_TIMEOUT = 900


class Beside:
    """The Redis module's pytest session, running on this session's node."""

    def __init__(self, node: NodeRig, package: dict):
        state = node.dir / "attach.json"
        state.write_text(json.dumps(node.attach_state(package)))
        self.output = node.logs / "redis-module.log"
        self.timings = state.with_name("redis-timings.json")
        self.proc = Proc([sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "--durations=10",
                          f"--basetemp={node.dir / 'pytest-redis'}", HERE / "test_5_redis.py"],
                         self.output, env={"NODE_ATTACH": str(state)}, name="redis-module")
        self.started = time.monotonic()

    def wait(self) -> tuple[int | str, str]:
        """Its exit status and output; its output and figures join this session's report. Past
        BESIDE_TIMEOUT it is stopped (its teardown runs) and its output tells where it was."""
        try:
            code = self.proc.popen.wait(timeout=max(1.0, BESIDE_TIMEOUT - (time.monotonic() - self.started)))
        except subprocess.TimeoutExpired:
            self.stop()
            code = f"stopped after {BESIDE_TIMEOUT} s"
        if self.timings.is_file():
            TIMINGS.update(json.loads(self.timings.read_text()))
        output = self.output.read_text(errors="replace")
        BESIDE_OUTPUT.append(("the Redis module (test_5_redis.py), run beside the CNPG modules", output.rstrip()))
        return code, output

    def stop(self) -> None:
        # SIGTERM to the pytest process alone: its conftest turns it into its teardown, which
        # stops its own children (a signal to the whole group would cut them off mid-teardown).
        self.proc.signal()
        self.proc.reap(timeout=120)


@pytest.fixture(scope="session")
def redis_beside(node, package, keda_running):
    """Starts the Redis module beside whatever this session runs next (test_9_beside.py waits)."""
    beside = Beside(node, package)
    yield beside
    beside.stop()


@pytest.fixture(scope="session")
def redis_started_if_run(request):
    """Starts the Redis module now when this session runs it (test_9_beside.py is selected), so it
    runs beside the scenarios of the fixture that asks for this instead of after them."""
    if any(item.path.name == "test_9_beside.py" for item in request.session.items):
        request.getfixturevalue("redis_beside")
