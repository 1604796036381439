"""`chartgen app` on a chart that renders a RedisFailover (fixtures/redis, shaped like Cozystack's
packages/apps/redis, written here): the kind is discovered from the template, the count is
`spec.redis.replicas` (not the sentinels'), and since a RedisFailover has no scale subresource the
ScaledObject targets a generated ScaleAdapter, which drives the count. Every mode rendered with
real Helm 3 and Helm 4 and validated against the KEDA, RedisFailover (redis-operator's Go module)
and ScaleAdapter (the package chart's crds/) CRDs; idempotent; `--check` fails on drift."""
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import HELMS, PACKAGE, REPO, Helm, chartgen, one
from test_reproducible import tree
from testkit import upstream
from validate import validate, validate_all

FIXTURE = Path(__file__).parent / "fixtures/redis"
ADAPTER_CRD = REPO / "charts/cozy-autoscaling/crds/scaleadapters.yaml"
ON = ["autoscaling.enabled=true"]
SA = {"apiVersion": "autoscaling.cozystack.io/v1alpha1", "kind": "ScaleAdapter", "name": "pg"}
PAUSE = {"autoscaling.keda.sh/paused-scale-in": "true", "autoscaling.keda.sh/paused-scale-out": "true"}


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    chart = tmp_path_factory.mktemp("redis") / "redis"
    shutil.copytree(FIXTURE, chart)
    run = chartgen("app", "--chart", chart)
    assert run.returncode == 0, run.stderr
    return chart, run.stderr


@pytest.fixture
def copy(tmp_path):
    shutil.copytree(FIXTURE, tmp_path / "redis")
    return tmp_path / "redis"


@pytest.mark.parametrize("keda", [True, False])
def test_off_renders_exactly_the_chart_before(helm, generated, keda):
    before, after = helm.template(FIXTURE, keda=keda), helm.template(generated[0], keda=keda)
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    assert after.stdout == before.stdout
    assert "ScaledObject" not in after.stdout and "ScaleAdapter" not in after.stdout


def test_on_renders_the_adapter_and_a_scaledobject_targeting_it(helm, generated):
    objs = helm.render(generated[0], ON + ["replicas=3"])
    rf = one(objs, "RedisFailover")
    assert rf["spec"]["redis"]["replicas"] == 3
    assert rf["spec"]["sentinel"]["replicas"] == 3, "the sentinels' count is not the one scaled"
    adapter = one(objs, "ScaleAdapter", "pg")
    assert adapter["spec"] == {
        "targetRef": {"apiVersion": "databases.spotahome.com/v1", "kind": "RedisFailover", "name": "pg"},
        "replicasPath": "/spec/redis/replicas", "replicas": 3, "paused": False,
        "selector": "app.kubernetes.io/component=redis,app.kubernetes.io/part-of=redis-failover,"
                    "app.kubernetes.io/name=pg"}
    so = one(objs, "ScaledObject", "pg")
    assert not so["metadata"].get("annotations")
    assert so["spec"]["scaleTargetRef"] == SA
    [trigger] = so["spec"]["triggers"]
    assert trigger["metadata"] == {
        "scalerAddress": "cozy-autoscaling-scaler.cozy-autoscaling.svc:6000", "engine": "redis",
        "cluster": "pg", "metric": "ReadConnections", "target": "150", "minReplicas": "2",
        "maxReplicas": "6", "maxReplicationLagBytes": "1048576", "dryRun": "false"}


@pytest.mark.parametrize("mode,dry", [("autoscaling.transition=true", "false"), ("autoscaling.dryRun=true", "true")])
def test_transition_and_dry_run_keep_the_count_and_pause_the_adapter_too(helm, generated, mode, dry):
    objs = helm.render(generated[0], ON + [mode, "replicas=1"])
    assert one(objs, "RedisFailover")["spec"]["redis"]["replicas"] == 1, "static: exactly the chart's count"
    so, adapter = one(objs, "ScaledObject"), one(objs, "ScaleAdapter")
    assert so["metadata"]["annotations"] == PAUSE
    assert so["spec"]["triggers"][0]["metadata"]["dryRun"] == dry
    assert adapter["spec"]["paused"] is True and adapter["spec"]["replicas"] == 1


def test_active_without_a_live_object_renders_the_count_raised_to_the_floor(helm, generated):
    objs = helm.render(generated[0], ON + ["replicas=1", "autoscaling.minReplicas=1"])
    assert one(objs, "RedisFailover")["spec"]["redis"]["replicas"] == 2, "a master and one replica"
    assert one(objs, "ScaleAdapter")["spec"]["replicas"] == 2
    assert one(objs, "ScaledObject")["spec"]["minReplicaCount"] == 2


