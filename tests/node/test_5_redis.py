"""The real redis-operator on the real node (docs/redis.md): it runs as a pod of an image built here
from its Go module, and its RedisFailover's Redis, Sentinel and redis_exporter containers run an
image built here from Debian's packages. The RedisFailover, its ScaleAdapter and its ScaledObject
are what `chartgen app` makes of a Redis chart (tests/chartgen/fixtures/redis), rendered with helm;
KEDA and the HPA write the adapter's /scale, the package's ScaleAdapter controller writes the
RedisFailover's `spec.redis.replicas`, and the operator creates and removes the replicas, which
really sync from the master. Real client connections on a replica are the load."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest

import resp
from helm import Helm
from scaledobject import FAST_BEHAVIOR
from testkit import REPO, TOOLS, cargo_bin, upstream, versions, wait_until
from noderig import node_binary
from noderig.package import adapter_scale, latest_decision, pod_ready as ready, scaler_cli
from noderig.redis import (FAILOVER, REDIS_NAMESPACE as NS, REDIS_PODS, SENTINEL_PODS, Clients, RedisOperator,
                           info, sentinel_replicas)

RF = "databases.spotahome.com/v1"
FIXTURE = REPO / "tests/chartgen/fixtures/redis"
TARGET = 5     # client connections one replica should hold
CLIENTS = 15   # on one replica: 1 master + ceil(15 / 5) replicas = 4
FLOOR, MAX = 2, 4
SENTINELS = 3  # the fixture's literal count
SYNC_KEYS = 40000  # with a 1 ms per-key RDB delay on the master, a full sync of about 40 s
SYNC_SEEN = r"\b[1-9] in a full sync"  # a decision's summary while the scaler sees a sync
# The e2e suite's fast behaviour, with a scale-down stabilization longer than one scrape (5 s) plus
# the scaler's refresh: at each change of replica count the operator resets the Sentinels, and a
# scrape in the gap reads the load low by their connections (docs/redis.md, traps), which a 3 s
# window let the HPA act on (4 -> 3 mid scale-out, and the brake then holding 3).
BEHAVIOR = {**FAST_BEHAVIOR, "scaleDown": {**FAST_BEHAVIOR["scaleDown"], "stabilizationWindowSeconds": 15}}


def render(node, chart) -> dict[str, dict]:
    """The chart's RedisFailover, ScaleAdapter and ScaledObject for release `rf`: no password Secret
    (the platform makes it) and no volume (the node's static volumes are the Cluster's)."""
    values = {"size": "", "authEnabled": False, "replicas": FLOOR,
              "autoscaling": {"enabled": True, "target": TARGET, "minReplicas": FLOOR, "maxReplicas": MAX,
                              "behavior": BEHAVIOR}}
    docs = Helm(node.dir / "helm", kubeconfig=node.cp.kubeconfig).render(chart, release=FAILOVER, namespace=NS,
                                                                        values=values)
    found = {d["kind"]: d for d in docs if d["kind"] in ("RedisFailover", "ScaleAdapter", "ScaledObject")}
    assert sorted(found) == ["RedisFailover", "ScaleAdapter", "ScaledObject"], [d["kind"] for d in docs]
    for d in found.values():
        d["metadata"]["namespace"] = NS
    return found


def pods(kube, selector: str) -> list[dict]:
    return kube.list("v1", "Pod", NS, selector=selector)


def pod_ip(kube, name: str) -> str:
    return kube.get("v1", "Pod", name, NS)["status"]["podIP"]


def roles(kube) -> dict[str, str]:
    """Each ready Redis pod and the role the operator labelled it with (master, slave)."""
    return {p["metadata"]["name"]: p["metadata"]["labels"].get("redisfailovers-role")
            for p in pods(kube, REDIS_PODS) if ready(p)}


def replication(ip: str) -> dict[str, str]:
    """INFO replication of the Redis pod at `ip`; nothing while it does not answer."""
    try:
        return info(ip, "replication")
    except OSError:
        return {}


def linked(ip: str) -> bool:
    """The replica's own word that it replicates: `master_link_status:up` (the operator's readiness
    probe checks only that no sync is in progress, so a replica that never synced is ready)."""
    return replication(ip).get("master_link_status") == "up"


def in_full_sync(ip: str) -> bool:
    return replication(ip).get("master_sync_in_progress") == "1"


def spec_replicas(kube) -> int:
    return kube.get(RF, "RedisFailover", FAILOVER, NS)["spec"]["redis"]["replicas"]


def keys(ip: str) -> int:
    """db0's key count at `ip` (INFO keyspace: `db0:keys=N,expires=...`)."""
    db0 = info(ip, "keyspace").get("db0", "keys=0")
    return int(db0.split(",")[0].removeprefix("keys="))


