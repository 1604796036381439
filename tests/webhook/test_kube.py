"""The Kubernetes side of `scaler webhook` against the in-memory API (emulator.py): namespace
label recording, concurrent creates agreeing, optimistic-concurrency conflicts, loads from the
HelmRelease watch, readiness from shard Deployments, and fast fallbacks when the API fails."""
import concurrent.futures
import time

import requests

from testkit import wait_until
from webhook_harness import SHARD_KEY, TRANSIENT, Emulator, hr, patch_of, review

READY = ["--assume-shards-ready"]


def stamped(response) -> str | None:
    """The shard a review's patch sets, or None when the object is allowed unchanged."""
    ops = patch_of(response)
    if ops is None:
        return None
    (op,) = ops
    value = op["value"]
    return value[SHARD_KEY] if isinstance(value, dict) else value


def create(hook, ns, name="app", **kw):
    return stamped(hook.review(review("CREATE", ns, hr(ns, name, {SHARD_KEY: "tenants"}), **kw)))


def seed_loads(emulator):
    """shard0 carries 5 releases (tenant-a), shard1 one (tenant-b), shard2 none."""
    emulator.namespace("tenant-a", "shard0")
    emulator.namespace("tenant-b", "shard1")
    for i in range(5):
        emulator.helmrelease("tenant-a", f"a{i}", "shard0")
    emulator.helmrelease("tenant-b", "b0", "shard1")


def wait_load(hook, shard, value):
    key = f'cozy_flux_shard_load{{shard="{shard}"}}'
    wait_until(lambda: hook.metrics().get(key) == value, what=f"{key} == {value}", retry=TRANSIENT)


def test_new_tenant_is_placed_on_least_loaded_shard_and_recorded(emulator, start_webhook):
    seed_loads(emulator)
    emulator.namespace("tenant-new")
    hook = start_webhook(emulator, shards=3, extra=READY)
    wait_load(hook, "shard0", 5)
    assert create(hook, "tenant-new") == "shard2"
    assert emulator.namespace_label("tenant-new") == "shard2"
    # Later releases of the tenant follow the recorded label.
    assert create(hook, "tenant-new", "second") == "shard2"
    assert hook.metrics()["cozy_flux_shard_placements_total"] == 1


def test_loads_come_from_the_helmrelease_watch(emulator, start_webhook):
    seed_loads(emulator)
    hook = start_webhook(emulator, shards=3, extra=READY)
    # Ten releases appear on shard2 after startup: only the watch can tell the webhook.
    emulator.namespace("tenant-c", "shard2")
    for i in range(10):
        emulator.helmrelease("tenant-c", f"c{i}", "shard2")
    wait_load(hook, "shard2", 10)
    m = hook.metrics()
    assert m["cozy_flux_shard_helmreleases"] == 16 and m["cozy_flux_shard_tenants"] == 3
    emulator.namespace("tenant-new")
    assert create(hook, "tenant-new") == "shard1"


def test_concurrent_creates_for_one_new_tenant_agree(emulator, start_webhook):
    seed_loads(emulator)
    emulator.namespace("tenant-burst")
    hook = start_webhook(emulator, shards=3, extra=READY)
    bodies = [review("CREATE", "tenant-burst", hr("tenant-burst", f"app{i}", None)) for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=24) as pool:
        shards = list(pool.map(lambda b: stamped(hook.review(b)), bodies))
    assert len(set(shards)) == 1 and shards[0] is not None, shards
    assert emulator.namespace_label("tenant-burst") == shards[0]


def test_two_replicas_agree_through_the_namespace_label(emulator, start_webhook):
    # Two webhook replicas, each placing the same new tenant concurrently.
    seed_loads(emulator)
    emulator.namespace("tenant-pair")
    hooks = [start_webhook(emulator, shards=3, extra=READY) for _ in range(2)]
    bodies = [(hooks[i % 2], review("CREATE", "tenant-pair", hr("tenant-pair", f"app{i}", None))) for i in range(16)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=16) as pool:
        shards = list(pool.map(lambda hb: stamped(hb[0].review(hb[1])), bodies))
    assert len(set(shards)) == 1 and shards[0] is not None, shards
    assert emulator.namespace_label("tenant-pair") == shards[0]


def test_conflict_adopts_the_winners_label(tmp_path, start_webhook):
    # Another writer labels tenant-race shard1 between the webhook's read and its write; least-
    # loaded placement alone would pick shard2.
    emulator = Emulator(tmp_path, races=["tenant-race=shard1"])
    try:
        seed_loads(emulator)
        emulator.namespace("tenant-race")
        hook = start_webhook(emulator, shards=3, extra=READY)
        wait_load(hook, "shard0", 5)
        assert create(hook, "tenant-race") == "shard1"
        assert emulator.namespace_label("tenant-race") == "shard1"
        m = hook.metrics()
        assert m['cozy_flux_shard_namespace_label_writes_total{result="conflict"}'] == 1
        assert m["cozy_flux_shard_placements_total"] == 0
    finally:
        emulator.stop()


