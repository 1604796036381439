"""The platform package chart installed with the real helm into the rig's apiserver, and its
shard-placement webhook: the chart's own MutatingWebhookConfiguration and Service route admission
to our `scaler webhook` process (listening on the Service's ClusterIP, see rig/controlplane.py)."""

import time

import pytest

from placement import MWC, Webhook
from secured import FLUX_NS, NS, SHARDS, VALUES

HR = "helm.toolkit.fluxcd.io/v2"
KEY = "sharding.fluxcd.io/key"
NS_LABEL = "internal.cozystack.io/flux-shard"


def test_package_installs_and_upgrades(rig, package):
    helm, chart = package
    apps = "apps/v1"
    assert rig.kube.get(apps, "Deployment", "cozy-autoscaling-scaler", NS)["spec"]["replicas"] == 2
    shards = sorted(d["metadata"]["name"] for d in rig.kube.list(apps, "Deployment", FLUX_NS))
    assert shards == [f"helm-controller-shard{i}" for i in range(SHARDS)]
    mwc = rig.kube.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", MWC)
    assert mwc["webhooks"][0]["failurePolicy"] == "Ignore"
    helm.upgrade_install("cozy-autoscaling", chart, NS, {**VALUES, "scaler": {"replicas": 3}})
    assert rig.kube.get(apps, "Deployment", "cozy-autoscaling-scaler", NS)["spec"]["replicas"] == 3
    # The upgrade kept everything else in place.
    assert rig.kube.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", MWC)
    # The API server took the mTLS and NetworkPolicy objects (KEDA's CRD schema included).
    auth = rig.kube.get("keda.sh/v1alpha1", "ClusterTriggerAuthentication", "cozy-autoscaling-scaler")
    assert [r["parameter"] for r in auth["spec"]["secretTargetRef"]] == ["caCert", "tlsClientCert", "tlsClientKey"]
    assert rig.kube.get("cert-manager.io/v1", "ClusterIssuer", "cozy-autoscaling-scaler-ca")
    policies = {p["metadata"]["name"] for p in rig.kube.list("networking.k8s.io/v1", "NetworkPolicy", NS)}
    assert policies == {"cozy-autoscaling-scaler", "cozy-autoscaling-webhook"}


@pytest.fixture(scope="module")
def webhook(rig, package):
    hook = Webhook(rig).start()
    yield hook
    hook.stop()


def tenant_release(rig, namespace: str, name: str, labels: dict) -> dict:
    rig.kube.ensure_namespace(namespace)
    return rig.kube.create({
        "apiVersion": HR, "kind": "HelmRelease",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"interval": "5m", "chartRef": {"kind": "OCIRepository", "name": "absent"}}})


def ns_label(rig, namespace: str):
    return rig.kube.get("v1", "Namespace", namespace)["metadata"].get("labels", {}).get(NS_LABEL)


def test_webhook_stamps_tenant_helmreleases(rig, webhook):
    canonical = {f"shard{i}" for i in range(SHARDS)}
    first = tenant_release(rig, "tenant-alpha", "db", {KEY: "tenants"})
    shard = first["metadata"]["labels"][KEY]
    assert shard in canonical, f"not stamped: {first['metadata']['labels']}"
    assert ns_label(rig, "tenant-alpha") == shard, "placement not recorded on the namespace"
    second = tenant_release(rig, "tenant-alpha", "cache", {KEY: "tenants", "app": "x"})
    assert second["metadata"]["labels"] == {KEY: shard, "app": "x"}
    # A second tenant goes to the least-loaded shard: the one alpha does not use.
    other = tenant_release(rig, "tenant-beta", "db", {KEY: "tenants"})
    assert other["metadata"]["labels"][KEY] == (canonical - {shard}).pop()
    # Outside the objectSelector (no legacy key): untouched.
    plain = tenant_release(rig, "tenant-alpha", "plain", {})
    assert KEY not in plain["metadata"].get("labels", {})


def test_creates_succeed_with_the_webhook_stopped(rig, webhook):
    webhook.stop()
    start = time.monotonic()
    hr = tenant_release(rig, "tenant-gamma", "db", {KEY: "tenants"})
    assert hr["metadata"]["labels"][KEY] == "tenants"  # failurePolicy Ignore: admitted unchanged
    assert ns_label(rig, "tenant-gamma") is None
    assert time.monotonic() - start < 10
