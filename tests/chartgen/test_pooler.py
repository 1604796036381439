"""`chartgen app` on a chart that renders CloudNativePG Poolers next to its Cluster
(fixtures/postgres-pooler, shaped like Cozystack's postgres app with PgBouncer Poolers, written
here: a read-write Pooler behind the chart's own switch with its pool sizes written out, a
read-only one behind a second switch with its parameters rendered by a `range`). Each Pooler whose
`instances` reads a values key of its own gets a ScaleAdapter and a ScaledObject (`engine:
pgbouncer`) while `autoscaling.pooler.enabled` is set, with the Cluster's flip safety; the Cluster's
own autoscaling is untouched. Rendered with real Helm 3 and Helm 4, every object validated (the
Pooler against CNPG's CRD, the adapter against the package's); the trigger metadata is sent to a
real `scaler serve` the way KEDA sends it; the flip released step by step against a real
kube-apiserver (the live count, the hand-back guard); `--verify` against the upstream CRDs, and
against templates broken on purpose."""
import shutil
import sys
from pathlib import Path

import pytest

from conftest import HELMS, MAJORS, REPO, Helm, chartgen, one
from test_reproducible import tree
from testkit import crd_files, upstream

FIXTURE = Path(__file__).parent / "fixtures/postgres-pooler"
ADAPTER_CRD = REPO / "charts/cozy-autoscaling/crds/scaleadapters.yaml"
POOLER_CRD = upstream("cnpg-operator") / "postgresql.cnpg.io_poolers.yaml"
ON = ["autoscaling.pooler.enabled=true"]
RO = ["pooler.readOnly.enabled=true"]
PAUSE = {"autoscaling.keda.sh/paused-scale-in": "true", "autoscaling.keda.sh/paused-scale-out": "true"}
ADAPTER_REF = {"apiVersion": "autoscaling.cozystack.io/v1alpha1", "kind": "ScaleAdapter"}
ADAPTER = ("autoscaling.cozystack.io/v1alpha1", "ScaleAdapter")
SCALED_OBJECT = ("keda.sh/v1alpha1", "ScaledObject")
# What every Pooler's trigger carries with the block's defaults (release `pg`).
TRIGGER = {"scalerAddress": "cozy-autoscaling-scaler.cozy-autoscaling.svc:6000", "engine": "pgbouncer",
           "cluster": "pg", "metric": "ClientConnections", "target": "100", "minReplicas": "2",
           "maxReplicas": "4", "maxClientWaitSeconds": "1", "dryRun": "false"}


def crds():
    return ["--crds", upstream("keda"), "--crds", upstream("cnpg"), "--crds", POOLER_CRD, "--crds", ADAPTER_CRD]


def pairs(objs):
    """{pooler name: (ScaleAdapter, ScaledObject)} of the Poolers' pairs in a render."""
    adapters = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ScaleAdapter"}
    out = {}
    for so in objs:
        if so["kind"] == "ScaledObject" and so["spec"]["triggers"][0]["metadata"].get("engine") == "pgbouncer":
            adapter = adapters[so["spec"]["scaleTargetRef"]["name"]]
            out[adapter["spec"]["targetRef"]["name"]] = (adapter, so)
    return out


def pooler(objs, name):
    return one(objs, "Pooler", name)["spec"]


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    chart = tmp_path_factory.mktemp("pooler") / "postgres-pooler"
    shutil.copytree(FIXTURE, chart)
    run = chartgen("app", "--chart", chart)
    assert run.returncode == 0, run.stderr
    return chart, run.stderr


@pytest.mark.parametrize("sets", [[], RO, ["autoscaling.pooler=null"] + RO], ids=["default", "ro", "unset"])
@pytest.mark.parametrize("keda", [True, False])
def test_off_renders_exactly_the_chart_before(helm, generated, keda, sets):
    """Off (the default, or the block unset): the Poolers render byte for byte as before, no pair."""
    before, after = helm.template(FIXTURE, [s for s in sets if "autoscaling" not in s], keda=keda), \
        helm.template(generated[0], sets, keda=keda)
    assert before.returncode == 0 and after.returncode == 0, before.stderr + after.stderr
    assert after.stdout == before.stdout
    assert "ScaledObject" not in after.stdout and "ScaleAdapter" not in after.stdout


