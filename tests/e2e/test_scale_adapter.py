"""The scale adapter (`scaler scale-adapter`) on the real kube-apiserver, with the real
RedisFailover CRD (spotahome redis-operator's Go module at REDIS_OPERATOR_VERSION, which declares no
scale subresource), CNPG's real Pooler CRD (CNPG_OPERATOR_VERSION: a scale subresource without a
selector), KEDA and the HPA (kube-controller-manager).

Stand-in, named: the Redis operator is absent on the rig (as CNPG's is), so nothing acts on
spec.redis.replicas and no Redis pod runs; the tests read what the adapter wrote. The closed loop
on a Redis decision, with the real operator, its pods and a real full sync, is the real node's
(tests/node/test_5_redis.py), which retired this suite's copy on the feeder's series.
The adapter runs as the package chart's ServiceAccount with the RBAC the chart renders."""

import copy
import time
from datetime import datetime, timezone

import pytest
import requests

from rig import POLL
from rig.kube import ApiError
from scaleadapter import ADAPTER_NS, IDENTITY, LEASE, MANAGER, MIN_WRITE, SA
from testkit import wait_until

NS = "tenant-redis"
OTHER_NS = "tenant-redis-other"
RF = "databases.spotahome.com/v1"
SELECTOR = "app.kubernetes.io/component=redis,app.kubernetes.io/part-of=redis-failover,app.kubernetes.io/name={}"


def redis_failover(name: str, namespace: str, replicas: int) -> dict:
    return {"apiVersion": RF, "kind": "RedisFailover", "metadata": {"name": name, "namespace": namespace},
            "spec": {"redis": {"replicas": replicas}, "sentinel": {"replicas": 3}}}


def adapter(name: str, target: str, replicas: int | None = 2, **spec) -> dict:
    body = {"targetRef": {"apiVersion": RF, "kind": "RedisFailover", "name": target},
            "replicasPath": "/spec/redis/replicas", "selector": SELECTOR.format(target), **spec}
    if replicas is not None:
        body["replicas"] = replicas
    return {"apiVersion": SA, "kind": "ScaleAdapter", "metadata": {"name": name, "namespace": NS}, "spec": body}


def target_replicas(rig, name: str, namespace: str = NS) -> int:
    return rig.kube.get(RF, "RedisFailover", name, namespace)["spec"]["redis"]["replicas"]


def synced(rig, name: str) -> dict:
    status = (rig.kube.get(SA, "ScaleAdapter", name, NS) or {}).get("status", {})
    return next((c for c in status.get("conditions", []) if c["type"] == "Synced"), {})


def scale(rig, name: str, replicas: int) -> dict:
    """What `kubectl scale scaleadapter/<name> --replicas=N` sends: a patch of the /scale subresource."""
    return rig.kube.merge_patch(SA, "ScaleAdapter", name, {"spec": {"replicas": replicas}}, NS, sub="scale")


def owners_of_replicas(rig, name: str, namespace: str = NS) -> set[str]:
    rf = rig.kube.get(RF, "RedisFailover", name, namespace)
    return {m["manager"] for m in rf["metadata"].get("managedFields", [])
            if "f:replicas" in m.get("fieldsV1", {}).get("f:spec", {}).get("f:redis", {})}


def hold(rig, name: str, seconds: float, expected: int) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert target_replicas(rig, name) == expected, f"the target moved off {expected} during a hold"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def adapter_proc(rig, scale_adapter):
    """The adapter (conftest.py), with this module's namespaces."""
    rig.kube.ensure_namespace(NS)
    rig.kube.ensure_namespace(OTHER_NS)
    return scale_adapter


def test_the_redisfailover_crd_has_no_scale_subresource(rig):
    crd = rig.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "redisfailovers.databases.spotahome.com")
    assert all(not v.get("subresources", {}).get("scale") for v in crd["spec"]["versions"])


