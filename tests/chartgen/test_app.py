"""`chartgen app` on the example chart: every autoscaling mode and guard, rendered by real helm 3
and helm 4, asserted on parsed objects that pass schema validation."""
import os
import shutil
import subprocess

import pytest

from conftest import CHARTGEN, EXAMPLE, PRISTINE, REPO, docs, one
from test_reproducible import tree
from validate import validate_all

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


def test_on_renders_the_count_and_the_scaledobject(helm):
    objs = helm.render(EXAMPLE, ON + ["replicas=3"], kube_version="1.34.0")
    # Never omitted: `helm template` has no live Cluster to look up, so the count is
    # max(replicas, floor); installs and upgrades render the live count (tests/e2e).
    assert one(objs, "Cluster")["spec"]["instances"] == 3
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


@pytest.mark.parametrize("replicas,count", [(1, 3), (5, 5)])
def test_without_a_live_cluster_the_count_is_replicas_raised_to_the_floor(helm, replicas, count):
    objs = helm.render(EXAMPLE, ON + [f"replicas={replicas}", "autoscaling.minReplicas=3"])
    assert one(objs, "Cluster")["spec"]["instances"] == count
    assert not one(objs, "ScaledObject")["metadata"].get("annotations")


def test_transition_is_static_even_below_the_floor(helm):
    objs = helm.render(EXAMPLE, ON + ["autoscaling.transition=true", "replicas=1", "autoscaling.minReplicas=3"])
    assert one(objs, "Cluster")["spec"]["instances"] == 1