def test_the_values_and_schema_gain_the_pooler_block(generated):
    values = (generated[0] / "values.yaml").read_text()
    assert "## @field {AutoscalingPooler} pooler - " in values and "## @typedef {struct} AutoscalingPooler" in values
    assert "  pooler:\n    enabled: false\n    minReplicas: 2\n    maxReplicas: 4\n    target: 100\n" in values
    assert values.startswith((FIXTURE / "values.yaml").read_text()), "every line of the chart's own stays"


def test_on_renders_one_pair_per_rendered_pooler(helm, generated):
    objs = helm.render(generated[0], ON + RO)
    got = pairs(objs)
    assert sorted(got) == ["pg-pooler-ro", "pg-pooler-rw"]
    assert not [o for o in objs if o["kind"] == "ScaledObject" and o not in [p[1] for p in got.values()]], \
        "the Cluster's own autoscaling stays off"
    pools = {"pg-pooler-rw": {"defaultPoolSize": "25", "reservePoolSize": "5"},
             "pg-pooler-ro": {"defaultPoolSize": "10", "maxDbConnections": "40"}}
    for name, (adapter, so) in got.items():
        assert adapter["spec"] == {
            "targetRef": {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Pooler", "name": name},
            "replicasPath": "/spec/instances", "replicas": 2, "paused": False}, "no selector: the adapter knows a Pooler's pods"
        assert so["metadata"]["name"] == name and not so["metadata"].get("annotations")
        assert so["spec"]["scaleTargetRef"] == {**ADAPTER_REF, "name": name}
        assert (so["spec"]["minReplicaCount"], so["spec"]["maxReplicaCount"]) == (2, 4)
        [trigger] = so["spec"]["triggers"]
        assert trigger["authenticationRef"] == {"kind": "ClusterTriggerAuthentication", "name": "cozy-autoscaling-scaler"}
        assert trigger["metadata"] == {**TRIGGER, "pooler": name, **pools[name]}
        assert pooler(objs, name)["instances"] == 2
        params = pooler(objs, name)["pgbouncer"]["parameters"]
        assert {k: v for k, v in trigger["metadata"].items() if k in ("defaultPoolSize", "reservePoolSize",
                "maxDbConnections")} == {k: params[p] for p, k in (("default_pool_size", "defaultPoolSize"),
                ("reserve_pool_size", "reservePoolSize"), ("max_db_connections", "maxDbConnections")) if p in params}
    only_rw = pairs(helm.render(generated[0], ON))
    assert list(only_rw) == ["pg-pooler-rw"], "a Pooler the chart's switch leaves out gets no pair"
    assert pairs(helm.render(generated[0], ON + ["pooler.enabled=false"])) == {}


@pytest.mark.parametrize("mode,dry", [("autoscaling.pooler.transition=true", "false"),
                                      ("autoscaling.pooler.dryRun=true", "true")])
def test_transition_and_dry_run_pause_the_pair_and_keep_the_count(helm, generated, mode, dry):
    objs = helm.render(generated[0], ON + RO + [mode, "pooler.instances=3", "pooler.readOnly.instances=1"])
    assert (pooler(objs, "pg-pooler-rw")["instances"], pooler(objs, "pg-pooler-ro")["instances"]) == (3, 1), \
        "static: exactly the chart's counts, even below the floor"
    for name, count in (("pg-pooler-rw", 3), ("pg-pooler-ro", 1)):
        adapter, so = pairs(objs)[name]
        assert so["metadata"]["annotations"] == PAUSE
        assert so["spec"]["triggers"][0]["metadata"]["dryRun"] == dry
        assert adapter["spec"]["paused"] is True and adapter["spec"]["replicas"] == count


def test_active_without_a_live_pooler_renders_the_count_raised_to_the_floor(helm, generated):
    objs = helm.render(generated[0], ON + ["pooler.instances=1"])
    adapter, so = pairs(objs)["pg-pooler-rw"]
    assert pooler(objs, "pg-pooler-rw")["instances"] == 2 and adapter["spec"]["replicas"] == 2
    objs = helm.render(generated[0], ON + ["pooler.instances=1", "autoscaling.pooler.minReplicas=3"])
    assert pooler(objs, "pg-pooler-rw")["instances"] == 3
    assert pairs(objs)["pg-pooler-rw"][1]["spec"]["minReplicaCount"] == 3


def test_the_cluster_and_the_poolers_are_switched_apart(helm, generated):
    cluster_only = helm.render(generated[0], ["autoscaling.enabled=true", "pooler.instances=1", "replicas=1"])
    assert pairs(cluster_only) == {} and pooler(cluster_only, "pg-pooler-rw")["instances"] == 1
    assert one(cluster_only, "ScaledObject")["spec"]["scaleTargetRef"]["kind"] == "Cluster"
    assert one(cluster_only, "Cluster")["spec"]["instances"] == 2, "the Cluster's count is live, at the floor"
    poolers_only = helm.render(generated[0], ON + ["replicas=1", "pooler.instances=1"])
    assert one(poolers_only, "Cluster")["spec"]["instances"] == 1, "the Cluster's count stays the chart's"
    both = helm.render(generated[0], ON + ["autoscaling.enabled=true"])
    assert len([o for o in both if o["kind"] == "ScaledObject"]) == 2


def test_operator_controls_reach_the_poolers_trigger(helm, generated):
    # A fraction from a values file: `--set` hands Helm 3 "0.5" as a string, which the schema refuses.
    objs = helm.render(generated[0], ON + [
        "autoscaling.pooler.scaleIn=disabled",
        "autoscaling.pooler.schedules[0].cron=0 8 * * 1-5", "autoscaling.pooler.schedules[0].duration=10h",
        "autoscaling.pooler.schedules[0].floor=3", "autoscaling.tolerance=0"], kube_version="1.35.0",
        values={"autoscaling": {"pooler": {"maxClientWaitSeconds": 0.5}}})
    so = pairs(objs)["pg-pooler-rw"][1]
    md = so["spec"]["triggers"][0]["metadata"]
    assert (md["scaleIn"], md["maxClientWaitSeconds"], md["schedules"]) == ("disabled", "0.5", "0 8 * * 1-5 for 10h floor 3")
    behavior = so["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"] == {"stabilizationWindowSeconds": 60, "tolerance": "0"}
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 300}]


