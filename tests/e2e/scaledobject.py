"""The Cluster and ScaledObject of the closed-loop scenario, rendered from the example app chart
(charts/example-postgres, made by `chartgen app`) with `helm template`, as a platform would, with
the HPA behaviour shortened so the scenario takes seconds instead of hours. The chart's defaults
reference the package's ClusterTriggerAuthentication: KEDA dials the scaler over mTLS."""

from charts import example_chart
from helm import Helm

TARGET = 10          # active read sessions one replica should carry
MAX = 5
MAX_SYNC = 1
FLOOR = max(2, MAX_SYNC + 1)
DOWN_PERIOD = 6      # seconds per removed pod (the chart's default is 600)
LAG_LIMIT = 30
# The HPA behaviour of the closed loops: up at once, down one pod per DOWN_PERIOD.
FAST_BEHAVIOR = {
    "scaleUp": {"stabilizationWindowSeconds": 0},
    "scaleDown": {"stabilizationWindowSeconds": 3, "policies": [
        {"type": "Pods", "value": 1, "periodSeconds": DOWN_PERIOD}]}}


def cluster_and_scaledobject(rig, address: str, namespace: str, name: str,
                             **autoscaling) -> list[dict]:
    """`autoscaling` adds or overrides chart values of the block (e.g. schedules)."""
    values = {
        "replicas": FLOOR,
        "quorum": {"minSyncReplicas": MAX_SYNC, "maxSyncReplicas": MAX_SYNC},
        "autoscaling": {
            "enabled": True, "scalerAddress": address,
            "metric": "ReadConnections", "target": TARGET, "minReplicas": FLOOR,
            "maxReplicas": MAX, "maxReplicationLagSeconds": LAG_LIMIT,
            "behavior": FAST_BEHAVIOR,
            **autoscaling,
        },
    }
    docs = Helm(rig.dir / "helm", kubeconfig=rig.cp.kubeconfig).render(
        example_chart(), release=name, namespace=namespace, values=values)
    objs = [d for d in docs if d["kind"] in ("Cluster", "ScaledObject")]
    assert sorted(d["kind"] for d in objs) == ["Cluster", "ScaledObject"], docs
    for d in objs:
        d["metadata"]["namespace"] = namespace
    return objs