def test_kubectl_scale_on_the_adapter_moves_the_target(rig, adapter_proc):
    rig.kube.apply(redis_failover("cache", NS, 2))
    rig.kube.apply(adapter("cache", "cache", replicas=2))
    wait_until(lambda: synced(rig, "cache").get("reason") == "Synced", timeout=30, interval=POLL,
               what="the adapter Synced on the initial count")
    got = scale(rig, "cache", 3)
    assert got["spec"]["replicas"] == 3
    wait_until(lambda: target_replicas(rig, "cache") == 3, timeout=30, interval=POLL,
               what="spec.redis.replicas to follow the /scale write")
    wait_until(lambda: rig.kube.get(SA, "ScaleAdapter", "cache", NS, sub="scale")["status"].get("replicas") == 3,
               timeout=30, interval=POLL, what="the scale subresource's status.replicas")
    scale_status = rig.kube.get(SA, "ScaleAdapter", "cache", NS, sub="scale")["status"]
    assert scale_status["selector"] == SELECTOR.format("cache")
    # Only the adapter owns the count: the creator's claim was taken over by the adapter's apply.
    assert owners_of_replicas(rig, "cache") == {MANAGER}
    rf = rig.kube.get(RF, "RedisFailover", "cache", NS)
    assert rf["spec"]["sentinel"]["replicas"] == 3, "a field the adapter does not own is untouched"