def behavior(objs):
    return one(objs, "ScaledObject")["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]


@pytest.mark.parametrize("kube", ["1.35.0", "1.37.2", "v1.35.1-gke.1200"])
def test_tolerance_is_rendered_both_ways_from_kubernetes_1_35(helm, kube):
    b = behavior(helm.render(EXAMPLE, ON, kube_version=kube))
    assert b["scaleUp"] == {"stabilizationWindowSeconds": 300, "tolerance": "0"}
    assert b["scaleDown"]["tolerance"] == "0" and b["scaleDown"]["stabilizationWindowSeconds"] == 1800


@pytest.mark.parametrize("kube", ["1.33.0", "1.34.9"])
def test_no_tolerance_before_kubernetes_1_35(helm, kube):
    b = behavior(helm.render(EXAMPLE, ON, kube_version=kube))
    assert "tolerance" not in b["scaleUp"] and "tolerance" not in b["scaleDown"]


def test_tolerance_value_null_and_per_direction_override(helm):
    b = behavior(helm.render(EXAMPLE, ON + ["autoscaling.tolerance=2", "autoscaling.behavior.scaleDown.tolerance=0.5"],
                             kube_version="1.36.0"))
    assert (b["scaleUp"]["tolerance"], b["scaleDown"]["tolerance"]) == ("2", "0.5")
    b = behavior(helm.render(EXAMPLE, ON + ["autoscaling.tolerance=null"], kube_version="1.36.0"))
    assert "tolerance" not in b["scaleUp"] and "tolerance" not in b["scaleDown"]
    # Without any behaviour the tolerance alone is rendered.
    b = behavior(helm.render(EXAMPLE, ON + ["autoscaling.behavior.scaleUp=null", "autoscaling.behavior.scaleDown=null"], kube_version="1.36.0"))
    assert b == {"scaleUp": {"tolerance": "0"}, "scaleDown": {"tolerance": "0"}}
    out = helm.template(EXAMPLE, ON + ["autoscaling.tolerance=-1"])
    assert out.returncode != 0 and "tolerance" in out.stderr


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


def test_schema_rejects_unknown_metrics(helm):
    out = helm.template(EXAMPLE, ON + ["autoscaling.metric=Writes"])
    assert out.returncode != 0 and "metric" in out.stderr


SCHEDULE = ["autoscaling.schedules[0].cron=0 8 * * 1-5", "autoscaling.schedules[0].duration=10h",
            "autoscaling.schedules[0].floor=4", "autoscaling.schedules[0].timeZone=Europe/Berlin",
            "autoscaling.schedules[1].cron=0 22 * * *", "autoscaling.schedules[1].duration=8h",
            "autoscaling.schedules[1].scaleIn=disabled"]


def test_signals_schedules_and_scale_in_render_as_trigger_metadata(helm):
    signals = ["autoscaling.signals[0].metric=ReadCPUUtilization", "autoscaling.signals[0].target=400",
               "autoscaling.signals[1].metric=ReadConnectionUsage", "autoscaling.signals[1].target=70"]
    md = one(helm.render(EXAMPLE, ON + SCHEDULE + signals + ["autoscaling.scaleIn=disabled"]),
             "ScaledObject")["spec"]["triggers"][0]["metadata"]
    assert md["signals"] == "ReadCPUUtilization=400,ReadConnectionUsage=70"
    assert md["scaleIn"] == "disabled"
    assert md["schedules"] == "0 8 * * 1-5 for 10h floor 4 in Europe/Berlin; 0 22 * * * for 8h scaleIn disabled"
    # Without them the trigger carries neither key: ScaledObjects render exactly as before.
    md = one(helm.render(EXAMPLE, ON + ["autoscaling.scaleIn=enabled"]), "ScaledObject")["spec"]["triggers"][0]["metadata"]
    assert "scaleIn" not in md and "schedules" not in md and "signals" not in md


@pytest.mark.parametrize("bad,field", [
    (["autoscaling.scaleIn=off"], "scaleIn"),
    (["autoscaling.signals[0].metric=WriteIOPS", "autoscaling.signals[0].target=5"], "metric"),
    (["autoscaling.signals[0].metric=ReadConnectionUsage", "autoscaling.signals[0].target=0"], "target"),
    (["autoscaling.signals[0].metric=ReadConnections", "autoscaling.signals[0].target=5"],
     "autoscaling.signals entry 0 repeats autoscaling.metric ReadConnections"),
    (["autoscaling.schedules[0].cron=0 8 * *", "autoscaling.schedules[0].duration=1h",
      "autoscaling.schedules[0].floor=3"], "cron"),
    (["autoscaling.schedules[0].cron=0 8 * * *", "autoscaling.schedules[0].duration=1 hour",
      "autoscaling.schedules[0].floor=3"], "duration"),
    (["autoscaling.schedules[0].cron=0 8 * * *", "autoscaling.schedules[0].duration=1h"], "schedules"),
    (["autoscaling.schedules[0].cron=0 8 * * *", "autoscaling.schedules[0].duration=1h",
      "autoscaling.schedules[0].floor=3", "autoscaling.schedules[0].until=9"], "until"),
])
def test_schema_rejects_malformed_controls(helm, bad, field):
    out = helm.template(EXAMPLE, ON + bad)
    assert out.returncode != 0 and field in out.stderr, out.stderr


def test_a_schedule_floor_above_max_replicas_fails_the_render(helm):
    out = helm.template(EXAMPLE, ON + SCHEDULE[:4] + ["autoscaling.maxReplicas=3"])
    assert out.returncode != 0
    assert "autoscaling.schedules entry 0: floor 4 is above autoscaling.maxReplicas (3)" in out.stderr, out.stderr


def test_an_installed_binary_needs_no_files_beside_it(tmp_path):
    """Only the binary is copied out of the checkout, and the checkout is hidden from it (a tmpfs
    over the repository in a private mount namespace), so a chart repository elsewhere gets the
    same chart as this one: the templates are built in."""
    binary = tmp_path / "bin/chartgen"
    binary.parent.mkdir()
    shutil.copy2(CHARTGEN, binary)
    chart = tmp_path / "work/example-postgres"
    shutil.copytree(PRISTINE, chart)
    env = {k: v for k, v in os.environ.items() if k != "CHARTGEN_TEMPLATES"}
    hidden = f'mount -t tmpfs tmpfs "{REPO}" && test ! -e "{REPO}/templates" && exec "$0" "$@"'
    out = subprocess.run(["unshare", "--mount", "sh", "-c", hidden, str(binary), "app", "--chart", "example-postgres"],
                         cwd=chart.parent, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert tree(chart) == tree(EXAMPLE)
    check = subprocess.run(["unshare", "--mount", "sh", "-c", hidden, str(binary), "app", "--chart", "example-postgres",
                            "--check"], cwd=chart.parent, env=env, capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr
