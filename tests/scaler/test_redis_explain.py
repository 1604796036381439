"""`scaler explain --engine redis` on the real scaler binary and VictoriaMetrics: the Redis inputs
(instance series of the rfr- pods, the replicas' client load) and the replication brake with its
gating, for four RedisFailovers of this module's own in namespace tenant-redis-explain, their
redis_exporter series from tests/lib/redis_series.py (shaped as tests/liveredis observed them) over
the last five minutes, so the master's replication rate has a 5-minute window to be read from."""
import json
import subprocess
import time

import pytest

from redis_series import OFFSET_ORIGIN, Failover, RedisPod, render_at
from scaler_proc import scaler_binary

NS = "tenant-redis-explain"
LAG_THRESHOLD = 1_048_576
WRITING = 20_000  # bytes/s through the replication stream: a master under writes
IDLE = 180  # bytes/s: three sentinels' hellos and the pings, no client writing (tests/liveredis)


def failover(name: str, *, link_up: bool = True, syncing: bool = False, lag_bytes: int | None = None):
    """A master and two replicas with 20 clients between them (1 + ceil(20 / 5) = 5 asked);
    replica 2 carries the trouble (one in a full sync serves no clients: replica 1 has them all)."""
    trouble = {"link_up": link_up, "syncing": syncing}
    if lag_bytes is not None:
        trouble["lag_bytes"] = lag_bytes
    return Failover(NS, name, [RedisPod(0, master=True), RedisPod(1, clients=20 if syncing else 10),
                               RedisPod(2, clients=0 if syncing else 10, **trouble)])


# (failover, the master's write rate in bytes/s)
FAILOVERS = [
    (failover("healthy"), WRITING),
    (failover("syncing", syncing=True), WRITING),
    (failover("lagging", lag_bytes=5_000_000), WRITING),
    (failover("idle", link_up=False), IDLE),
]


def series(now: float) -> str:
    """Samples every 15 s from 5 minutes ago (the rate window) to 10 minutes ahead (the module's
    queries stay inside the look-back), each master's offset a counter growing at its rate."""
    start = int(now) - 300
    out = []
    for t in range(start, int(now) + 600, 15):
        offsets = {(f.namespace, f.name): OFFSET_ORIGIN + rate * (t - start) for f, rate in FAILOVERS}
        out.append(render_at([f for f, _ in FAILOVERS], t, offsets))
    return "".join(out)


@pytest.fixture(scope="module", autouse=True)
def redis_data(vm):
    vm.import_and_wait(series(time.time()),
                       f'count(redis_instance_info{{namespace="{NS}",pod=~"rfr-idle-[0-9]+"}})',
                       expect=lambda n: n == 3)