def test_a_cnpg_pooler_is_driven_and_its_pods_selected_without_a_selector(rig, adapter_proc):
    """Issue 41: CNPG's real Pooler CRD has a /scale the HPA refuses (no labelSelectorPath). An
    adapter naming a Pooler with no selector, under the package chart's default RBAC: a /scale write
    moves spec.instances, and the adapter's /scale selects the Pooler's pods by cnpg.io/poolerName."""
    crd = rig.kube.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", "poolers.postgresql.cnpg.io")
    (scale_sub,) = [v["subresources"]["scale"] for v in crd["spec"]["versions"]]
    assert scale_sub["specReplicasPath"] == ".spec.instances" and "labelSelectorPath" not in scale_sub
    pooler = {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Pooler",
              "metadata": {"name": "pg-pooler-rw", "namespace": NS},
              "spec": {"cluster": {"name": "pg"}, "instances": 2, "type": "rw",
                       "pgbouncer": {"poolMode": "transaction"}}}
    rig.kube.apply(pooler)
    body = adapter("pg-pooler-rw", "pg-pooler-rw")
    body["spec"] = {"targetRef": {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Pooler", "name": "pg-pooler-rw"},
                    "replicasPath": "/spec/instances", "replicas": 2}
    rig.kube.apply(body)
    wait_until(lambda: synced(rig, "pg-pooler-rw").get("reason") == "Synced", timeout=30, interval=POLL,
               what="the Pooler's adapter Synced")
    scale(rig, "pg-pooler-rw", 3)
    wait_until(lambda: rig.kube.get("postgresql.cnpg.io/v1", "Pooler", "pg-pooler-rw", NS)["spec"]["instances"] == 3,
               timeout=30, interval=POLL, what="the Pooler's spec.instances at 3")
    got = rig.kube.get(SA, "ScaleAdapter", "pg-pooler-rw", NS, sub="scale")["status"]
    assert got == {"replicas": 3, "selector": "cnpg.io/poolerName=pg-pooler-rw"}, got
    rig.kube.delete(SA, "ScaleAdapter", "pg-pooler-rw", NS)


def test_writes_are_paced(rig, adapter_proc):
    scale(rig, "cache", 4)
    wait_until(lambda: target_replicas(rig, "cache") == 4, timeout=30, interval=POLL, what="4")
    written = time.monotonic()
    scale(rig, "cache", 2)
    wait_until(lambda: target_replicas(rig, "cache") == 2, timeout=30, interval=POLL, what="2")
    assert time.monotonic() - written >= MIN_WRITE - 0.5, "two writes to one target inside --min-write-interval"


def test_paused_writes_nothing(rig, adapter_proc):
    rig.kube.merge_patch(SA, "ScaleAdapter", "cache", {"spec": {"paused": True}}, NS)
    scale(rig, "cache", 5)
    wait_until(lambda: synced(rig, "cache").get("reason") == "Paused", timeout=30, interval=POLL,
               what="the Paused condition")
    hold(rig, "cache", 3 * MIN_WRITE, 2)
    rig.kube.merge_patch(SA, "ScaleAdapter", "cache", {"spec": {"paused": False}}, NS)
    wait_until(lambda: target_replicas(rig, "cache") == 5, timeout=30, interval=POLL, what="the unpaused write")
    scale(rig, "cache", 2)
    wait_until(lambda: target_replicas(rig, "cache") == 2, timeout=30, interval=POLL, what="back to 2")


def test_a_target_in_another_namespace_is_refused(rig, adapter_proc):
    rig.kube.apply(redis_failover("elsewhere", OTHER_NS, 2))
    sneaky = adapter("sneaky", "elsewhere", replicas=4)
    sneaky["spec"]["targetRef"]["namespace"] = OTHER_NS
    collection = rig.kube.path(SA, "ScaleAdapter", NS)
    # There is no namespace field: a strict client (kubectl's default field validation) is refused ...
    with pytest.raises(ApiError) as refused:
        rig.kube.request("POST", collection, sneaky, params={"fieldValidation": "Strict"})
    assert refused.value.status == 400 and "unknown field" in str(refused.value)
    assert "spec.targetRef.namespace" in str(refused.value)
    # ... so is a server-side apply, whatever its validation (the API server answers 500 here) ...
    with pytest.raises(ApiError) as applied:
        rig.kube.apply(sneaky)
    assert ".spec.targetRef.namespace: field not declared in schema" in str(applied.value)
    # ... a name cannot smuggle one in ...
    slashed = adapter("slashed", f"{OTHER_NS}/elsewhere")
    with pytest.raises(ApiError) as invalid:
        rig.kube.apply(slashed)
    assert invalid.value.status == 422 and "targetRef.name" in str(invalid.value)
    # ... and a lax client's field is pruned: the adapter looks in its own namespace only.
    rig.kube.request("POST", collection, sneaky, params={"fieldValidation": "Ignore"})
    stored = rig.kube.get(SA, "ScaleAdapter", "sneaky", NS)
    assert "namespace" not in stored["spec"]["targetRef"]
    wait_until(lambda: synced(rig, "sneaky").get("reason") == "TargetMissing", timeout=30, interval=POLL,
               what="TargetMissing for the other namespace's object")
    hold_other = time.monotonic() + 2 * MIN_WRITE
    while time.monotonic() < hold_other:
        assert target_replicas(rig, "elsewhere", OTHER_NS) == 2
        time.sleep(0.5)
    assert MANAGER not in owners_of_replicas(rig, "elsewhere", OTHER_NS)
    rig.kube.delete(SA, "ScaleAdapter", "sneaky", NS)


def test_failures_are_explained_in_conditions(rig, adapter_proc):
    rig.kube.apply(redis_failover("nopath", NS, 2) | {"spec": {"sentinel": {"replicas": 3}}})
    rig.kube.apply(adapter("nopath", "nopath"))
    rig.kube.apply(redis_failover("garbage", NS, 2))
    bad = adapter("garbage", "garbage")
    bad["spec"]["replicasPath"] = "/spec/sentinel/customConfig"
    rig.kube.apply(bad)
    rig.kube.apply(adapter("missing", "no-such-redis"))
    # A kind the chart's scaleAdapter.targets does not list: the ClusterRole refuses it.
    pg = adapter("forbidden", "pg")
    pg["spec"] |= {"targetRef": {"apiVersion": "postgresql.cnpg.io/v1", "kind": "Cluster", "name": "pg"},
                   "replicasPath": "/spec/instances"}
    rig.kube.apply(pg)
    for name, reason in [("nopath", "PathMissing"), ("garbage", "PathMissing"), ("missing", "TargetMissing"),
                         ("forbidden", "Forbidden")]:
        wait_until(lambda: synced(rig, name).get("reason") == reason, timeout=30, interval=POLL,
                   what=f"{name}: {reason}")
        assert synced(rig, name)["status"] == "False" and synced(rig, name)["message"]
    rig.kube.merge_patch(RF, "RedisFailover", "garbage", {"spec": {"sentinel": {"customConfig": ["maxmemory 1mb"]}}}, NS)
    wait_until(lambda: synced(rig, "garbage").get("reason") == "NotANumber", timeout=30, interval=POLL,
               what="garbage: NotANumber")
    assert "an array of 1" in synced(rig, "garbage")["message"]
    assert "scaleAdapter.targets" in synced(rig, "forbidden")["message"]
    for name in ("nopath", "garbage", "missing", "forbidden"):
        rig.kube.delete(SA, "ScaleAdapter", name, NS)


def test_a_write_never_creates_or_overwrites_a_raced_target(rig):
    """What the adapter's write relies on, on the real API server. The race itself (the target
    deleted between the adapter's read and its write) is scripted in adapter/src/sync_tests.rs;
    here the write it sends, a JSON merge patch carrying the resourceVersion it read, neither
    creates a deleted target (404) nor writes over one created again under its name (409). The
    server-side apply it sent before creates a skeleton target (issue 43 item 4)."""
    rig.kube.ensure_namespace(NS)
    rig.kube.apply(redis_failover("raced", NS, 2))
    read = rig.kube.get(RF, "RedisFailover", "raced", NS)["metadata"]["resourceVersion"]
    write = {"metadata": {"resourceVersion": read}, "spec": {"redis": {"replicas": 4}}}
    rig.kube.delete(RF, "RedisFailover", "raced", NS)
    wait_until(lambda: rig.kube.get(RF, "RedisFailover", "raced", NS) is None, timeout=30, interval=POLL,
               what="the target deleted")
    with pytest.raises(ApiError) as missing:
        rig.kube.merge_patch(RF, "RedisFailover", "raced", write, NS)
    assert missing.value.status == 404
    assert rig.kube.get(RF, "RedisFailover", "raced", NS) is None, "the write created the target"
    rig.kube.apply(redis_failover("raced", NS, 2))
    with pytest.raises(ApiError) as changed:
        rig.kube.merge_patch(RF, "RedisFailover", "raced", write, NS)
    assert changed.value.status == 409
    assert target_replicas(rig, "raced") == 2
    rig.kube.delete(RF, "RedisFailover", "raced", NS)
    wait_until(lambda: rig.kube.get(RF, "RedisFailover", "raced", NS) is None, timeout=30, interval=POLL,
               what="the target deleted again")
    # Before: the apply body (the count alone) made a skeleton RedisFailover.
    rig.kube.apply({"apiVersion": RF, "kind": "RedisFailover", "metadata": {"name": "raced", "namespace": NS},
                    "spec": {"redis": {"replicas": 4}}}, manager=MANAGER)
    skeleton = rig.kube.get(RF, "RedisFailover", "raced", NS)
    assert skeleton["spec"] == {"redis": {"replicas": 4}}
    rig.kube.delete(RF, "RedisFailover", "raced", NS)


def leader_gauge(proc) -> int:
    metrics = requests.get(f"{proc.admin}/metrics", timeout=5).text
    return next(int(float(line.split()[1])) for line in metrics.splitlines()
                if line.startswith("cozy_scale_adapter_leader "))


def test_only_the_lease_holder_writes(rig, adapter_proc):
    """Another replica holds the Lease (written as one would after an expiry, held for an hour):
    the adapter sees it at its next renewal attempt, its leader gauge drops to 0 and it writes
    nothing; once the Lease is free it takes it back and writes (issue 43 item 3; a lead lost in the
    middle of a sync is adapter/src/sync_tests.rs's, the lapse at the renew deadline
    runtime/src/lease_tests.rs's)."""
    rig.kube.apply(redis_failover("led", NS, 2))
    rig.kube.apply(adapter("led", "led", replicas=2))
    wait_until(lambda: synced(rig, "led").get("reason") == "Synced", timeout=30, interval=POLL, what="led Synced")
    assert leader_gauge(adapter_proc) == 1
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    rig.kube.merge_patch(*LEASE[:3], {"spec": {"holderIdentity": "other-replica", "renewTime": now,
                                               "leaseDurationSeconds": 3600}}, ADAPTER_NS)
    # --retry-period 1s: the next attempt sees the other holder.
    wait_until(lambda: leader_gauge(adapter_proc) == 0, timeout=10, interval=POLL, what="the leader gauge at 0")
    scale(rig, "led", 4)
    hold(rig, "led", 3 * MIN_WRITE, 2)
    assert synced(rig, "led").get("reason") == "Synced", "a status written without the Lease"
    rig.kube.merge_patch(*LEASE[:3], {"spec": {"holderIdentity": None}}, ADAPTER_NS)
    wait_until(lambda: target_replicas(rig, "led") == 4, timeout=30, interval=POLL, what="the write once leading")
    assert leader_gauge(adapter_proc) == 1
    assert rig.kube.get(*LEASE)["spec"]["holderIdentity"] == IDENTITY
    rig.kube.delete(SA, "ScaleAdapter", "led", NS)


def test_a_malformed_adapter_is_reported_on_itself_while_the_others_sync(rig, adapter_proc):
    """The issue's probe: a ScaleAdapter holding a value of the wrong type, present when the adapter
    starts. The chart's CRD refuses one (a string or 2^31 in spec.replicas is a 422, and the /scale
    subresource checks that path whatever the schema), so the schema of spec.paused is loosened for
    this test, as a stale or hand-edited CRD would be, and restored after. Before: the typed list
    failed on the object, the adapter never became ready and nothing synced (issue 43 item 5)."""
    crds = ("apiextensions.k8s.io/v1", "CustomResourceDefinition", "scaleadapters.autoscaling.cozystack.io")
    crd = rig.kube.get(*crds)
    original = copy.deepcopy(crd["spec"])
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["properties"]["paused"] = {"x-kubernetes-int-or-string": True}
    rig.kube.request("PUT", rig.kube.path(*crds[:2], name=crds[2]), crd)
    try:
        rig.kube.apply(redis_failover("broken", NS, 2))
        broken = adapter("broken", "broken")
        broken["spec"]["paused"] = "yes"
        wait_until(lambda: rig.kube.apply(broken), timeout=30, interval=POLL, what="the loosened schema served")
        # A restart (a new pod, a rollout) lists every adapter with the bad one among them.
        proc = rig.group.restart(adapter_proc)
        wait_until(lambda: requests.get(f"{adapter_proc.admin}/readyz", timeout=1).ok, timeout=30, interval=POLL,
                   what="/readyz with a malformed adapter listed", proc=proc)
        rig.kube.apply(redis_failover("beside", NS, 2))
        rig.kube.apply(adapter("beside", "beside", replicas=3))
        wait_until(lambda: target_replicas(rig, "beside") == 3, timeout=30, interval=POLL,
                   what="another adapter synced beside the malformed one")
        wait_until(lambda: synced(rig, "broken").get("reason") == "Malformed", timeout=30, interval=POLL,
                   what="broken: Malformed")
        message = synced(rig, "broken")["message"]
        assert message.startswith('spec.paused cannot be read: invalid type: string "yes"'), message
        time.sleep(5)  # five more syncs at --sync-interval 1s: the error is logged once
        since_restart = adapter_proc.log.read_text().rsplit("=== start", 1)[1]
        assert since_restart.count("does not decode") == 1, since_restart
        assert target_replicas(rig, "broken") == 2
    finally:
        rig.kube.delete(SA, "ScaleAdapter", "broken", NS)
        wait_until(lambda: rig.kube.get(SA, "ScaleAdapter", "broken", NS) is None, timeout=30, interval=POLL,
                   what="broken deleted")
        crd = rig.kube.get(*crds)
        crd["spec"] = original
        rig.kube.request("PUT", rig.kube.path(*crds[:2], name=crds[2]), crd)
    rig.kube.delete(SA, "ScaleAdapter", "beside", NS)


def test_many_adapters_and_a_huge_target_stay_bounded(rig, adapter_proc):
    """100 adapters synced (8 at a time, one GET and at most one apply each per sync), and a 1 MiB
    string at the path is reported in a short, cut message."""
    count = 100
    for i in range(count):
        rig.kube.apply(redis_failover(f"many-{i}", NS, 2))
        rig.kube.apply(adapter(f"many-{i}", f"many-{i}", replicas=2))
    wait_until(lambda: all(synced(rig, f"many-{i}").get("reason") == "Synced" for i in range(count)),
               timeout=120, interval=1, what="every adapter Synced")
    start = time.monotonic()
    for i in range(count):
        scale(rig, f"many-{i}", 3)
    wait_until(lambda: all(target_replicas(rig, f"many-{i}") == 3 for i in range(count)),
               timeout=120, interval=1, what="every target at 3")
    print(f"FIGURE scale-adapter: {count} adapters scaled, all targets written in {time.monotonic() - start:.1f} s")
    huge = redis_failover("huge", NS, 2)
    huge["spec"]["sentinel"]["image"] = "x" * (1 << 20)
    rig.kube.apply(huge)
    bad = adapter("huge", "huge")
    bad["spec"]["replicasPath"] = "/spec/sentinel/image"
    rig.kube.apply(bad)
    wait_until(lambda: synced(rig, "huge").get("reason") == "NotANumber", timeout=30, interval=POLL,
               what="huge: NotANumber")
    message = synced(rig, "huge")["message"]
    assert len(message) < 1024 and "(1048576 bytes)" in message, message
    for i in range(count):
        rig.kube.delete(SA, "ScaleAdapter", f"many-{i}", NS)
    rig.kube.delete(SA, "ScaleAdapter", "huge", NS)
