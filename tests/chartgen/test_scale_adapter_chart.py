"""The scale adapter in the package chart: off by default, its flags follow the values, its
ClusterRole reaches only scaleadapters and the listed target kinds, its Lease, PDB, NetworkPolicy
and scrape object follow the shard controller's conventions, and the CRD ships in crds/."""
import yaml

from conftest import PACKAGE, one
from validate import validate_all

NS = "cozy-autoscaling"
NAME = "cozy-autoscaling-scale-adapter"
ON = ["scaleAdapter.enabled=true"]


def render(helm, sets=(), values=None):
    return helm.render(PACKAGE, sets, keda=False, release=NS, namespace=NS, values=values)


def test_off_by_default_with_the_crd_shipped_either_way(helm):
    assert not [o for o in render(helm) if o["metadata"]["name"].startswith(NAME)]
    [crd] = [d for d in yaml.safe_load_all((PACKAGE / "crds/scaleadapters.yaml").read_text()) if d]
    assert crd["metadata"]["name"] == "scaleadapters.autoscaling.cozystack.io"
    assert crd["spec"]["versions"][0]["subresources"]["scale"]["labelSelectorPath"] == ".status.selector"


def test_deployment_runs_the_adapter_with_the_values(helm):
    objs = render(helm, ON + ["scaleAdapter.minWriteInterval=1m", "scaleAdapter.syncInterval=10s"])
    validate_all(objs)
    dep = one(objs, "Deployment", NAME)
    assert dep["spec"]["replicas"] == 2
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    [c] = pod["containers"]
    assert c["args"][0] == "scale-adapter"
    for arg in ["--min-write-interval=1m", "--sync-interval=10s", "--admin-listen=0.0.0.0:9090"]:
        assert arg in c["args"], (arg, c["args"])
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {"POD_NAMESPACE": "metadata.namespace", "POD_NAME": "metadata.name"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert set(c["resources"]["limits"]) == {"memory"}
    assert one(objs, "PodDisruptionBudget", NAME)
    assert not [o for o in render(helm, ON + ["scaleAdapter.replicas=1"]) if o["kind"] == "PodDisruptionBudget"
                and o["metadata"]["name"] == NAME]


def test_rbac_reaches_only_adapters_and_the_listed_targets(helm):
    objs = render(helm, ON)
    rules = one(objs, "ClusterRole", NAME)["rules"]
    verbs = {(r["apiGroups"][0], r["resources"][0]): set(r["verbs"]) for r in rules}
    assert verbs == {
        ("autoscaling.cozystack.io", "scaleadapters"): {"get", "list", "watch"},
        ("autoscaling.cozystack.io", "scaleadapters/status"): {"patch"},
        ("databases.spotahome.com", "redisfailovers"): {"get", "patch"},
        ("postgresql.cnpg.io", "poolers"): {"get", "patch"},
    }
    other = render(helm, values={"scaleAdapter": {"enabled": True, "targets": [
        {"apiGroup": "example.com", "resource": "widgets"}]}})
    groups = {r["apiGroups"][0] for r in one(other, "ClusterRole", NAME)["rules"]}
    assert groups == {"autoscaling.cozystack.io", "example.com"}
    lease = one(objs, "Role", f"{NAME}-lease")
    named = [r for r in lease["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": ["cozy-scale-adapter"], "verbs": ["get", "update"]}]
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for b in [o for o in objs if o["kind"] == kind and o["metadata"]["name"].startswith(NAME)]:
            assert b["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NS}]


def test_network_policy_and_scrape(helm):
    objs = render(helm, ON + ["monitoring.scrape=VMServiceScrape"])
    policy = one(objs, "NetworkPolicy", NAME)
    assert policy["spec"]["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": NAME}}
    [rule] = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "admin", "protocol": "TCP"}]
    assert one(objs, "VMServiceScrape", NAME)


def test_bad_targets_are_refused(helm):
    for bad in ({"apiGroup": "", "resource": "x"}, {"apiGroup": "a.b", "resource": "X Y"},
                {"apiGroup": "a.b", "resource": "x", "verbs": ["delete"]}):
        out = helm.template(PACKAGE, keda=False, values={"scaleAdapter": {"enabled": True, "targets": [bad]}})
        assert out.returncode != 0, bad
