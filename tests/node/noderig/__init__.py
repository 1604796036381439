"""The real-node rig: the e2e rig's etcd, kube-apiserver and kube-controller-manager plus a node
(containerd, runc, CNI, kubelet, kube-proxy, kube-scheduler, CoreDNS), all inside a network and
mount namespace the test process creates and enters (host.py), removed at the end."""

from __future__ import annotations

import shutil
import time
import sys
from pathlib import Path
from types import SimpleNamespace

from testkit import TOOLS, versions
from rig import REPO, binary
from rig.controlplane import Binaries, ControlPlane
from rig.kube import Kube
from rig.procs import Group

from . import host
from .node import DNS_IP, NETWORK, NODE_NAME, Containerd, Node, NodeBinaries


def node_binary(name: str, version: str) -> Path:
    path = TOOLS / "node/bin" / f"{name}-{version}"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run tests/node/setup.sh")
    return path


def source_build(name: str) -> Path:
    """The newest build of `name` tests/node/setup.sh linked with a version naming our own sources
    (`NAME-src-<hash>`: pause, probe, cert-manager's mains)."""
    found = sorted((TOOLS / "node/bin").glob(f"{name}-src-*"), key=lambda p: p.lstat().st_mtime)
    if not found:
        raise FileNotFoundError(f"{TOOLS}/node/bin/{name}-src-* is missing: run tests/node/setup.sh")
    return found[-1]


# What a run writes under its directory (images, PostgreSQL data and WAL, logs) with room to spare:
# the kubelet evicts every pod once its filesystem is nearly full, which reads as a broken cluster.
MIN_FREE_BYTES = 6 << 30
PRESSURES = ("DiskPressure", "MemoryPressure", "PIDPressure")


def check_free_space(where: Path, needed: int = MIN_FREE_BYTES) -> None:
    free = shutil.disk_usage(where).free
    if free < needed:
        raise RuntimeError(
            f"{where} has {free >> 20} MiB free; the real node needs {needed >> 30} GiB there (the kubelet "
            "evicts its pods when the disk nearly fills): free space, e.g. `cargo clean` in old clones")


class NodeRig:
    def __init__(self, workdir: Path, logs: Path, timings: dict[str, float]):
        self.dir = workdir
        self.logs = logs
        self.group = Group(logs)
        v = versions()
        self.cp_bins = Binaries(binary("etcd", v["ETCD_VERSION"]), binary("kube-apiserver", v["KUBE_VERSION"]),
                                binary("kube-controller-manager", v["KUBE_VERSION"]))
        self.node_bins = NodeBinaries(
            kubelet=node_binary("kubelet", v["KUBE_VERSION"]),
            scheduler=node_binary("kube-scheduler", v["KUBE_VERSION"]),
            proxy=node_binary("kube-proxy", v["KUBE_VERSION"]),
            coredns=node_binary("coredns", v["COREDNS_VERSION"]),
            pause=source_build("pause"), probe=source_build("probe"))
        self.run: host.Run | None = None
        self.timings = timings  # what -> seconds, filled by the rig and the tests

    def start(self) -> "NodeRig":
        check_free_space(self.dir)
        t = time.monotonic()
        # What the run reads from the host: the clone, the tools (with the venv), the build cache
        # their links point into, the interpreter.
        built = [b for b in (*vars(self.cp_bins).values(), *vars(self.node_bins).values()) if b]
        keep = (REPO, TOOLS, *(Path(b).resolve().parent.parent for b in built), Path(sys.prefix),
                Path(sys.executable).resolve().parent)
        self.run = host.start(self.dir, NETWORK.ip, (f"{NETWORK.service_prefix}.0/24",), keep)
        self.cp = ControlPlane(self.cp_bins, self.dir, self.group, node=NETWORK)
        self.kube = self.cp.start()
        self.timings["control plane"] = time.monotonic() - t
        self.node = Node(self.cp, self.run, self.node_bins, self.dir, self.group, self.timings).start(self.kube)
        # The processes beside the node (KEDA, the clients) resolve Service names as pods do.
        host.use_cluster_dns(self.run, DNS_IP)
        return self

    def pressure(self) -> str:
        return pressure(self.kube, self.dir)

    def attach_state(self, package: dict) -> dict:
        """What a session attached to this node needs (AttachedRig): the admin client's files,
        the run's directory, containerd's socket, and what the package fixture made."""
        return {"server": self.cp.server, "ca": str(self.cp.ca.cert), "cert": str(self.cp.admin.cert),
                "key": str(self.cp.admin.key), "kubeconfig": str(self.cp.kubeconfig), "dir": str(self.dir),
                "containerd_sock": str(self.node.containerd_sock), "package": package}

    def stop(self) -> list[str]:
        """Stops every process and removes the run's state; returns what could not be removed."""
        self.group.stop_all()
        if self.run:
            return host.cleanup(self.run)
        # Stopped before the run took the directory (e.g. too little free disk): still empty.
        shutil.rmtree(self.dir, ignore_errors=True)
        return []


class AttachedRig:
    """The node another pytest session started, as a session it spawned sees it (the Redis module
    beside the CNPG ones, tests/node/conftest.py): the same API, directory and containerd, and the
    node's namespaces, which a child process inherits. It starts and stops nothing."""

    def __init__(self, state: dict, timings: dict[str, float]):
        self.dir = Path(state["dir"])
        self.kube = Kube(state["server"], state["ca"], state["cert"], state["key"])
        self.cp = SimpleNamespace(kubeconfig=Path(state["kubeconfig"]))
        self.node = Containerd(Path(state["containerd_sock"]))
        self.package = state["package"]
        self.timings = timings

    def pressure(self) -> str:
        return pressure(self.kube, self.dir)


def pressure(kube: Kube, where: Path) -> str:
    """What the kubelet reported that makes pods vanish or wait: pressure conditions, evictions.
    Empty when there is none; attached to every failed test's report."""
    try:
        node = kube.get("v1", "Node", NODE_NAME)
        events = kube.list("v1", "Event", None)
    except Exception as e:  # the report must not hide the test's own failure
        return f"node state unreadable: {e}"
    found = [c["type"] for c in node.get("status", {}).get("conditions", [])
             if c["type"] in PRESSURES and c["status"] == "True"]
    evicted = sorted({f"{e['involvedObject'].get('namespace')}/{e['involvedObject'].get('name')}"
                      for e in events if e.get("reason") == "Evicted"})
    parts = [f"node conditions: {', '.join(found)}"] if found else []
    if evicted:
        parts.append(f"evicted: {', '.join(evicted)} (free: {shutil.disk_usage(where).free >> 20} MiB)")
    return "; ".join(parts)