def test_invalid_or_out_of_range_label_is_replaced(emulator, start_webhook):
    seed_loads(emulator)
    emulator.namespace("tenant-old", "shard7")
    emulator.namespace("tenant-typo", "shard02")
    hook = start_webhook(emulator, shards=3, extra=READY)
    wait_load(hook, "shard0", 5)
    assert create(hook, "tenant-old") == "shard2"
    assert emulator.namespace_label("tenant-old") == "shard2"
    assert create(hook, "tenant-typo") in ("shard1", "shard2")
    assert emulator.namespace_label("tenant-typo") in ("shard1", "shard2")


def test_parent_release_of_a_tenant_without_namespace_is_placed_without_writing(emulator, start_webhook):
    seed_loads(emulator)
    emulator.namespace("tenant-root", "shard0")
    hook = start_webhook(emulator, shards=3, extra=READY)
    wait_load(hook, "shard1", 1)
    parent = hr("tenant-root", "tenant-fresh", {"apps.cozystack.io/application.kind": "Tenant", SHARD_KEY: "tenants"})
    assert stamped(hook.review(review("CREATE", "tenant-root", parent))) == "shard2"
    r = requests.get(emulator.url + "/api/v1/namespaces/tenant-fresh", timeout=5)
    assert r.status_code == 404


def test_dry_run_places_without_recording(emulator, start_webhook):
    seed_loads(emulator)
    emulator.namespace("tenant-dry")
    hook = start_webhook(emulator, shards=3, extra=READY)
    wait_load(hook, "shard0", 5)
    assert create(hook, "tenant-dry", dry_run=True) == "shard2"
    assert emulator.namespace_label("tenant-dry") is None


def test_readiness_comes_from_shard_deployments(emulator, start_webhook):
    seed_loads(emulator)
    emulator.namespace("tenant-wait")
    emulator.namespace("tenant-go")
    hook = start_webhook(emulator, shards=3, extra=["--flux-namespace", "cozy-fluxcd"])
    # No shard Deployment is ready: a new tenant stays on the legacy key, untouched.
    assert create(hook, "tenant-wait") is None
    assert emulator.namespace_label("tenant-wait") is None
    assert hook.metrics()['cozy_flux_shard_admissions_total{reason="no_ready_shard"}'] == 1
    # Tenants with a recorded shard are stamped regardless.
    assert create(hook, "tenant-b") == "shard1"
    # Only shard0 (the most loaded) becomes ready: that is where the next tenant must go.
    emulator.shard_deployment("cozy-fluxcd", 2, ready=0)
    emulator.shard_deployment("cozy-fluxcd", 0, ready=1)
    wait_until(lambda: create(hook, "tenant-go") == "shard0", what="placement on the ready shard0",
               retry=TRANSIENT)
    assert emulator.namespace_label("tenant-go") == "shard0"


def test_api_failure_allows_unchanged_and_fast(tmp_path, start_webhook):
    emulator = Emulator(tmp_path)
    seed_loads(emulator)
    emulator.namespace("tenant-lost")
    hook = start_webhook(emulator, shards=3, extra=READY + ["--api-timeout", "500ms"])
    wait_load(hook, "shard0", 5)
    emulator.stop()
    started = time.monotonic()
    assert create(hook, "tenant-lost") is None
    assert time.monotonic() - started < 2.0
    assert hook.metrics()['cozy_flux_shard_admissions_total{reason="api_error"}'] == 1
    # The cached label of a known tenant still stamps without the API.
    assert create(hook, "tenant-a") == "shard0"


def test_slow_api_allows_unchanged_within_the_timeout(tmp_path, start_webhook):
    emulator = Emulator(tmp_path, stalls=["tenant-slow"])
    try:
        seed_loads(emulator)
        emulator.namespace("tenant-slow")
        hook = start_webhook(emulator, shards=3, extra=READY + ["--api-timeout", "300ms"])
        wait_load(hook, "shard0", 5)
        started = time.monotonic()
        assert create(hook, "tenant-slow") is None
        elapsed = time.monotonic() - started
        assert 0.3 <= elapsed < 1.5, elapsed
        assert hook.metrics()['cozy_flux_shard_admissions_total{reason="timeout"}'] == 1
    finally:
        emulator.stop()


def test_pin_places_a_new_tenant_on_its_shard(emulator, start_webhook):
    seed_loads(emulator)
    emulator.namespace("tenant-pinned")
    hook = start_webhook(emulator, shards=3, extra=READY + ["--pin", "tenant-pinned=shard0"])
    wait_load(hook, "shard0", 5)
    # shard0 is the most loaded; only the pin sends the tenant there.
    assert create(hook, "tenant-pinned") == "shard0"
    assert emulator.namespace_label("tenant-pinned") == "shard0"