@pytest.mark.parametrize("sets,keda,message", [
    ([], False, "autoscaling.pooler.enabled=true needs KEDA"),
    (["autoscaling.pooler.target=0"], True, "autoscaling.pooler.target must be at least 1 (clients per pooler instance)"),
    (["autoscaling.pooler.minReplicas=5"], True,
     "autoscaling.pooler.maxReplicas (4) is below the floor 5 = max(minReplicas, 2): raise maxReplicas to at least 5"),
    (["pooler.readOnly.instances=9", "autoscaling.pooler.maxReplicas=8"] + RO, True,
     "pooler.readOnly.instances (9) is above autoscaling.pooler.maxReplicas (8)"),
    (["autoscaling.pooler.maxReplicas=101"], True, "autoscaling.pooler.maxReplicas (101) is above the hard ceiling of 100"),
    (["autoscaling.scalerAddress="], True, "autoscaling.scalerAddress is empty"),
])
def test_guards_fail_the_render_with_the_fix(helm, generated, sets, keda, message):
    out = helm.template(generated[0], ON + sets, keda=keda)
    assert out.returncode != 0 and message in out.stderr, out.stderr


@pytest.mark.parametrize("parameters,message", [
    ({"default_pool_size": "many"}, 'the Pooler pg-pooler-ro (templates/pooler.yaml:29) renders default_pool_size '
     '"many", which the scaler cannot take as its defaultPoolSize: set it to a whole number from 1 to 262143'),
    ({"default_pool_size": "0"}, 'renders default_pool_size "0", which the scaler cannot take'),
    ({"max_db_connections": "300000"}, 'renders max_db_connections "300000", which the scaler cannot take as its '
     "maxDbConnections: set it to a whole number from 0 to 262143"),
])
def test_a_pool_size_the_scaler_cannot_read_fails_the_render(helm, generated, parameters, message):
    values = {"pooler": {"readOnly": {"enabled": True, "parameters": parameters}}}
    out = helm.template(generated[0], ON, values=values)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert helm.template(generated[0], values=values).returncode == 0, "off, the chart renders it as before"


