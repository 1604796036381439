"""The example app chart installed and upgraded with the real helm through the documented migration
sequence off -> transition -> on -> off (client-side apply; docs/chartgen.md) while KEDA
and the HPA run: the live Cluster never has fewer instances than the quorum floor (every
spec.instances value the CNPG stand-in sees is recorded), and a routine upgrade while autoscaling
is on keeps the HPA's count."""

import time

from helm import Helm, example_chart
from rig import POLL
from testkit import wait_until

NS = "tenant-migrate"
RELEASE = "mig"
REPLICAS = 3
FLOOR = 2
CNPG = "postgresql.cnpg.io/v1"
# Client-side apply: the mode the chart documents for migrating existing clusters.
CSA = "--server-side=false"


def values(address: str, replicas: int = REPLICAS, **autoscaling) -> dict:
    return {
        "replicas": replicas,
        "quorum": {"minSyncReplicas": 1, "maxSyncReplicas": 1},
        "autoscaling": {
            "scalerAddress": address, "minReplicas": FLOOR,
            "maxReplicas": 5, "target": 10, "metric": "ReadConnections",
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                         "scaleDown": {"stabilizationWindowSeconds": 3,
                                       "policies": [{"type": "Pods", "value": 1,
                                                     "periodSeconds": 5}]}},
            **autoscaling},
    }


def instances(rig) -> int:
    return rig.kube.get(CNPG, "Cluster", RELEASE, NS)["spec"]["instances"]


def settled(rig, since: float) -> bool:
    """True once spec.instances has been stable for 4 s (HPA sync is 3 s), counted from `since`."""
    series = rig.cnpg.series(NS, RELEASE)
    return bool(series) and time.monotonic() - max(series[-1][0], since) > 4


def check_floor(rig, step: str) -> None:
    seen = [v for _, v in rig.cnpg.series(NS, RELEASE)]
    assert all(v is not None and v >= FLOOR for v in seen), (
        f"spec.instances went below the floor {FLOOR} by step '{step}': {seen}")


def test_migration_never_drops_below_the_floor(rig, scaler):
    chart = example_chart()
    helm = Helm(rig.cp.kubeconfig, rig.dir / "helm")
    # Load that wants exactly the current count: 1 primary + ceil(20 / 10) = 3.
    rig.feeder.set(NS, RELEASE, connections=20)

    def step(name: str, replicas: int = REPLICAS, **auto) -> dict | None:
        start = time.monotonic()
        helm.upgrade_install(RELEASE, chart, NS, values(scaler.address, replicas, **auto), CSA)
        wait_until(lambda: rig.kube.get(CNPG, "Cluster", RELEASE, NS),
                   timeout=30, interval=POLL, what=f"Cluster after '{name}'")
        wait_until(lambda: settled(rig, start),
                   timeout=40, interval=POLL, what=f"a settled count after '{name}'")
        check_floor(rig, name)
        return rig.kube.get("keda.sh/v1alpha1", "ScaledObject", RELEASE, NS)

    assert step("off", enabled=False) is None
    assert instances(rig) == REPLICAS

    so = step("transition", enabled=True, transition=True)
    ann = so["metadata"].get("annotations", {})
    assert ann.get("autoscaling.keda.sh/paused-scale-in") == "true"
    assert ann.get("autoscaling.keda.sh/paused-scale-out") == "true"
    assert "autoscaling.keda.sh/paused" not in ann  # that one deletes the HPA
    assert instances(rig) == REPLICAS

    so = step("on", enabled=True, transition=False)
    assert not so["metadata"].get("annotations", {}).get("autoscaling.keda.sh/paused-scale-in")
    assert instances(rig) == REPLICAS
    # More load: the HPA takes the Cluster to 1 + ceil(30 / 10) = 4 ...
    rig.feeder.set(NS, RELEASE, connections=30)
    wait_until(lambda: instances(rig) == 4,
               timeout=60, interval=POLL, what="the HPA to raise the Cluster to 4")
    # ... and a routine upgrade of the release keeps the HPA's count (the seed is unchanged).
    step("on again", enabled=True, transition=False)
    assert instances(rig) == 4

    # Back off with replicas = the live count (the hand-back guard refuses anything else while the
    # HPA drives the count): the HPA is gone with the ScaledObject and the count stays.
    assert step("off", 4, enabled=False) is None
    wait_until(lambda: rig.kube.get("autoscaling/v2", "HorizontalPodAutoscaler", f"keda-hpa-{RELEASE}",
                                    NS) is None,
               timeout=30, interval=POLL, what="KEDA to remove the HPA")
    assert instances(rig) == 4
    check_floor(rig, "end")