@pytest.mark.parametrize("sets,message", [
    (["autoscaling.maxReplicationLagSeconds=10"], "does not apply to Redis"),
    (["autoscaling.minReplicas=5", "autoscaling.maxReplicas=4"], "is below the floor 5 = max(minReplicas, 2)"),
    (["autoscaling.metric=ReadCPUUtilization"], "metric"),
])
def test_cnpg_settings_and_a_floor_above_the_ceiling_fail_the_render(helm, generated, sets, message):
    out = helm.template(generated[0], ON + sets)
    assert out.returncode != 0 and message in out.stderr, out.stderr


def test_a_large_byte_threshold_renders_as_an_integer(helm, generated):
    objs = helm.render(generated[0], ON + ["autoscaling.maxReplicationLagBytes=1000000000000"])
    assert one(objs, "ScaledObject")["spec"]["triggers"][0]["metadata"]["maxReplicationLagBytes"] == "1000000000000"


def test_check_passes_a_second_run_changes_nothing_and_drift_fails(generated, tmp_path):
    chart = tmp_path / "redis"
    shutil.copytree(generated[0], chart)
    assert "valuesKey" not in (chart / "chartgen.yaml").read_text() and "targetKind" not in (
        chart / "chartgen.yaml").read_text(), "discovered, not stored"
    before = tree(chart)
    assert chartgen("app", "--chart", chart, "--check").returncode == 0
    again = chartgen("app", "--chart", chart)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert tree(chart) == before
    adapter = chart / "templates/scaleadapter.yaml"
    adapter.write_text(adapter.read_text().replace("paused:", "paused: false #"))
    drift = chartgen("app", "--chart", chart, "--check")
    assert drift.returncode == 1 and "scaleadapter.yaml" in drift.stderr, drift.stderr


def test_verify_renders_the_mode_matrix_against_the_three_crds(generated):
    out = chartgen("app", "--chart", generated[0], "--verify",
                   *[a for h in sorted(HELMS.values()) for a in ("--helm", h)],
                   "--crds", upstream("keda"), "--crds", upstream("redis-operator"), "--crds", ADAPTER_CRD)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "24 passed, 0 failed" in out.stdout, out.stdout
    missing = chartgen("app", "--chart", generated[0], "--verify", "--helm", HELMS["helm4"],
                       "--crds", upstream("keda"), "--crds", upstream("redis-operator"))
    assert missing.returncode != 0 and "ScaleAdapter" in missing.stderr, missing.stderr


def test_the_next_steps_name_the_crds_verify_needs(generated):
    assert "the KEDA, RedisFailover and ScaleAdapter CRDs" in generated[1]


def test_a_sentinel_count_from_values_is_not_taken_for_the_redis_count(helm, copy):
    tmpl = copy / "templates/redisfailover.yaml"
    tmpl.write_text(tmpl.read_text().replace("    replicas: 3\n", "    replicas: {{ .Values.sentinels }}\n"))
    (copy / "values.yaml").write_text((copy / "values.yaml").read_text() + "\nsentinels: 3\n")
    out = chartgen("app", "--chart", copy)
    assert out.returncode == 0, out.stderr
    assert "    replicas: {{ .Values.sentinels }}\n" in tmpl.read_text(), "the sentinels' line is left alone"
    objs = helm.render(copy, ON + ["replicas=4", "sentinels=5"])
    rf = one(objs, "RedisFailover")["spec"]
    assert (rf["redis"]["replicas"], rf["sentinel"]["replicas"]) == (4, 5)


def test_a_chart_rendering_both_kinds_needs_the_target_kind_flag(copy):
    (copy / "templates/db.yaml").write_text(
        "apiVersion: postgresql.cnpg.io/v1\nkind: Cluster\nmetadata:\n  name: db\nspec:\n"
        "  instances: {{ .Values.replicas }}\n")
    out = chartgen("app", "--chart", copy)
    assert out.returncode != 0 and "--target-kind" in out.stderr and "RedisFailover" in out.stderr, out.stderr
    flagged = chartgen("app", "--chart", copy, "--target-kind", "RedisFailover")
    assert flagged.returncode == 0, flagged.stderr
    assert (copy / "templates/scaleadapter.yaml").is_file()
    assert "instances: {{ .Values.replicas }}" in (copy / "templates/db.yaml").read_text()


def with_engine(chart: Path, line: str) -> Path:
    """The fixture's RedisFailover with `line` as its spec's first key (`engine: Valkey`, ...)."""
    tmpl = chart / "templates/redisfailover.yaml"
    tmpl.write_text(tmpl.read_text().replace("spec:\n  sentinel:\n", f"spec:\n  {line}\n  sentinel:\n", 1))
    return tmpl