@pytest.mark.parametrize("sets,words", [
    (["autoscaling.pooler.maxReplica=3"], ["maxReplica", "pooler"]),
    (["autoscaling.pooler.maxClientWaitSeconds=4000"], ["maxClientWaitSeconds", "3600"]),
    (["autoscaling.pooler.scaleIn=off"], ["scaleIn", "enabled", "disabled"]),
    (["autoscaling.pooler.enabled=yes"], ["enabled", "boolean"]),
    (["autoscaling.pooler.schedules[0].cron=@daily"], ["schedules", "duration"]),
])
def test_the_schema_refuses_a_wrong_pooler_key_naming_it(helm, generated, sets, words):
    out = helm.template(generated[0], ON + sets)
    assert out.returncode != 0 and "schema" in out.stderr, out.stderr
    for word in words:
        assert word in out.stderr.replace("3,600", "3600"), out.stderr


def test_the_schema_takes_a_fractional_wait(helm, generated):
    objs = helm.render(generated[0], ON, values={"autoscaling": {"pooler": {"maxClientWaitSeconds": 0.25}}})
    assert pairs(objs)["pg-pooler-rw"][1]["spec"]["triggers"][0]["metadata"]["maxClientWaitSeconds"] == "0.25"


def test_the_scaler_takes_each_poolers_trigger_as_keda_sends_it(helm, generated, tmp_path):
    """The rendered metadata through a real `scaler serve`, GetMetricSpec as KEDA calls it (it
    parses the metadata; no series needed): one PgBouncer metric per Pooler, the target per
    instance. The Cluster's trigger with `engine: pgbouncer` forced is refused, so the call does
    check what it is given."""
    sys.path.insert(0, str(REPO / "tests/scaler"))
    from keda import Keda, code_of
    from scaler_proc import Scaler

    objs = helm.render(generated[0], ON + RO + ["autoscaling.enabled=true"])
    scaler = Scaler(str(tmp_path), "http://127.0.0.1:9").start()
    keda = Keda(scaler.address)
    try:
        for name, (_, so) in pairs(objs).items():
            [spec] = keda.spec(keda.ref("tenant-a", so["metadata"]["name"], so["spec"]["triggers"][0]["metadata"])).metricSpecs
            assert (spec.metricName, spec.targetSizeFloat) == (f"pgbouncer-{name}-clientconnections", 100.0)
        cluster = next(o for o in objs if o["kind"] == "ScaledObject" and o["spec"]["scaleTargetRef"]["kind"] == "Cluster")
        forced = {**cluster["spec"]["triggers"][0]["metadata"], "engine": "pgbouncer"}
        assert code_of(lambda: keda.spec(keda.ref("tenant-a", "pg", forced))).name == "INVALID_ARGUMENT"
    finally:
        keda.close()
        scaler.stop()


def test_check_passes_a_second_run_changes_nothing_and_drift_fails(generated, tmp_path):
    chart = tmp_path / "postgres-pooler"
    shutil.copytree(generated[0], chart)
    before = tree(chart)
    assert chartgen("app", "--chart", chart, "--check").returncode == 0
    again = chartgen("app", "--chart", chart)
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert tree(chart) == before
    pair = chart / "templates/pooler-autoscaling.yaml"
    pair.write_text(pair.read_text().replace("replicasPath: /spec/instances", "replicasPath: /spec/replicas"))
    drift = chartgen("app", "--chart", chart, "--check")
    assert drift.returncode == 1 and "pooler-autoscaling.yaml" in drift.stderr, drift.stderr


