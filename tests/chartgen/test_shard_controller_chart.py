"""The shard controller in the package chart: its flags follow the values, leader election has a
Lease it may write, RBAC allows only what it reads and writes, and its alerts use its metrics."""
import re

from conftest import PACKAGE, one

NS = "cozy-autoscaling"
NAME = "cozy-autoscaling-shard-controller"


def render(helm, sets=()):
    return helm.render(PACKAGE, sets, keda=False, release=NS, namespace=NS)


def test_deployment_runs_the_controller_with_the_values(helm):
    objs = render(helm, ["shards.count=3", "shardController.grace=2m", "shardController.movesPerSync=7",
                         "shardController.dryRun=true"])
    dep = one(objs, "Deployment", NAME)
    assert dep["spec"]["replicas"] == 2
    [c] = dep["spec"]["template"]["spec"]["containers"]
    assert c["args"][0] == "shard-controller"
    for arg in ["--shards=3", "--grace=2m", "--moves-per-sync=7", "--cooldown=10m",
                "--rebalance-threshold=0.25", "--flux-namespace=cozy-fluxcd", "--dry-run"]:
        assert arg in c["args"], (arg, c["args"])
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}
    assert "--dry-run" not in one(render(helm), "Deployment", NAME)["spec"]["template"]["spec"]["containers"][0]["args"]


def test_rbac_is_limited_to_what_the_controller_writes(helm):
    objs = render(helm)
    rules = one(objs, "ClusterRole", NAME)["rules"]
    verbs = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in rules}
    assert verbs == {
        ("helm.toolkit.fluxcd.io", "helmreleases"): {"get", "list", "watch", "patch"},
        ("", "namespaces"): {"get", "list", "watch", "patch"},
        ("events.k8s.io", "events"): {"create", "patch"},
    }
    lease = one(objs, "Role", f"{NAME}-lease")
    assert "namespace" not in lease["metadata"], "the Lease lives in the release namespace"
    named = [r for r in lease["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": ["cozy-flux-shard-controller"], "verbs": ["get", "update"]}]
    flux = one(objs, "Role", NAME)
    assert flux["metadata"]["namespace"] == "cozy-fluxcd"
    assert flux["rules"] == [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]}]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for b in [o for o in objs if o["kind"] == kind and o["metadata"]["name"].startswith(NAME)]:
            assert b["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NS}]


def test_alerts_watch_stranded_tenants_leadership_and_the_shard_count(helm):
    rule = one(render(helm), "PrometheusRule", NAME)
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(rules) == {"CozyFluxShardStrandedTenants", "CozyFluxShardControllerNoLeader",
                          "CozyFluxShardCountMismatch"}
    metrics = {m for r in rules.values() for m in re.findall(r"cozy_flux_shard_\w+", r["expr"])}
    # Each name is one the controller registers (sharding/src/controller/metrics.rs).
    assert metrics == {"cozy_flux_shard_stranded_tenants", "cozy_flux_shard_leader",
                       "cozy_flux_shard_recommended_shards", "cozy_flux_shard_configured_shards"}
    assert rules["CozyFluxShardCountMismatch"]["for"] == "6h"


def test_the_controller_can_be_disabled(helm):
    objs = render(helm, ["shardController.enabled=false"])
    assert not [o for o in objs if o["metadata"]["name"].startswith(NAME)]
