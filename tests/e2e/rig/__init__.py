"""The end-to-end rig: a real control plane, KEDA, VictoriaMetrics, our scaler and a CNPG stand-in,
all processes on loopback, built by tests/e2e/setup.sh into $COZY_TOOLS/e2e."""

from __future__ import annotations

from pathlib import Path

from testkit import TOOLS, cargo_bin, crd_files as upstream_crd_files, upstream, versions, wait_until
from vm import VictoriaMetrics

from . import keda
from .cnpg import CnpgStandIn
from .controlplane import Binaries, ControlPlane
from .kube import ApiError, Kube, load_yaml_docs
from .metrics import Feeder
from .procs import POLL, Group

REPO = Path(__file__).resolve().parents[3]


def binary(name: str, version: str) -> Path:
    path = TOOLS / "e2e/bin" / f"{name}-{version}"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run tests/e2e/setup.sh")
    return path


def crd_files() -> list[Path]:
    # CNPG's Pooler CRD (a /scale without labelSelectorPath) for the ScaleAdapter's Pooler target.
    return [*upstream_crd_files("keda", "helm-controller", "source-controller", "cnpg", "redis-operator",
                                "cert-manager"),
            upstream("cnpg-operator") / "postgresql.cnpg.io_poolers.yaml"]


def install_crds(kube: Kube, files: list[Path]) -> None:
    names = []
    for f in files:
        for doc in load_yaml_docs(f.read_text()):
            # A create, not a server-side apply (field ownership over a whole schema): applying
            # the large CRDs (KEDA's ScaledJob 670 kB, the RedisFailover 800 kB) once outlasted the
            # 30 s client timeout on a busy 2-core machine.
            try:
                kube.create(doc)
            except ApiError as e:
                if e.status != 409:
                    raise
                kube.apply(doc)
            names.append(doc["metadata"]["name"])

    def established():
        for n in names:
            crd = kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", n) or {}
            if not any(c["type"] == "Established" and c["status"] == "True"
                       for c in crd.get("status", {}).get("conditions", [])):
                return False
        return True

    wait_until(established, timeout=60, interval=POLL, what="CRDs Established")


class Rig:
    def __init__(self, workdir: Path):
        self.dir = workdir
        self.logs = workdir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.group = Group(self.logs)
        v = versions()
        self.versions = v
        self.cp = ControlPlane(Binaries(binary("etcd", v["ETCD_VERSION"]),
                                        binary("kube-apiserver", v["KUBE_VERSION"]),
                                        binary("kube-controller-manager", v["KUBE_VERSION"])),
                               workdir, self.group)
        self._keda_bins = (binary("keda-operator", v["KEDA_VERSION"]),
                           binary("keda-adapter", v["KEDA_VERSION"]))
        # Started by the tests (secured.py), once the package's objects are installed.
        self.scaler_bin = cargo_bin("scaler")
        if not self.scaler_bin.is_file():
            raise FileNotFoundError(f"{self.scaler_bin} is missing: cargo build -p cli")
        self.cnpg: CnpgStandIn | None = None
        self.keda: keda.Keda | None = None
        self.feeder: Feeder | None = None

    def start(self) -> "Rig":
        self.kube = self.cp.start()
        install_crds(self.kube, crd_files())
        self.cnpg = CnpgStandIn(self.kube).start()
        # The feeder's own connection: it reads RedisFailovers from its thread.
        self._redis_kube = Kube(self.kube.server, self.kube.ca, *self.kube.session.cert)
        self.keda = keda.start(self.cp, *self._keda_bins, self.group)
        self.vm = VictoriaMetrics(self.dir, spawn=self.group.start).start()
        self.feeder = Feeder(self.vm, self.cnpg, redis_replicas=self._redis_replicas).start()
        return self

    def _redis_replicas(self, namespace: str, name: str) -> int | None:
        """spec.redis.replicas of a RedisFailover: the Redis operator is absent, so the feeder
        plays its pods' exporters at that count."""
        rf = self._redis_kube.get("databases.spotahome.com/v1", "RedisFailover", name, namespace) or {}
        return rf.get("spec", {}).get("redis", {}).get("replicas")

    def stop(self) -> None:
        for part in (self.feeder, self.cnpg):
            if part:
                part.stop()
        self.group.stop_all()


__all__ = ["Rig", "Kube", "REPO", "TOOLS", "POLL"]