def test_a_chart_wired_before_its_pooler_gains_the_block_on_a_re_run(helm, tmp_path):
    """The chart as chartgen left it without a Pooler, then the Pooler added: the re-run adds
    `pooler` at the end of the existing block (every line of it kept), says what cozyvalues-gen
    needs, and the pair renders."""
    chart = tmp_path / "postgres-pooler"
    shutil.copytree(FIXTURE, chart)
    poolers = (chart / "templates/pooler.yaml").read_text()
    (chart / "templates/pooler.yaml").unlink()
    assert chartgen("app", "--chart", chart).returncode == 0
    before = (chart / "values.yaml").read_text()
    assert "pooler:\n    enabled" not in before and not (chart / "templates/pooler-autoscaling.yaml").exists()
    (chart / "templates/pooler.yaml").write_text(poolers)
    out = chartgen("app", "--chart", chart)
    assert out.returncode == 0, out.stderr
    assert "added pooler to the existing `autoscaling:` block" in out.stderr, out.stderr
    assert "## @typedef {struct} AutoscalingPooler" in out.stderr
    after = (chart / "values.yaml").read_text()
    assert after.startswith(before.rstrip("\n")) and "\n  pooler:\n    enabled: false\n" in after
    assert list(pairs(helm.render(chart, ON))) == ["pg-pooler-rw"]


def test_the_next_steps_name_the_poolers_and_the_crds_verify_needs(generated):
    err = generated[1]
    assert "the KEDA, CNPG (Cluster and Pooler) and ScaleAdapter CRDs" in err, err
    assert "the Poolers (2) autoscale apart, under autoscaling.pooler" in err
    assert "pooler.instances, pooler.readOnly.instances = the live count" in err


def test_verify_renders_the_poolers_modes_and_guards_against_the_crds(generated):
    helms = [a for h in sorted(HELMS.values()) for a in ("--helm", h)]
    out = chartgen("app", "--chart", generated[0], "--verify", *helms, *crds())
    assert out.returncode == 0, out.stdout + out.stderr
    assert "44 passed, 0 failed" in out.stdout, out.stdout
    for case in ("pooler: on", "pooler: transition", "pooler: dryRun", "pooler: with the Cluster's",
                 "pooler guard: count > maxReplicas"):
        assert f" {case}" in out.stdout, out.stdout
    missing = chartgen("app", "--chart", generated[0], "--verify", "--helm", HELMS["helm4"],
                       "--crds", upstream("keda"), "--crds", upstream("cnpg"), "--crds", ADAPTER_CRD)
    assert missing.returncode != 0 and "no CRD for postgresql.cnpg.io/v1 Pooler" in missing.stderr, missing.stderr


@pytest.mark.parametrize("old,new,cases,why", [
    ("paused: {{ $t.paused }}", "paused: false", ["pooler: transition", "pooler: dryRun"],
     "is not paused both ways"),
    ("replicasPath: /spec/instances", "replicasPath: /spec/replicas", ["pooler: on"],
     "does not drive /spec/instances"),
    ('        {{ $s.key }}: {{ toString $s.value | quote }}\n', "", ["pooler: on"],
     "sets default_pool_size Some(\"25\"), its trigger defaultPoolSize None"),
    ("{{- if and $p.enabled $t.renders }}", "{{- if and $p.enabled $t.renders (eq $i 0) }}", [],
     "the Pooler `verify-pooler-ro` rendered without its ScaleAdapter and ScaledObject"),
], ids=["unpaused", "path", "pool-sizes", "a-pooler-left-out"])
def test_verify_catches_a_broken_pair(generated, tmp_path, old, new, cases, why):
    """A template source broken on purpose (`--templates`), the chart generated from it, so the
    chart is up to date with it: --verify fails the cases that render the broken part, naming why."""
    sources = tmp_path / "templates"
    shutil.copytree(REPO / "templates/app", sources / "app")
    pair = sources / "app/pooler-autoscaling.yaml"
    assert old in pair.read_text()
    pair.write_text(pair.read_text().replace(old, new))
    chart = tmp_path / "postgres-pooler"
    shutil.copytree(FIXTURE, chart)
    values = tmp_path / "ro.yaml"
    values.write_text("pooler:\n  readOnly:\n    enabled: true\n")
    assert chartgen("--templates", sources, "app", "--chart", chart).returncode == 0
    out = chartgen("--templates", sources, "app", "--chart", chart, "--verify", "--helm", HELMS["helm4"],
                   "--values", values, *crds())
    assert out.returncode == 1, out.stdout + out.stderr
    failed = [line for line in out.stdout.splitlines() if line.startswith("FAIL")]
    assert failed and all(why in line for line in failed), out.stdout
    for case in cases:
        assert any(f" {case}:" in line for line in failed), out.stdout
    assert not any("guard" in line for line in failed), "the guards still refuse"


