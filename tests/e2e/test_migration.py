"""The example app chart installed and upgraded with the real helm through the migration sequence
off -> transition -> on -> off, while KEDA and the HPA run: the live Cluster must never have fewer
instances than the quorum floor at any point (every spec.instances value the CNPG stand-in sees
is recorded)."""

import time

import pytest

from helm import Helm, example_chart
from rig import wait_for

NS = "tenant-migrate"
RELEASE = "mig"
REPLICAS = 3
FLOOR = 2


def values(rig, **autoscaling) -> dict:
    return {
        "replicas": REPLICAS,
        "quorum": {"minSyncReplicas": 1, "maxSyncReplicas": 1},
        "autoscaling": {
            "scalerAddress": f"127.0.0.1:{rig.scaler_port}", "minReplicas": FLOOR,
            "maxReplicas": 5, "target": 10, "metric": "ReadConnections",
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                         "scaleDown": {"stabilizationWindowSeconds": 3,
                                       "policies": [{"type": "Pods", "value": 1,
                                                     "periodSeconds": 5}]}},
            **autoscaling},
    }


@pytest.mark.parametrize("mode", ["omit", "seed"])
def test_migration_never_drops_below_the_floor(rig, mode):
    chart = example_chart()
    ns = f"{NS}-{mode}"
    helm = Helm(rig.cp.kubeconfig, rig.dir / "helm")
    # Load that wants exactly the current count: 1 primary + ceil(25 / 10) = 3.
    rig.feeder.set(ns, RELEASE, connections=25)
    steps = [("off", {"enabled": False}),
             ("transition", {"enabled": True, "transition": True, "replicaMode": mode}),
             ("on", {"enabled": True, "transition": False, "replicaMode": mode}),
             ("off", {"enabled": False})]
    for step, auto in steps:
        helm.upgrade_install(RELEASE, chart, ns, values(rig, **auto))
        wait_for(f"Cluster after '{step}'", lambda: live_in(rig, ns), timeout=30)
        # Let the HPA (3 s sync) act on what helm applied.
        wait_for(f"a settled count after '{step}'", lambda: settled(rig, ns), timeout=40)
        seen = [v for _, v in rig.cnpg.series(ns, RELEASE)]
        assert all(v is not None and v >= FLOOR for v in seen), (
            f"mode {mode}: spec.instances went below the floor {FLOOR} at step '{step}': {seen}")
        so = rig.kube.get("keda.sh/v1alpha1", "ScaledObject", RELEASE, ns)
        assert (so is not None) == auto["enabled"], f"ScaledObject presence wrong at '{step}'"
        if auto.get("transition"):
            ann = so["metadata"].get("annotations", {})
            assert ann.get("autoscaling.keda.sh/paused-scale-in") == "true"
            assert ann.get("autoscaling.keda.sh/paused-scale-out") == "true"
            assert "autoscaling.keda.sh/paused" not in ann
    assert live_in(rig, ns)["spec"]["instances"] == REPLICAS


def live_in(rig, ns):
    return rig.kube.get("postgresql.cnpg.io/v1", "Cluster", RELEASE, ns)


def settled(rig, ns) -> bool:
    """True once the last recorded spec.instances has been stable for 4 s."""
    series = rig.cnpg.series(ns, RELEASE)
    return bool(series) and time.monotonic() - series[-1][0] > 4
