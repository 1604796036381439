"""`/decisions` on the admin port: what `scaler serve` last decided for each ScaledObject a
real gRPC client (the way KEDA calls) asked about, over the real VictoriaMetrics base set;
filtered by namespace, bounded in entries, never grown by made-up names past the cache; and
the per-ScaledObject error counters on /metrics next to it."""
import grpc
import requests

import promtext
import scenarios
from keda import code_of, metadata


def decisions(scaler, **params):
    r = requests.get(f"{scaler.admin}/decisions", params=params, timeout=5)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    return r.json()


def test_every_asked_scaled_object_is_listed_with_its_decision_or_its_error(vm, start_scaler):
    scaler, keda = start_scaler(vm.url)
    pg = keda.ref("tenant-a", "so-pg", metadata(target="5"))
    # 13 sessions / 5 per replica: 1 + 3 = 4 instances.
    assert keda.desired(pg, 5) == 4
    dry = keda.ref("tenant-b", "so-dry", metadata(target="1", dryRun="true"))
    assert keda.desired(dry, 1) == scenarios.TENANT_B_PG_INSTANCES
    ghost = keda.ref("tenant-a", "so-ghost", metadata(cluster="ghost"))
    assert code_of(lambda: keda.metrics(ghost, "cnpg-ghost-readconnections")) == grpc.StatusCode.UNAVAILABLE
    bad = keda.ref("tenant-a", "so-bad", metadata(target="ten"))
    assert code_of(lambda: keda.spec(bad)) == grpc.StatusCode.INVALID_ARGUMENT

    page = decisions(scaler)
    assert (page["total"], page["truncated"]) == (3, False), page
    by_name = {e["scaledObject"]: e for e in page["entries"]}
    assert [(e["namespace"], e["scaledObject"]) for e in page["entries"]] == [
        ("tenant-a", "so-ghost"), ("tenant-a", "so-pg"), ("tenant-b", "so-dry")]
    e = by_name["so-pg"]
    assert (e["cluster"], e["current"], e["desired"], e["recommended"], e["reason"]) == \
        ("pg", scenarios.TENANT_A_PG_INSTANCES, 4, 4, "load")
    assert e["lastError"] is None and e["lastSuccess"] and e["lastEvaluation"]
    e = by_name["so-dry"]
    assert (e["desired"], e["recommended"], e["reason"]) == (scenarios.TENANT_B_PG_INSTANCES, 3, "dry-run")
    e = by_name["so-ghost"]
    assert e["desired"] is None and e["reason"] is None and e["lastSuccess"] is None
    assert e["lastError"]["code"] == "Unavailable" and "ghost" in e["lastError"]["message"], e
    assert e["lastError"]["ageSeconds"] >= 0 and e["lastError"]["time"].endswith("Z")
    # Invalid metadata never reaches the decision cache: KEDA got INVALID_ARGUMENT.
    assert "so-bad" not in by_name

    samples = promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text)
    assert promtext.total(samples, "scaler_scaledobject_errors_total", namespace="tenant-a",
                          scaledobject="so-ghost", code="Unavailable") >= 1
    assert promtext.total(samples, "scaler_scaledobject_errors_total", scaledobject="so-pg") == 0

    only_b = decisions(scaler, namespace="tenant-b")
    assert [e["scaledObject"] for e in only_b["entries"]] == ["so-dry"] and only_b["total"] == 1
    one = decisions(scaler, limit=1)
    assert (one["total"], one["truncated"], len(one["entries"])) == (3, True, 1)
    for bad_params in ({"namespace": "Tenant/../x"}, {"limit": "many"}):
        r = requests.get(f"{scaler.admin}/decisions", params=bad_params, timeout=5)
        assert r.status_code == 400 and len(r.text) < 400, r.text


def test_made_up_names_never_grow_the_answer_past_the_cache(vm, start_scaler):
    scaler, keda = start_scaler(vm.url, "--max-cached-objects", "16")
    for i in range(60):
        keda.is_active(keda.ref("tenant-a", f"made-up-{i}", metadata(target="5")))
    page = decisions(scaler)
    assert page["total"] <= 16 and len(page["entries"]) == page["total"], page["total"]
    assert len(requests.get(f"{scaler.admin}/decisions", timeout=5).content) < 16 * 1024
    gauges = promtext.select(promtext.scrape(f"{scaler.admin}/metrics"), "scaler_decision_desired_instances")
    assert len(gauges) == page["total"]


def test_invalid_metadata_is_logged_at_warn_once_per_scaled_object_and_content(vm, start_scaler):
    scaler, keda = start_scaler(vm.url)
    bad = keda.ref("tenant-a", "so-typo", metadata(targett="5"))
    for _ in range(5):
        assert code_of(lambda: keda.spec(bad)) == grpc.StatusCode.INVALID_ARGUMENT
    other = keda.ref("tenant-b", "so-typo", metadata(targett="5"))
    assert code_of(lambda: keda.spec(other)) == grpc.StatusCode.INVALID_ARGUMENT
    with open(scaler.log) as f:
        warns = [line for line in f if "invalid trigger metadata" in line and "WARN" in line]
    assert len(warns) == 2, warns
    assert all("targett" in line for line in warns), warns