def test_a_pooler_reading_the_clusters_count_stays_as_it_is(helm, tmp_path):
    """The Pooler of fixtures/pooler-reader renders the Cluster's own count key: it moves with the
    Cluster by the chart's design, so it gets no pair and no `autoscaling.pooler` block, and a note
    says how to autoscale it."""
    chart = tmp_path / "pooler-reader"
    shutil.copytree(Path(__file__).parent / "fixtures/pooler-reader", chart)
    out = chartgen("app", "--chart", chart)
    assert out.returncode == 0, out.stderr
    assert ("templates/pooler.yaml:2: the Pooler is not autoscaled: its instances (line 8) reads .Values.instances, "
            "the Cluster's count, so it moves with the Cluster; give it a values key of its own") in out.stderr, out.stderr
    assert not (chart / "templates/pooler-autoscaling.yaml").exists()
    assert "pooler:" not in (chart / "values.yaml").read_text()


@pytest.fixture(scope="module")
def apiserver(tmp_path_factory):
    """etcd and a real kube-apiserver of the e2e rig (built by tests/e2e/setup.sh, which ./run.sh
    test runs first), no controllers, with the KEDA, CNPG Cluster and Pooler and ScaleAdapter CRDs:
    Helm's `lookup` reads live objects there, and the API server validates every object applied."""
    sys.path.insert(0, str(REPO / "tests/e2e"))
    import rig

    tmp = tmp_path_factory.mktemp("apiserver")
    versions = rig.versions()
    group = rig.Group(tmp / "logs")
    (tmp / "logs").mkdir()
    cp = rig.ControlPlane(rig.Binaries(rig.binary("etcd", versions["ETCD_VERSION"]),
                                       rig.binary("kube-apiserver", versions["KUBE_VERSION"]), None), tmp, group)
    try:
        cp.start_apiserver()
        rig.install_crds(cp.kube, [*crd_files("keda", "cnpg"), POOLER_CRD, ADAPTER_CRD])
        yield cp
    finally:
        group.stop_all()


def live_instances(kube, kind, name, ns):
    return kube.get("postgresql.cnpg.io/v1", kind, name, ns)["spec"]["instances"]


