"""`chartgen app` on the example chart: every autoscaling mode and guard, rendered by real helm 3
and helm 4, asserted on parsed objects that pass schema validation."""
import pytest

from conftest import EXAMPLE, PRISTINE, docs, one
from validate import defaulted, validate_all

ON = ["autoscaling.enabled=true"]
PAUSE_IN, PAUSE_OUT, PAUSED = (
    "autoscaling.keda.sh/paused-scale-in", "autoscaling.keda.sh/paused-scale-out", "autoscaling.keda.sh/paused")


@pytest.mark.parametrize("sets", [[], ["replicas=5", "quorum.maxSyncReplicas=2"]])
@pytest.mark.parametrize("keda", [True, False])
def test_off_renders_exactly_the_original_chart(helm, sets, keda):
    before = helm.template(PRISTINE, sets, keda)
    after = helm.template(EXAMPLE, sets, keda)
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    assert after.stdout == before.stdout
    objs = docs(after.stdout)
    validate_all(objs)
    assert [o["kind"] for o in objs] == ["Cluster"]
    assert one(objs, "Cluster")["spec"]["instances"] == (5 if sets else 2)


def test_on_omits_instances_and_renders_the_scaledobject(helm):
    objs = helm.render(EXAMPLE, ON + ["replicas=3"])
    cluster = one(objs, "Cluster")
    assert "instances" not in cluster["spec"]
    # Documented hazard of omit mode: the API server defaults the field to CNPG's 1 until
    # KEDA's HPA raises it to minReplicaCount (docs/chartgen.md, "omit vs seed").
    assert defaulted(cluster)["spec"]["instances"] == 1
    so = one(objs, "ScaledObject", "pg")
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    assert not so["metadata"].get("annotations"), "active autoscaling must not be paused"
    spec = so["spec"]
    assert spec["scaleTargetRef"] == {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": "pg"}
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 6)
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"] == {"stabilizationWindowSeconds": 300}
    assert behavior["scaleDown"] == {"stabilizationWindowSeconds": 1800,
                                     "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}]}
    [trigger] = spec["triggers"]
    assert trigger["type"] == "external" and trigger["metricType"] == "AverageValue"
    assert trigger["metadata"] == {
        "scalerAddress": "cozy-autoscaling-scaler.cozy-autoscaling.svc:6000",
        "cluster": "pg", "metric": "ReadConnections", "target": "150", "minReplicas": "2",
        "maxReplicas": "6", "maxSyncReplicas": "0", "maxReplicationLagSeconds": "0", "dryRun": "false",
    }


def test_floor_is_max_of_min_quorum_and_two(helm):
    objs = helm.render(EXAMPLE, ON + ["autoscaling.minReplicas=1", "quorum.maxSyncReplicas=3",
                                      "replicas=4", "autoscaling.metric=ReadCPUUtilization",
                                      "autoscaling.target=400", "autoscaling.maxReplicationLagSeconds=30"])
    so = one(objs, "ScaledObject")
    assert so["spec"]["minReplicaCount"] == 4
    md = so["spec"]["triggers"][0]["metadata"]
    assert (md["minReplicas"], md["maxSyncReplicas"], md["metric"], md["target"], md["maxReplicationLagSeconds"]) == (
        "4", "3", "ReadCPUUtilization", "400", "30")
    floor_two = one(helm.render(EXAMPLE, ON + ["autoscaling.minReplicas=0"]), "ScaledObject")
    assert floor_two["spec"]["minReplicaCount"] == 2


@pytest.mark.parametrize("mode,dry", [("autoscaling.transition=true", "false"), ("autoscaling.dryRun=true", "true")])
def test_transition_and_dry_run_keep_the_count_and_pause_both_ways(helm, mode, dry):
    objs = helm.render(EXAMPLE, ON + [mode, "replicas=3"])
    assert one(objs, "Cluster")["spec"]["instances"] == 3
    so = one(objs, "ScaledObject")
    ann = so["metadata"]["annotations"]
    assert ann == {PAUSE_IN: "true", PAUSE_OUT: "true"}
    assert PAUSED not in ann, "autoscaling.keda.sh/paused deletes the HPA"
    assert so["spec"]["triggers"][0]["metadata"]["dryRun"] == dry


@pytest.mark.parametrize("replicas,seed", [(1, 3), (5, 5)])
def test_seed_mode_renders_the_constant_max_of_replicas_and_floor(helm, replicas, seed):
    objs = helm.render(EXAMPLE, ON + ["autoscaling.replicaMode=seed", f"replicas={replicas}",
                                      "autoscaling.minReplicas=3"])
    assert one(objs, "Cluster")["spec"]["instances"] == seed
    assert not one(objs, "ScaledObject")["metadata"].get("annotations")


def test_seed_mode_in_transition_is_still_static(helm):
    objs = helm.render(EXAMPLE, ON + ["autoscaling.replicaMode=seed", "autoscaling.transition=true",
                                      "replicas=1", "autoscaling.minReplicas=3"])
    assert one(objs, "Cluster")["spec"]["instances"] == 1


def test_behavior_is_overridable(helm):
    objs = helm.render(EXAMPLE, ON + ["autoscaling.behavior.scaleDown.stabilizationWindowSeconds=60"])
    behavior = one(objs, "ScaledObject")["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 60


@pytest.mark.parametrize("sets,keda,message", [
    ([], False, "needs KEDA"),
    (["autoscaling.target=0"], True, "autoscaling.target must be at least 1"),
    (["autoscaling.minReplicas=5", "autoscaling.maxReplicas=4"], True, "below the quorum floor 5"),
    (["quorum.maxSyncReplicas=6", "autoscaling.maxReplicas=6"], True, "below the quorum floor 7"),
    (["replicas=8", "autoscaling.maxReplicas=6"], True, "replicas (8) is above autoscaling.maxReplicas (6)"),
    (["autoscaling.maxReplicas=101"], True, "above the hard ceiling of 100"),
    (["autoscaling.scalerAddress="], True, "autoscaling.scalerAddress is empty"),
])
@pytest.mark.parametrize("mode", [[], ["autoscaling.transition=true"]])
def test_guards_fail_the_render_with_the_fix(helm, sets, keda, message, mode):
    out = helm.template(EXAMPLE, ON + mode + sets, keda)
    assert out.returncode != 0, f"{helm.name} rendered despite {sets}"
    assert message in out.stderr, out.stderr


def test_guard_boundaries_render(helm):
    """The values right at each limit are accepted: the guards are not off by one."""
    objs = helm.render(EXAMPLE, ON + ["autoscaling.target=1", "autoscaling.maxReplicas=100", "replicas=100"])
    assert one(objs, "ScaledObject")["spec"]["maxReplicaCount"] == 100


def test_schema_rejects_unknown_modes(helm):
    out = helm.template(EXAMPLE, ON + ["autoscaling.replicaMode=sometimes"])
    assert out.returncode != 0 and "replicaMode" in out.stderr