def serving(kube, replicas: int) -> bool:
    spec = spec_replicas(kube)
    found = roles(kube)
    if not (spec == replicas and len(found) == replicas and list(found.values()).count("master") == 1):
        return False
    return all(linked(pod_ip(kube, name)) for name, role in found.items() if role == "slave")


def wait_serving(node, replicas: int, timeout: float, what: str) -> None:
    kube = node.kube
    try:
        wait_until(lambda: serving(kube, replicas), timeout=timeout, interval=1, what=what)
    except TimeoutError as e:
        spec = spec_replicas(kube)
        phases = {p["metadata"]["name"]: p["status"].get("phase") for p in kube.list("v1", "Pod", NS)}
        try:
            d = decision(kube)
        except Exception as err:  # noqa: BLE001 - no decision yet is part of the report
            d = repr(err)
        raise TimeoutError(f"{e}; spec.redis.replicas {spec}; roles {roles(kube)}; pods {phases}; "
                           f"decision {d}") from None


def decision(kube) -> dict:
    return latest_decision(kube, NS, FAILOVER)


@pytest.fixture(scope="module")
def failover(node, package, keda_running, tmp_path_factory):
    kube, t = node.kube, time.monotonic()
    operator = RedisOperator(node.node, kube, node.dir / "helm", node.cp.kubeconfig,
                             node_binary("redis-operator", versions()["REDIS_OPERATOR_VERSION"]),
                             upstream("redis-operator-chart") / "redisoperator", TOOLS / "node/rootfs/redis.tar").install()
    node.timings["redis-operator available"] = time.monotonic() - t
    chart = tmp_path_factory.mktemp("redis") / FIXTURE.name
    shutil.copytree(FIXTURE, chart)
    made = subprocess.run([cargo_bin("chartgen"), "app", "--chart", chart], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    objs = render(node, chart)
    kube.ensure_namespace(NS)
    t = time.monotonic()
    kube.apply(operator.images_of(objs["RedisFailover"]))
    wait_serving(node, FLOOR, 300, f"the RedisFailover's {FLOOR} Redis pods ready, one master")
    wait_until(lambda: len([p for p in pods(kube, SENTINEL_PODS) if ready(p)]) == SENTINELS, timeout=120,
               interval=1, what=f"{SENTINELS} Sentinels ready")
    node.timings["RedisFailover: 2 Redis + 3 Sentinels ready"] = time.monotonic() - t
    kube.apply(objs["ScaleAdapter"])
    kube.apply(objs["ScaledObject"])
    state = {"operator": operator, "clients": Clients(), "prometheus_url": package["prometheus_url"]}
    yield state
    state["clients"].close()


def test_the_operator_runs_redis_sentinels_and_exporters_of_the_images_built_here(node, failover):
    kube = node.kube
    [op] = kube.list("v1", "Pod", "redis-operator")
    assert op["spec"]["containers"][0]["image"] == failover["operator"].image
    image = failover["operator"].redis_image
    for p in pods(kube, REDIS_PODS):
        assert {c["name"]: c["image"] for c in p["spec"]["containers"]} == {"redis": image, "redis-exporter": image}, p
    for p in pods(kube, SENTINEL_PODS):
        assert {c["image"] for c in p["spec"]["containers"]} == {image}, p


def test_the_adapter_selects_exactly_the_operators_redis_pods(node, failover):
    """The selector the adapter reports (the chart's, written by chartgen) selects the Redis pods
    the operator made, master and replica, and neither a Sentinel nor anything else."""
    kube = node.kube

    scale = adapter_scale(kube, NS, FAILOVER)
    assert scale["replicas"] == FLOOR, scale
    selected = {p["metadata"]["name"] for p in kube.list("v1", "Pod", NS, selector=scale["selector"])}
    assert selected == {f"rfr-{FAILOVER}-{i}" for i in range(FLOOR)}, selected
    assert selected == set(roles(kube)) and sorted(roles(kube).values()) == ["master", "slave"], roles(kube)
    assert not selected & {p["metadata"]["name"] for p in pods(kube, SENTINEL_PODS)}


def test_client_connections_on_a_replica_scale_the_failover_out_and_back(node, failover):
    """15 client connections held on the replica: the scaler asks for 1 master + 3 replicas, the
    operator creates two more Redis pods, which sync from the master and serve as replicas; the
    clients gone, back to 2."""
    kube = node.kube
    entry = wait_until(lambda: decision(kube).get("lastSuccess") and decision(kube), timeout=120, interval=2,
                       what="a decision for the RedisFailover in the scaler's /decisions")
    assert (entry["engine"], entry["desired"]) == ("redis", FLOOR), entry
    [replica] = [name for name, role in roles(kube).items() if role == "slave"]
    ip = kube.get("v1", "Pod", replica, NS)["status"]["podIP"]
    t = time.monotonic()
    failover["clients"].open(ip, CLIENTS)
    decided = wait_until(lambda: decision(kube)["desired"] == MAX and decision(kube), timeout=120, interval=1,
                         what=f"the scaler deciding {MAX}")
    node.timings["Redis: clients -> decision 4"] = time.monotonic() - t
    # The held clients, and at most the operator's own short-lived checks (docs/redis.md).
    load = int(re.search(r"ReadConnections (\d+) ", decided["summary"]).group(1))
    assert CLIENTS <= load <= CLIENTS + 2, decided["summary"]
    t = time.monotonic()
    wait_serving(node, MAX, 300, f"{MAX} Redis pods ready, one master")
    node.timings["Redis: decision 4 -> replicas serving"] = time.monotonic() - t
    failover["clients"].close()
    t = time.monotonic()
    wait_serving(node, FLOOR, 300, f"the RedisFailover back at {FLOOR}")
    node.timings["Redis: clients gone -> 2 ready"] = time.monotonic() - t


def test_a_full_sync_under_writes_holds_the_count_while_the_new_replica_syncs(node, failover):
    """The master holds 40,000 keys and writes all along; each full sync lasts about 40 s (a 1 ms
    per-key RDB delay). Clients on the replica make the HPA write 4; while a new replica syncs,
    the clients leave, so the load asks for 2: the brake holds the RedisFailover's 4 (its
    `spec.redis.replicas`, not the instance series, which lag the new pods) until that replica
    replicates, and the count goes back to 2 once nothing syncs."""
    kube = node.kube
    found = roles(kube)
    [master] = [name for name, role in found.items() if role == "master"]
    [replica] = [name for name, role in found.items() if role == "slave"]
    master_ip, replica_ip = pod_ip(kube, master), pod_ip(kube, replica)
    resp.command(6379, "CONFIG", "SET", "save", "", host=master_ip)  # no background save to wait behind
    resp.fill(6379, SYNC_KEYS, host=master_ip)
    wait_until(lambda: linked(replica_ip) and keys(replica_ip) >= SYNC_KEYS, timeout=120, interval=1,
               what=f"the replica holding the {SYNC_KEYS} keys")
    resp.command(6379, "CONFIG", "SET", "rdb-key-save-delay", "1000", host=master_ip)
    specs, held = [], []
    try:
        with resp.Writer(6379, per_second=200, host=master_ip, keys=SYNC_KEYS):
            t = time.monotonic()
            failover["clients"].open(replica_ip, CLIENTS)
            wait_until(lambda: spec_replicas(kube) == MAX, timeout=120, interval=1,
                       what=f"spec.redis.replicas {MAX}")
            syncing = wait_until(lambda: next((p["metadata"]["name"] for p in pods(kube, REDIS_PODS)
                                               if p["metadata"]["name"] not in found and p["status"].get("podIP")
                                               and in_full_sync(p["status"]["podIP"])), None),
                                 timeout=120, interval=0.5, what="a new replica in its full sync")
            node.timings["Redis: clients -> a new replica in its full sync"] = time.monotonic() - t
            # The scaler sees the sync at the next scrape of the master or of the new pod; a load
            # drop scraped before it is a scale-in decided without it (of the newest ordinal, which
            # is the syncing pod or one not yet made; docs/redis.md). The load leaves once it is seen.
            wait_until(lambda: re.search(SYNC_SEEN, decision(kube).get("summary", "")), timeout=30, interval=0.5,
                       what="the scaler seeing the full sync")
            failover["clients"].close()
            # The load now asks for the floor; the master writes and a replica syncs.
            brake = wait_until(lambda: (d := decision(kube)).get("reason") == "brake" and d["recommended"] == FLOOR
                               and d, timeout=60, interval=1, what="the brake holding the count")
            assert brake["desired"] == MAX and re.search(SYNC_SEEN, brake["summary"]), brake
            # `scaler explain --scaled-object` on this ScaledObject (engine redis, its target the
            # ScaleAdapter, read through the API as an operator does) tells the same hold from a
            # reading of its own, with the Redis brake's inputs.
            e = scaler_cli(node, "explain", "--prometheus-url", failover["prometheus_url"], "--scaled-object",
                           f"{NS}/{FAILOVER}", "--topology", "kube", "--output", "json")
            assert (e["decision"]["desired"], e["decision"]["reason"], e["decision"]["brake"]) == (
                MAX, "brake", "engaged"), e
            assert e["observation"]["redis"]["syncing"] >= 1 and e["observation"]["primary_writing"] is True, e

            # Held for as long as that replica syncs (the StatefulSet makes the next one only
            # once it is ready, and between two syncs nothing needs holding).
            sync_ip = pod_ip(kube, syncing)

            def synced():
                specs.append(spec_replicas(kube))
                d = decision(kube)
                if d.get("desired") is not None:
                    held.append(d["desired"])
                return linked(sync_ip)
            t = time.monotonic()
            wait_until(synced, timeout=300, interval=1, what=f"{syncing} replicating")
            node.timings["Redis: brake held while a new replica synced"] = time.monotonic() - t
    finally:
        resp.command(6379, "CONFIG", "SET", "rdb-key-save-delay", "0", host=master_ip)
    assert min(specs) == MAX and min(held) == MAX, (specs, held, syncing)
    wait_serving(node, FLOOR, 300, f"the RedisFailover back at {FLOOR} once no replica syncs")
    resp.command(6379, "FLUSHALL", host=master_ip)


def test_the_master_deleted_never_takes_the_count_under_the_floor(node, failover):
    """The master's pod removed at once, as a crashed node would lose it: the Sentinels promote the
    replica, the operator brings the pod back as a replica, and neither the count nor any decision
    goes under the floor meanwhile."""
    kube = node.kube
    [old] = [name for name, role in roles(kube).items() if role == "master"]
    # After the scale-in the operator resets every Sentinel whose replica list is stale, and a
    # Sentinel knows no replica until it reads the master's INFO again. A master lost in that window
    # is never replaced (seen here: "-failover-abort-no-good-slave" from every Sentinel, and the
    # operator's "no master found, wait until failover or fix manually"; docs/e2e.md), so the
    # master goes only once every Sentinel knows the remaining replica, and has for a few seconds.
    sentinels = [p["status"]["podIP"] for p in pods(kube, SENTINEL_PODS) if ready(p)]
    known = []

    def every_sentinel_knows_the_replica():
        known.append(all(sentinel_replicas(ip) == FLOOR - 1 for ip in sentinels))
        return len(known) >= 5 and all(known[-5:])
    wait_until(every_sentinel_knows_the_replica, timeout=120, interval=1,
               what=f"every Sentinel knowing {FLOOR - 1} replica")
    t = time.monotonic()
    kube.request("DELETE", kube.path("v1", "Pod", NS, old),
                 {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})
    counts, desired = [], []

    def recovered():
        counts.append(spec_replicas(kube))
        d = decision(kube)
        if d.get("desired") is not None:
            desired.append(d["desired"])
        found = roles(kube)
        return (len(found) == FLOOR and found.get(old) == "slave" and list(found.values()).count("master") == 1
                and linked(pod_ip(kube, old)))
    wait_until(recovered, timeout=300, interval=1, what=f"a new master, and {old} back as a replica")
    node.timings["Redis: master deleted -> new master, old back as replica"] = time.monotonic() - t
    assert min(counts) == FLOOR and min(desired) >= FLOOR, (counts, desired)