def explain(vm, name, *flags, output="json", lag=LAG_THRESHOLD):
    r = subprocess.run([scaler_binary(), "explain", "--prometheus-url", vm.url, "--namespace", NS,
                        "--cluster", name, "--engine", "redis", "--target", "5", "--max-replicas", "6",
                        "--max-replication-lag-bytes", str(lag), "--topology", "metrics",
                        "--output", output, *flags],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if output == "json" else r.stdout


def test_a_healthy_replica_set_scales_on_its_clients_with_the_brake_clear(vm):
    e = explain(vm, "healthy")
    d, o = e["decision"], e["observation"]
    assert (d["desired"], d["reason"], d["brake"]) == (5, "load", "clear"), d
    assert (e["instance_series"], o["current"], o["load"]) == (3, 3, 20.0), e
    assert o["redis"] == {"links_down": 0, "syncing": 0, "max_lag_bytes": 425.0}, o
    assert o["primary_writing"] is True and e["repl_bytes_per_second"] == pytest.approx(WRITING, rel=0.05), e
    assert e["metric_name"] == "redis-healthy-readconnections" and e["metric_value"] == 25.0, e
    assert "redis_master_link_up" in e["query"] and "cnpg_" not in e["query"], e["query"]

    text = explain(vm, "healthy", output="text")
    assert text.startswith(f"RedisFailover {NS}/healthy (ReadConnections, target 5 per read replica)"), text
    for line in [
        "instance series       3 (pods rfr-healthy-<n> reporting redis_instance_info)",
        "read load             20 (client connections on Redis replicas, less the sentinels'",
        "replica links down    0 of 2 (redis_master_link_up 0)",
        "replicas syncing      0 of 2 (redis_master_sync_in_progress 1, or listed by the master not online: a full sync)",
        f"replica lag, bytes    425 B, the largest of master offset − a replica's acknowledged offset "
        f"(maxReplicationLagBytes {LAG_THRESHOLD})",
        "B/s (above the 1024 B/s of sentinel hellos and pings: writing)",
        "sync quorum           none (Redis replication is asynchronous)",
        "floor                 2 = max(minReplicas 2, 2)",
        f"replication brake     clear (every replica's link up, none in a full sync, offset lag not above "
        f"{LAG_THRESHOLD} B)",
        "quota ceiling         not applied (needs --topology kube)",
        "convergence           not applied (a RedisFailover's ready count is not read)",
        "redis_master_sync_in_progress",
    ]:
        assert line in text, f"{line!r} not in\n{text}"
    # The CNPG lag lines were printed for Redis once: none of them may come back.
    for cnpg in ["WAL", "lag brake ", "(from default)"]:
        assert cnpg not in text, f"{cnpg!r} in\n{text}"


def test_a_full_sync_under_writes_engages_the_brake(vm):
    e = explain(vm, "syncing")
    d, o = e["decision"], e["observation"]
    # The load asks 5; the brake holds the current 3.
    assert (d["desired"], d["reason"], d["brake"], d["recommended"]) == (3, "brake", "engaged", 5), d
    # A replica waiting for its full sync acknowledged nothing: its lag is the whole offset.
    assert o["redis"]["syncing"] == 1 and o["redis"]["links_down"] == 1, o
    assert o["redis"]["max_lag_bytes"] > LAG_THRESHOLD, o
    text = explain(vm, "syncing", output="text")
    assert "replicas syncing      1 of 2" in text, text
    assert ("replication brake     ENGAGED: 1 replica link(s) down, 1 replica(s) in a full sync, offset lag "
            in text), text
    assert "while the master writes; holding" in text, text


def test_a_lagging_replica_under_writes_holds_the_count(vm):
    e = explain(vm, "lagging")
    d, o = e["decision"], e["observation"]
    assert (d["desired"], d["reason"], d["brake"], d["recommended"]) == (3, "brake", "engaged", 5), d
    assert o["redis"] == {"links_down": 0, "syncing": 0, "max_lag_bytes": 5_000_000.0}, o
    assert "offset lag 5000000 bytes (threshold 1048576) while the master writes" in e["summary"], e["summary"]
    text = explain(vm, "lagging", output="text")
    assert "replica lag, bytes    5000000 B" in text, text
    assert ("replication brake     ENGAGED: offset lag 5000000 B above maxReplicationLagBytes 1048576 while "
            "the master writes; holding") in text, text
    # With the byte threshold off, the same lag is reported but not compared.
    e = explain(vm, "lagging", lag=0)
    assert (e["decision"]["desired"], e["decision"]["brake"]) == (5, "clear"), e["decision"]
    text = explain(vm, "lagging", output="text", lag=0)
    assert "(not compared: maxReplicationLagBytes 0)" in text, text
    assert "offset lag not compared" in text, text


def test_an_idle_master_does_not_brake_on_a_link_down(vm):
    e = explain(vm, "idle")
    d, o = e["decision"], e["observation"]
    assert (d["desired"], d["reason"], d["brake"]) == (5, "load", "idle-lag"), d
    assert o["primary_writing"] is False and e["repl_bytes_per_second"] == pytest.approx(IDLE, rel=0.05), e
    text = explain(vm, "idle", output="text")
    assert "replica links down    1 of 2" in text, text
    assert "B/s (at most the 1024 B/s of sentinel hellos and pings: idle)" in text, text
    assert ("replication brake     ignored: 1 replica link(s) down, but the master is idle (replication at "
            "most 1024 B/s): nothing is being lost") in text, text


def test_a_seconds_threshold_is_refused_for_redis(vm):
    r = subprocess.run([scaler_binary(), "explain", "--prometheus-url", vm.url, "--namespace", NS,
                        "--cluster", "healthy", "--engine", "redis", "--target", "5", "--max-replicas", "6",
                        "--max-replication-lag-seconds", "10", "--topology", "metrics"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0 and "use maxReplicationLagBytes" in r.stderr, r.stderr