def fork_crd(tmp_path: Path) -> Path:
    """The RedisFailover CRD as the redis-operator fork Cozystack runs (freshworks-oss) declares
    it: spotahome's, plus `spec.engine`, an enum of Redis and Valkey. Made here from the pinned
    upstream CRD rather than fetched: that fork's Go module cannot be downloaded at its v3 tags."""
    [src] = sorted(upstream("redis-operator").glob("*.yaml"))
    crd = yaml.safe_load(src.read_text())
    for v in crd["spec"]["versions"]:
        v["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["engine"] = {
            "type": "string", "enum": ["Redis", "Valkey"]}
    out = tmp_path / "crds"
    out.mkdir()
    (out / "redisfailovers.yaml").write_text(yaml.safe_dump(crd))
    return out


def test_a_valkey_failover_gets_the_same_wiring(helm, copy):
    with_engine(copy, "engine: Valkey")
    out = chartgen("app", "--chart", copy)
    assert out.returncode == 0, out.stderr
    # Rendered without the suite's validation against spotahome's CRD, which has no `engine`; the
    # other objects are validated as usual (the fork's CRD is --verify's, below).
    objs = Helm.render(helm, copy, ON + ["replicas=3"])
    validate_all([o for o in objs if o["kind"] != "RedisFailover"])
    rf = one(objs, "RedisFailover")
    assert (rf["spec"]["engine"], rf["spec"]["redis"]["replicas"]) == ("Valkey", 3)
    assert one(objs, "ScaleAdapter", "pg")["spec"]["replicasPath"] == "/spec/redis/replicas"
    so = one(objs, "ScaledObject", "pg")
    assert so["spec"]["scaleTargetRef"] == SA
    assert so["spec"]["triggers"][0]["metadata"]["engine"] == "redis", "same series, same scaler engine"


@pytest.mark.parametrize("line", ["engine: valkey", "engine: KeyDB # not the operator's", "engine: '{{ \"x\" }}'"])
def test_a_literal_engine_the_operator_refuses_is_refused_by_line_and_field(copy, line):
    with_engine(copy, line)
    out = chartgen("app", "--chart", copy)
    assert out.returncode != 0, out.stderr
    assert "redisfailover.yaml:9: spec.engine " in out.stderr and "Redis or Valkey" in out.stderr, out.stderr
    assert not (copy / "templates/scaleadapter.yaml").exists(), "nothing written"


def test_verify_checks_a_computed_engine_in_every_render(copy, tmp_path):
    with_engine(copy, "engine: {{ .Values.engine }}")
    (copy / "values.yaml").write_text((copy / "values.yaml").read_text() + "\nengine: Valkey\n")
    assert chartgen("app", "--chart", copy).returncode == 0
    crds = ["--crds", upstream("keda"), "--crds", fork_crd(tmp_path), "--crds", ADAPTER_CRD]
    out = chartgen("app", "--chart", copy, "--verify", "--helm", HELMS["helm4"], *crds)
    assert out.returncode == 0 and "12 passed, 0 failed" in out.stdout, out.stdout + out.stderr
    # Against spotahome's CRD, which has no such field: refused as the unknown field it is there.
    spotahome = chartgen("app", "--chart", copy, "--verify", "--helm", HELMS["helm4"], "--crds", upstream("keda"),
                         "--crds", upstream("redis-operator"), "--crds", ADAPTER_CRD)
    assert spotahome.returncode == 1 and "engine" in spotahome.stdout, spotahome.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("engine: Memcached\n")
    out = chartgen("app", "--chart", copy, "--verify", "--helm", HELMS["helm4"], *crds, "--values", bad)
    assert out.returncode == 1, out.stdout
    assert 'RedisFailover/verify: spec.engine "Memcached" is not an engine the redis-operator runs' in out.stdout, \
        out.stdout


def test_tenant_redis_helmrelease_example_ignores_both_autoscaled_counts(helm, generated):
    """The documented Redis tenant HelmRelease is a valid Flux object whose drift detection leaves
    the ScaleAdapter's count to the HPA and the RedisFailover's to the adapter (the e2e flip matrix
    applies its rules), and its values render with the Redis chart after `chartgen app`."""
    [hr] = [d for d in yaml.safe_load_all((PACKAGE / "examples/tenant-redis-helmrelease.yaml").read_text()) if d]
    validate(hr)
    drift = hr["spec"]["driftDetection"]
    assert drift["mode"] == "enabled"
    assert sorted((r["target"]["kind"], r["paths"]) for r in drift["ignore"]) == [
        ("RedisFailover", ["/spec/redis/replicas"]), ("ScaleAdapter", ["/spec/replicas"])]
    objs = helm.render(generated[0], values=hr["spec"]["values"], release=hr["metadata"]["name"])
    rf = one(objs, "RedisFailover")
    assert rf["spec"]["redis"]["replicas"] == hr["spec"]["values"]["replicas"]
    trigger = one(objs, "ScaledObject")["spec"]["triggers"][0]["metadata"]
    assert (trigger["engine"], trigger["maxReplicationLagBytes"]) == ("redis", "1048576"), trigger
    assert one(objs, "ScaleAdapter")["spec"]["targetRef"]["name"] == rf["metadata"]["name"]
