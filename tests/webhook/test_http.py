"""The HTTPS contract of `scaler webhook`: real AdmissionReview JSON over TLS from a real HTTPS
client (requests), patches checked with an independent JSON Patch implementation (jsonpatch)."""
import copy
import ssl
import time

import jsonpatch
import pytest
import requests

from testkit import wait_until
from webhook_harness import SHARD_KEY, TRANSIENT, Emulator, Webhook, hr, make_certs, patch_of, review

READY = ["--assume-shards-ready"]


@pytest.fixture(scope="module")
def hook(tmp_path_factory):
    """One emulator and webhook for the module: these tests only read state."""
    tmp = tmp_path_factory.mktemp("http")
    emulator = Emulator(tmp)
    emulator.namespace("tenant-root", "shard1")
    emulator.namespace("tenant-foo", "shard2")
    emulator.namespace("tenant-child", "shard0")
    hook = Webhook(tmp, emulator, shards=3, extra=READY)
    yield hook
    hook.stop()
    emulator.stop()


def apply(response, obj):
    """Applies the webhook's patch the way the API server would, with python-jsonpatch."""
    ops = patch_of(response)
    assert ops is not None, f"expected a patch in {response}"
    return jsonpatch.JsonPatch(ops).apply(copy.deepcopy(obj))


def counted(hook, body, reason: str) -> dict:
    """The webhook's response to `body`, checking the admission was counted under `reason`."""
    key = f'cozy_flux_shard_admissions_total{{reason="{reason}"}}'
    before = hook.metrics().get(key, 0)
    response = hook.review(body)
    assert hook.metrics().get(key, 0) == before + 1, f"not counted as {reason}"
    return response


def test_existing_labels_get_the_shard_key_with_rfc6901_escaping(hook):
    obj = hr("tenant-foo", "pg", {SHARD_KEY: "tenants", "app.kubernetes.io/name": "pg"})
    response = counted(hook, review("CREATE", "tenant-foo", obj), "stamped")
    ops = patch_of(response)
    assert ops == [{"op": "add", "path": "/metadata/labels/sharding.fluxcd.io~1key", "value": "shard2"}]
    patched = apply(response, obj)
    assert patched["metadata"]["labels"] == {SHARD_KEY: "shard2", "app.kubernetes.io/name": "pg"}
    assert patched["spec"] == obj["spec"]


@pytest.mark.parametrize("labels", ["absent", "null"])
def test_missing_labels_map_is_added_whole(hook, labels):
    obj = hr("tenant-foo", "redis", None)
    if labels == "null":
        obj["metadata"]["labels"] = None
    response = counted(hook, review("CREATE", "tenant-foo", obj), "stamped")
    assert patch_of(response) == [{"op": "add", "path": "/metadata/labels", "value": {SHARD_KEY: "shard2"}}]
    assert apply(response, obj)["metadata"]["labels"] == {SHARD_KEY: "shard2"}


def test_parent_tenant_release_follows_its_child_tenant(hook):
    obj = hr("tenant-root", "tenant-child", {"apps.cozystack.io/application.kind": "Tenant", SHARD_KEY: "tenants"})
    response = hook.review(review("CREATE", "tenant-root", obj))
    assert apply(response, obj)["metadata"]["labels"][SHARD_KEY] == "shard0"


def test_already_stamped_release_is_not_patched(hook):
    obj = hr("tenant-foo", "pg", {SHARD_KEY: "shard2"})
    assert patch_of(counted(hook, review("CREATE", "tenant-foo", obj), "already_stamped")) is None


@pytest.mark.parametrize("operation", ["UPDATE", "DELETE", "CONNECT"])
def test_update_delete_and_connect_are_allowed_unchanged(hook, operation):
    obj = hr("tenant-foo", "pg", {SHARD_KEY: "tenants"})
    assert patch_of(counted(hook, review(operation, "tenant-foo", obj), "not_create")) is None


@pytest.mark.parametrize("ns", ["cozy-system", "default", "cozy-fluxcd"])
def test_non_tenant_namespaces_are_allowed_unchanged(hook, ns):
    body = review("CREATE", ns, hr(ns, "cilium", {SHARD_KEY: "tenants"}))
    assert patch_of(counted(hook, body, "not_tenant")) is None


