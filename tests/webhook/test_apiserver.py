"""`scaler webhook` behind a real kube-apiserver (etcd + kube-apiserver from the e2e rig, built by
tests/e2e/setup.sh): the API server itself calls the webhook through a MutatingWebhookConfiguration
and applies its JSON Patch, and the webhook's watches and namespace writes hit the real API
(real resourceVersion preconditions, real metadata-only watches)."""
import base64
import concurrent.futures

import pytest

from testkit import wait_until
from webhook_harness import NS_LABEL, SHARD_KEY, TRANSIENT, ApiServer, Webhook, hr, patch_of, review

HR_API = "helm.toolkit.fluxcd.io/v2"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # No skip: ./run.sh test builds the kube-apiserver (tests/e2e/setup.sh) before any suite runs.
    api = ApiServer(tmp_path_factory.mktemp("apiserver"))
    yield api
    api.stop()


def namespace(kube, name, shard=None):
    kube.create({"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": name, "labels": {NS_LABEL: shard} if shard else {}}})


def create_hr(kube, ns, name, labels=None, dry_run=False):
    obj = hr(ns, name, {SHARD_KEY: "tenants", **(labels or {})})
    path = kube.path(HR_API, "HelmRelease", ns)
    return kube.request("POST", path, obj, params={"dryRun": "All"} if dry_run else None)


def key_of(obj):
    return obj["metadata"].get("labels", {}).get(SHARD_KEY)


def ns_label(kube, name):
    return (kube.get("v1", "Namespace", name)["metadata"].get("labels") or {}).get(NS_LABEL)


@pytest.fixture(scope="module")
def hook(cluster, tmp_path_factory):
    kube = cluster.kube
    namespace(kube, "tenant-a", "shard0")
    namespace(kube, "tenant-b", "shard1")
    for i in range(5):
        create_hr(kube, "tenant-a", f"a{i}", {SHARD_KEY: "shard0"})
    for i in range(2):
        create_hr(kube, "tenant-b", f"b{i}", {SHARD_KEY: "shard1"})
    # Releases without the shard key belong to the main controller: no shard load. Counted,
    # they would make shard2 the heaviest and send new tenants elsewhere.
    namespace(kube, "tenant-c", "shard2")
    for i in range(10):
        hr_obj = hr("tenant-c", f"c{i}", {})
        kube.request("POST", kube.path(HR_API, "HelmRelease", "tenant-c"), hr_obj)
    webhook = Webhook(tmp_path_factory.mktemp("hook"), cluster, shards=3, extra=["--assume-shards-ready"])
    kube.create({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "flux-shard-test"},
        "webhooks": [{
            "name": "flux-shard.cozystack.io",
            "clientConfig": {"url": webhook.url,
                             "caBundle": base64.b64encode(webhook.certs["ca"].read_bytes()).decode()},
            "rules": [{"operations": ["CREATE"], "apiGroups": ["helm.toolkit.fluxcd.io"],
                       "apiVersions": ["v2"], "resources": ["helmreleases"]}],
            "objectSelector": {"matchExpressions": [{"key": SHARD_KEY, "operator": "In", "values": ["tenants"]}]},
            "failurePolicy": "Ignore", "sideEffects": "NoneOnDryRun", "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        }],
    })
    # The API server picks the configuration up asynchronously.
    wait_until(lambda: key_of(create_hr(kube, "tenant-a", "probe", dry_run=True)) == "shard0",
               timeout=30, what="the API server calling the webhook", retry=TRANSIENT)
    loads = lambda: [webhook.metrics().get(f'cozy_flux_shard_load{{shard="shard{i}"}}') for i in range(3)]
    wait_until(lambda: loads() == [5, 2, 1], what="loads from the watch", retry=TRANSIENT)
    yield webhook
    webhook.stop()


def test_api_server_applies_the_stamp_for_a_new_tenant(cluster, hook):
    kube = cluster.kube
    namespace(kube, "tenant-new")
    created = create_hr(kube, "tenant-new", "pg", {"app.kubernetes.io/name": "pg"})
    assert key_of(created) == "shard2"
    assert created["metadata"]["labels"]["app.kubernetes.io/name"] == "pg"
    assert ns_label(kube, "tenant-new") == "shard2"
    stored = kube.get(HR_API, "HelmRelease", "pg", "tenant-new")
    assert key_of(stored) == "shard2"


def test_concurrent_creates_for_one_tenant_land_on_one_shard(cluster, hook):
    kube = cluster.kube
    namespace(kube, "tenant-burst")
    with concurrent.futures.ThreadPoolExecutor(max_workers=12) as pool:
        keys = list(pool.map(lambda i: key_of(create_hr(kube, "tenant-burst", f"app{i}")), range(12)))
    assert len(set(keys)) == 1 and keys[0] in ("shard0", "shard1", "shard2"), keys
    assert ns_label(kube, "tenant-burst") == keys[0]


def test_update_is_not_intercepted(cluster, hook):
    kube = cluster.kube
    namespace(kube, "tenant-upd", "shard1")
    assert key_of(create_hr(kube, "tenant-upd", "pg")) == "shard1"
    patched = kube.merge_patch(HR_API, "HelmRelease", "pg", {"metadata": {"labels": {SHARD_KEY: "tenants"}}}, "tenant-upd")
    assert key_of(patched) == "tenants"


def test_dry_run_does_not_record(cluster, hook):
    kube = cluster.kube
    namespace(kube, "tenant-dry")
    assert key_of(create_hr(kube, "tenant-dry", "pg", dry_run=True)) is not None
    assert ns_label(kube, "tenant-dry") is None


def test_non_tenant_namespace_is_left_alone(cluster, hook):
    kube = cluster.kube
    namespace(kube, "cozy-system")
    assert key_of(create_hr(kube, "cozy-system", "cilium")) == "tenants"


def test_two_replicas_agree_through_real_resource_versions(cluster, hook, tmp_path):
    # A second replica (not registered with the API server) and the registered one place the
    # same new tenant at once; the conditional namespace write decides, both adopt the winner.
    kube = cluster.kube
    namespace(kube, "tenant-pair")
    other = Webhook(tmp_path, cluster, shards=3, extra=["--assume-shards-ready"], certs=hook.certs)
    try:
        hooks = [hook, other]
        jobs = [(hooks[i % 2], review("CREATE", "tenant-pair", hr("tenant-pair", f"app{i}", None))) for i in range(16)]

        def shard(job):
            webhook, body = job
            ops = patch_of(webhook.review(body))
            assert ops is not None
            return ops[0]["value"][SHARD_KEY]

        with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
            shards = list(pool.map(shard, jobs))
        assert len(set(shards)) == 1, shards
        assert ns_label(kube, "tenant-pair") == shards[0]
    finally:
        other.stop()

