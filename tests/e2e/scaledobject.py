"""The Cluster and ScaledObject of the closed-loop scenario.

Until the example app chart lands (charts/, issue 3), the ScaledObject is written here by hand with
the contract's trigger metadata; the HPA behaviour is shortened so the scenario takes seconds."""

TARGET = 10          # active read sessions one replica should carry
MAX = 5
MAX_SYNC = 1
FLOOR = max(2, MAX_SYNC + 1, 2)
DOWN_PERIOD = 6      # seconds per removed pod (Cozystack's default is 600)
LAG_LIMIT = 30


def cluster_and_scaledobject(rig, namespace: str, name: str) -> list[dict]:
    cluster = {
        "apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"instances": FLOOR, "storage": {"size": "1Gi"},
                 "postgresql": {"synchronous": {"method": "any", "number": MAX_SYNC}}},
    }
    scaled_object = {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster",
                               "name": name},
            "pollingInterval": 2,
            "minReplicaCount": FLOOR, "maxReplicaCount": MAX,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {
                "scaleUp": {"stabilizationWindowSeconds": 0,
                            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 5}]},
                "scaleDown": {"stabilizationWindowSeconds": 3,
                              "policies": [{"type": "Pods", "value": 1,
                                            "periodSeconds": DOWN_PERIOD}]}}}},
            "triggers": [{
                "type": "external", "metricType": "AverageValue",
                "metadata": {
                    "scalerAddress": f"127.0.0.1:{rig.scaler_port}", "cluster": name,
                    "metric": "ReadConnections", "target": str(TARGET),
                    "minReplicas": str(FLOOR), "maxReplicas": str(MAX),
                    "maxSyncReplicas": str(MAX_SYNC),
                    "maxReplicationLagSeconds": str(LAG_LIMIT), "dryRun": "false"}}],
        },
    }
    return [cluster, scaled_object]