def test_other_kinds_and_versions_are_allowed_unchanged(hook):
    obj = hr("tenant-foo", "pg", None)
    for kind in [("helm.toolkit.fluxcd.io", "v2beta2", "HelmRelease"), ("", "v1", "ConfigMap"),
                 ("source.toolkit.fluxcd.io", "v2", "HelmRelease")]:
        assert patch_of(counted(hook, review("CREATE", "tenant-foo", obj, kind=kind), "not_helmrelease")) is None


def test_malformed_objects_are_allowed_unchanged(hook):
    for obj in [{"metadata": {"name": "x", "labels": ["not", "a", "map"]}}, {"metadata": "nope"}, {"spec": {}},
                {"metadata": {"name": "x", "labels": {"a": 1}}}, {"metadata": {"name": 7}}, "not an object",
                None]:
        body = review("CREATE", "tenant-foo", obj)
        body["request"]["name"] = "x"  # the request stays well-formed: only its object is not
        assert patch_of(counted(hook, body, "malformed_object")) is None, obj


@pytest.mark.parametrize("body", [
    b"not json",
    b"{}",
    b"[]",
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview"}',
    b'{"apiVersion":"admission.k8s.io/v1beta1","kind":"AdmissionReview","request":{"uid":"u","kind":{"group":"","version":"v1","kind":"Pod"},"operation":"CREATE"}}',
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":7}}',
])
def test_bodies_that_are_not_reviews_get_400_and_the_server_survives(hook, body):
    r = hook.post(body)
    assert r.status_code == 400, r.text
    assert "AdmissionReview" in r.text
    # Still serving afterwards.
    assert patch_of(hook.review(review("CREATE", "tenant-foo", hr("tenant-foo", "pg", None)))) is not None


def test_other_paths_and_methods_get_404(hook):
    base = hook.url.rsplit("/", 1)[0]
    assert hook.session.get(hook.url, timeout=5).status_code == 404
    assert hook.session.post(base + "/mutate", data=b"{}", timeout=5).status_code == 404
    assert hook.session.get(base + "/", timeout=5).status_code == 404


def test_tls_is_required_and_verifiable(hook):
    # The generated CA verifies the served certificate (requests verifies by default with it) ...
    assert hook.session.get(hook.url, timeout=5).status_code == 404
    # ... an untrusting client refuses it, and plain HTTP gets no answer.
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(hook.url, timeout=5, verify=True)
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(hook.url.replace("https://", "http://"), timeout=5)


def test_certificate_is_reloaded_when_the_files_change(hook):
    def served_subject():
        pem = ssl.get_server_certificate(("127.0.0.1", hook.port))
        der = ssl.PEM_cert_to_DER_cert(pem)
        return der

    before = served_subject()
    make_certs(hook.certs["ca"].parent, cn="rotated.localhost")
    wait_until(lambda: served_subject() != before, timeout=15, what="the rotated certificate", retry=TRANSIENT)
    # The rotated certificate is signed by the same CA: clients keep verifying.
    assert hook.review(review("CREATE", "tenant-foo", hr("tenant-foo", "pg", None)))


def test_health_endpoints_and_outcome_metrics(hook):
    assert requests.get(hook.admin + "/healthz", timeout=5).status_code == 200
    assert requests.get(hook.admin + "/readyz", timeout=5).status_code == 200
    hook.review(review("CREATE", "tenant-foo", hr("tenant-foo", "pg", None)))
    hook.review(review("UPDATE", "tenant-foo", hr("tenant-foo", "pg", None)))
    m = hook.metrics()
    assert m['cozy_flux_shard_admissions_total{reason="stamped"}'] >= 1
    assert m['cozy_flux_shard_admissions_total{reason="not_create"}'] >= 1
    assert m["cozy_flux_shard_admission_duration_seconds_count"] >= 2
    assert 'cozy_flux_shard_recommended_count' in m


def test_responses_are_fast(hook):
    body = review("CREATE", "tenant-foo", hr("tenant-foo", "pg", None))
    started = time.monotonic()
    for _ in range(50):
        hook.review(body)
    assert (time.monotonic() - started) / 50 < 0.1
