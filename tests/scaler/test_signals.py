"""Several signals, the connection-usage signal and the CPU signal's warm-up, on the real scaler
and VictoriaMetrics (issue 15). The clusters are this module's own, in namespace tenant-signals."""
import json
import subprocess
import time

import grpc
import pytest

import promtext

from cnpg_series import Backend, Cluster, Pod, render
from keda import error_of, metadata
from scaler_proc import scaler_binary

NS = "tenant-signals"


def replica(n, active=0, idle=0, **kw):
    backends = [Backend(active)] if active else []
    if idle:
        backends.append(Backend(idle, state="idle"))
    return Pod(n, backends=backends, **kw)


def primary(**kw):
    # Primary sessions and CPU never count as read load.
    return Pod(1, primary=True, backends=[Backend(60), Backend(30, state="idle")], cpu_millicores=2000, **kw)


CLUSTERS = [
    # 2 replicas x (10 active + 30 idle client sessions) over max_connections 100: 40 % each, 80 % in all.
    Cluster(NS, "usage", [primary(max_connections=100),
                          replica(2, 10, 30, max_connections=100), replica(3, 10, 30, max_connections=100)]),
    # One replica's max_connections unknown: the usage cannot be computed.
    Cluster(NS, "nomax", [primary(max_connections=100),
                          replica(2, 10, 30, max_connections=100), replica(3, 10, 30)]),
    # 3 replicas at 400m; the third is still cloning (WAL receiver down) and burns 900m doing so.
    Cluster(NS, "warm", [primary(wal_receiver_up=False),
                         replica(2, cpu_millicores=400, wal_receiver_up=True),
                         replica(3, cpu_millicores=400, wal_receiver_up=True),
                         replica(4, cpu_millicores=900, wal_receiver_up=False)]),
    # Replica 3 has streamed for 2 minutes after restoring: its 5-minute CPU rate still carries the
    # restore, so it stays left out until the window is clean.
    Cluster(NS, "fresh", [primary(wal_receiver_up=False),
                          replica(2, cpu_millicores=400, wal_receiver_up=True),
                          replica(3, cpu_millicores=900, wal_receiver_up=lambda age: age < 120)]),
    # No receiver series at all (custom monitoring queries): every replica counts, never zero.
    Cluster(NS, "norecv", [primary(), replica(2, cpu_millicores=400), replica(3, cpu_millicores=400)]),
]


@pytest.fixture(scope="module", autouse=True)
def signals_data(vm):
    vm.import_and_wait(render(CLUSTERS, time.time()),
                       f'count(cnpg_pg_replication_in_recovery{{namespace="{NS}",pod=~"norecv-[0-9]+"}})',
                       expect=lambda n: n == 3)


def explain(vm, cluster, *flags):
    r = subprocess.run([scaler_binary(), "explain", "--prometheus-url", vm.url, "--namespace", NS, "--cluster", cluster,
                        "--topology", "metrics", "--output", "json", "--max-replicas", "10", *flags],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_connection_usage_counts_client_sessions_in_every_state_over_max_connections(keda):
    # 80 % / target 30 -> 1 + 3 = 4.
    md = metadata("usage", metric="ReadConnectionUsage", target="30")
    (spec,) = keda.spec(keda.ref(NS, "so-usage", md)).metricSpecs
    assert spec.metricName == "cnpg-usage-readconnectionusage"
    assert keda.desired(keda.ref(NS, "so-usage", md), 30) == 4


def test_the_signal_asking_for_most_wins_and_is_named(vm, scaler, keda):
    # ReadConnections: 20 active / 10 -> 3; usage 80 % / 30 -> 4: usage wins.
    md = metadata("usage", target="10", signals="ReadConnectionUsage=30")
    assert keda.desired(keda.ref(NS, "so-both", md), 10) == 4
    # Usage 80 % / 90 -> 2: connections win again.
    md = metadata("usage", target="10", signals="ReadConnectionUsage=90")
    assert keda.desired(keda.ref(NS, "so-both-low", md), 10) == 3
    samples = promtext.scrape(f"{scaler.admin}/metrics", timeout=2)
    winners = {l["signal"] for l, v in promtext.select(samples, "scaler_decision_signal", namespace=NS,
                                                       scaledobject="so-both") if v == 1}
    assert winners == {"ReadConnectionUsage"}
    winners = {l["signal"] for l, v in promtext.select(samples, "scaler_decision_signal", namespace=NS,
                                                       scaledobject="so-both-low") if v == 1}
    assert winners == {"ReadConnections"}
    e = explain(vm, "usage", "--target", "10", "--signals", "ReadConnectionUsage=30")
    assert (e["decision"]["signal"], e["decision"]["reason"], e["decision"]["desired"]) == (
        "ReadConnectionUsage", "load", 4)
    assert e["observation"]["extra_loads"][0] == pytest.approx(80.0)
    assert e["summary"].startswith("ReadConnectionUsage 80 / target 30")


def test_unknown_max_connections_is_unavailable_not_zero(keda):
    md = metadata("nomax", target="10", signals="ReadConnectionUsage=30")
    err = error_of(lambda: keda.metrics(keda.ref(NS, "so-nomax", md), "cnpg-nomax-readconnections"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert "max_connections" in err.details()


def test_warming_replicas_are_left_out_of_the_cpu_signal(vm, keda):
    # Streaming replicas 800m / 300 -> 1 + 3 = 4; counting the cloning one (1700m) would ask 7.
    md = metadata("warm", metric="ReadCPUUtilization", target="300")
    assert keda.desired(keda.ref(NS, "so-warm", md), 300) == 4
    e = explain(vm, "warm", "--metric", "ReadCPUUtilization", "--target", "300")
    assert e["warming_replicas"] == 1
    assert e["observation"]["load"] == pytest.approx(800, rel=0.02)
    # Streaming again for 2 minutes: still warming (400m / 300 -> 1 + 2 = 3).
    md = metadata("fresh", metric="ReadCPUUtilization", target="300")
    assert keda.desired(keda.ref(NS, "so-fresh", md), 300) == 3
    assert explain(vm, "fresh", "--metric", "ReadCPUUtilization", "--target", "300")["warming_replicas"] == 1
    # Without receiver series every replica counts: 800m / 300 -> 4 as well, never zero.
    md = metadata("norecv", metric="ReadCPUUtilization", target="300")
    assert keda.desired(keda.ref(NS, "so-norecv", md), 300) == 4
