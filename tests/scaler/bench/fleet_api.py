"""A real kube-apiserver holding bench.py's fleet as objects, for `scaler serve`'s warm start
(docs/scaler.md): etcd and kube-apiserver of the e2e rig (built by tests/e2e/setup.sh, which
`./run.sh test` runs), no controllers, with KEDA's and CloudNativePG's CRDs at their pinned
versions. Per ScaledObject i: its namespace, a CNPG Cluster (2 instances, as its series say) and a
KEDA ScaledObject whose trigger metadata is exactly what the bench's GetMetrics requests carry
(side_by_side.request), so the keys the warm start makes are the ones the calls name."""
import concurrent.futures
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench import so
from keda import metadata
from testkit import REPO, crd_files

sys.path.insert(0, str(REPO / "tests/e2e"))
import rig  # noqa: E402
from rig.kube import Kube  # noqa: E402

# The scalerAddress keda.metadata() writes: what --scaler-address must name.
SCALER_ADDRESS = metadata()["scalerAddress"].split(".", 1)[0]
THREADS = 16
# What makes a scaler warm-start on this fleet: the address its ScaledObjects name, and time for 50,000.
WARM_FLAGS = ["--warm-start-timeout", "170s", "--scaler-address", SCALER_ADDRESS]


def cluster(i: int) -> dict:
    ns, name = so(i)
    return {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
            "metadata": {"name": name, "namespace": ns}, "spec": {"instances": 2}}


def scaled_object(i: int) -> dict:
    ns, name = so(i)
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"scaleTargetRef": {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": name},
                     "triggers": [{"type": "external",
                                   "metadata": metadata(name, target="5", max_replicas="10")}]}}


class FleetApi:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="fleet-api-"))
        (self.dir / "logs").mkdir()
        self.group = rig.Group(self.dir / "logs")
        v = rig.versions()
        self.cp = rig.ControlPlane(rig.Binaries(rig.binary("etcd", v["ETCD_VERSION"]),
                                                rig.binary("kube-apiserver", v["KUBE_VERSION"]), None),
                                   self.dir, self.group)

    @property
    def kubeconfig(self) -> str:
        return str(self.cp.kubeconfig)

    def scaler_options(self, env: dict | None = None) -> dict:
        """Scaler(...) keywords for a scaler reading this API server (--topology kube), with `env`."""
        return {"topology": "kube", "env": {**(env or {}), "KUBECONFIG": self.kubeconfig}}

    def start(self) -> "FleetApi":
        self.cp.start_apiserver()
        rig.install_crds(self.cp.kube, crd_files("keda", "cnpg"))
        return self

    def load(self, n: int) -> dict:
        """Creates the fleet's namespaces, then its Clusters and ScaledObjects, THREADS at a time;
        returns how long each part took."""
        admin = self.cp.kube

        def create_all(objects) -> float:
            started = time.monotonic()
            objects = list(objects)
            chunks = [objects[k::THREADS] for k in range(THREADS)]

            def create(chunk):
                k = Kube(admin.server, admin.ca, *admin.session.cert)  # a session per thread
                for obj in chunk:
                    k.create(obj)
            with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(create, chunks))  # raises the first failure
            return round(time.monotonic() - started, 1)

        namespaces = sorted({so(i)[0] for i in range(n)})
        return {"namespaces": len(namespaces),
                "namespaces_s": create_all({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
                                           for ns in namespaces),
                "clusters_s": create_all(cluster(i) for i in range(n)),
                "scaledobjects_s": create_all(scaled_object(i) for i in range(n))}

    def stop(self) -> None:
        self.group.stop_all()
        shutil.rmtree(self.dir, ignore_errors=True)