@pytest.mark.parametrize("major", MAJORS, ids=[f"helm{m}" for m in MAJORS])
def test_the_live_count_and_the_hand_back_guard_on_a_real_api_server(apiserver, helm_home, major):
    """The flip, release by release, with real Helm against a real API server. The autoscaler is
    played by hand: the adapter's /scale and the Pooler's spec.instances set to 4, as the HPA and
    the adapter controller would. Upgrades keep the live 4; pausing or turning off with the stale
    key is refused naming the live count; with the key at 4 it goes through and the count stays.
    The Cluster's count takes the same path through the same helpers."""
    kube, ns = apiserver.kube, f"tenant-h{major}"
    helm = Helm(helm_home / f"api{major}", major, kubeconfig=apiserver.kubeconfig)
    chart = Path(helm_home) / f"chart{major}"
    shutil.copytree(FIXTURE, chart)
    assert chartgen("app", "--chart", chart).returncode == 0

    def release(values, fails=None, *extra):
        args = ["upgrade", "--install", "pg", chart, "--namespace", ns, "--create-namespace", *extra]
        out = helm.run(*args, *[a for v in values for a in ("--set", v)])
        if fails:
            assert out.returncode != 0 and fails in out.stderr, out.stderr
        else:
            assert out.returncode == 0, out.stderr
        return live_instances(kube, "Pooler", "pg-pooler-rw", ns)

    def change_after_hand_back(kind, name, values, count):
        """Another count once autoscaling is off: the autoscaler's field manager still co-owns the
        field, so Helm 4's server-side apply needs --force-conflicts; Helm 3's patch needs nothing."""
        if major == 4:
            release(values, "conflict")
            release(values, None, "--force-conflicts")
        else:
            release(values)
        assert live_instances(kube, kind, name, ns) == count

    assert release(["pooler.instances=2"]) == 2
    assert kube.get(*ADAPTER, "pg-pooler-rw", ns) is None
    assert release(ON + ["pooler.instances=2", "autoscaling.pooler.transition=true"]) == 2
    assert kube.get(*ADAPTER, "pg-pooler-rw", ns)["spec"]["paused"] is True
    assert release(ON + ["pooler.instances=2"]) == 2
    assert kube.get(*ADAPTER, "pg-pooler-rw", ns)["spec"]["paused"] is False
    # The HPA through the adapter's /scale, and the adapter controller's write of the Pooler's count.
    kube.merge_patch(*ADAPTER, "pg-pooler-rw", {"spec": {"replicas": 4}}, ns, sub="scale")
    kube.merge_patch("postgresql.cnpg.io/v1", "Pooler", "pg-pooler-rw", {"spec": {"instances": 4}}, ns)
    assert release(ON + ["pooler.instances=2"]) == 4, "a routine upgrade keeps the live count"
    assert kube.get(*ADAPTER, "pg-pooler-rw", ns)["spec"]["replicas"] == 4, "and the adapter's"
    stale = ("pooler.instances (2) differs from the live instances (4) the autoscaler set: "
             "set pooler.instances to 4")
    assert release(["pooler.instances=2"], stale) == 4
    assert release(ON + ["pooler.instances=2", "autoscaling.pooler.dryRun=true"], stale) == 4
    assert release(ON + ["pooler.instances=4", "autoscaling.pooler.transition=true"]) == 4
    assert PAUSE.items() <= kube.get(*SCALED_OBJECT, "pg-pooler-rw", ns)["metadata"]["annotations"].items()
    # Paused both ways now: the guard lets any count render.
    dry = helm.run("upgrade", "pg", chart, "--namespace", ns, "--dry-run=server", "--set", "pooler.instances=3")
    assert dry.returncode == 0 and "\n  instances: 3\n" in dry.stdout, dry.stderr
    assert release(["pooler.instances=4"]) == 4, "handed back at the live count"
    assert kube.get(*ADAPTER, "pg-pooler-rw", ns) is None and kube.get(*SCALED_OBJECT, "pg-pooler-rw", ns) is None
    change_after_hand_back("Pooler", "pg-pooler-rw", ["pooler.instances=3"], 3)

    # The Cluster's count through the helpers that now take the target as an argument.
    assert live_instances(kube, "Cluster", "pg", ns) == 2
    release(["pooler.instances=3", "autoscaling.enabled=true"])
    kube.merge_patch("postgresql.cnpg.io/v1", "Cluster", "pg", {"spec": {"replicas": 5}}, ns, sub="scale")
    release(["pooler.instances=3", "autoscaling.enabled=true", "autoscaling.target=100"])
    assert live_instances(kube, "Cluster", "pg", ns) == 5
    release(["pooler.instances=3", "replicas=2"], "replicas (2) differs from the live instances (5) the autoscaler set")
    release(["pooler.instances=3", "replicas=5"])
    assert live_instances(kube, "Cluster", "pg", ns) == 5
    change_after_hand_back("Cluster", "pg", ["pooler.instances=3", "replicas=3"], 3)
