"""Tenant users see their own autoscaling: the package's aggregated ClusterRole, folded into the
built-in view/edit roles by kube-controller-manager's clusterrole-aggregation controller, lets a user
bound to `view` in their namespace read its ScaledObjects and HPAs, and nothing elsewhere or more.
Requests are made as the admin impersonating the tenant user, as `kubectl --as` does."""

from rig import POLL
from testkit import wait_until

USER = "tenant-x-viewer"
TENANT, OTHER = "tenant-access-x", "tenant-access-y"
SO = "/apis/keda.sh/v1alpha1/namespaces/{ns}/scaledobjects"
HPA = "/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"


def as_user(rig, method: str, path: str, body=None) -> int:
    kube = rig.kube
    r = kube.session.request(method, kube.server + path, json=body, verify=kube.ca, timeout=30,
                             headers={"Impersonate-User": USER})
    return r.status_code


def test_a_tenant_viewer_reads_the_autoscaling_of_their_namespace_only(rig, package):
    for ns in (TENANT, OTHER):
        rig.kube.ensure_namespace(ns)
    rig.kube.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": "viewer", "namespace": TENANT},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}]})
    # The aggregation controller copies the package's rules into `view` within moments.
    wait_until(lambda: as_user(rig, "GET", SO.format(ns=TENANT)) == 200, timeout=30, interval=POLL,
               what="view aggregates the package's ScaledObject read access")
    assert as_user(rig, "GET", HPA.format(ns=TENANT)) == 200
    assert as_user(rig, "GET", SO.format(ns=OTHER)) == 403
    assert as_user(rig, "GET", "/apis/keda.sh/v1alpha1/scaledobjects") == 403
    created = {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
               "metadata": {"name": "mine", "namespace": TENANT},
               "spec": {"scaleTargetRef": {"name": "pg"}, "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]}}
    assert as_user(rig, "POST", SO.format(ns=TENANT), created) == 403
    view = rig.kube.get("rbac.authorization.k8s.io/v1", "ClusterRole", "view")
    assert any("keda.sh" in rule.get("apiGroups", []) and set(rule["verbs"]) == {"get", "list", "watch"}
               for rule in view["rules"])
