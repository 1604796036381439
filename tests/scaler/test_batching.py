"""Batched observation (issue 14) on a real VictoriaMetrics: a refresh tick answers every cached
ScaledObject from a few queries, and every answer is the one the single-cluster query gives.

The property test draws random fleets (namespaces and cluster names that prefix each other,
duplicate scrapes, a replica without CPU series, absent clusters, both load metrics, the lag brake
on and off), loads each into one VictoriaMetrics under a namespace prefix of its own, and asks two
scalers for every ScaledObject: one with `--observe-batch-size 1` (every answer from its own
single-cluster query) and one batching, read after refresh ticks have re-evaluated everything
from batched queries. Value or error must be the same for every key."""
import itertools
import re
import time

import grpc
import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import promtext
from cnpg_series import Backend, Cluster, Pod, render
from keda import Keda, metadata
from scaler_proc import Scaler
from testkit import wait_until
from vm import VictoriaMetrics

NAMESPACES = ("a", "ab", "b")  # "a" prefixes "ab"
NAMES = ("pg", "pg-1", "pg-archive", "pga")  # pg-1-2 is pg-1's pod, pg-archive-1 never pg's
EXAMPLES = itertools.count()


@pytest.fixture(scope="module")
def fleet_vm(tmp_path_factory):
    v = VictoriaMetrics(str(tmp_path_factory.mktemp("fleet-vm"))).start()
    yield v
    v.stop()


@pytest.fixture(scope="module")
def scalers(fleet_vm, tmp_path_factory):
    """(batched, single): the batched one refreshes every second; the single one never within a
    test, so all its answers come from a cold key's single-cluster query."""
    workdir = str(tmp_path_factory.mktemp("fleet-scalers"))
    batched = Scaler(workdir, fleet_vm.url, "--observe-batch-size", "100").start()
    single = Scaler(workdir, fleet_vm.url, "--observe-batch-size", "1", refresh="10m",
                    *("--staleness", "20m")).start()
    clients = (Keda(batched.address), Keda(single.address))
    yield (batched, clients[0]), (single, clients[1])
    for s in (batched, single):
        s.stop()
    for k in clients:
        k.close()


cluster_spec = st.fixed_dictionaries({
    "namespace": st.sampled_from(NAMESPACES),
    "name": st.sampled_from(NAMES),
    "replicas": st.lists(st.integers(0, 120), max_size=3),  # active sessions per replica
    "wal": st.sampled_from([0.0, 5000.0]),
    "lag": st.sampled_from([0.0, 90.0]),
    "duplicate": st.booleans(),  # scraped by a second job
    "cpu_gap": st.booleans(),  # the last replica has no CPU series
})

key_spec = st.fixed_dictionaries({
    "namespace": st.sampled_from(NAMESPACES),
    "name": st.sampled_from(NAMES),
    "metric": st.sampled_from(["ReadConnections", "ReadCPUUtilization"]),
    "target": st.sampled_from(["3", "7.5", "40"]),
    "lag": st.sampled_from([None, "30"]),
})


def fleet_text(prefix: str, specs: list[dict]) -> tuple[str, int]:
    """Prometheus text of the fleet, and how many in_recovery series it has."""
    parts, series = [], 0
    for c in specs:
        pods = [Pod(1, primary=True, wal_bytes_per_s=c["wal"], backends=[Backend(25)])]
        pods += [Pod(i + 2, backends=[Backend(v)] if v else [], cpu_millicores=100 + 10 * v,
                     lag=lambda age, lag=c["lag"]: lag) for i, v in enumerate(c["replicas"])]
        cluster = Cluster(prefix + c["namespace"], c["name"], pods)
        text = render([cluster], time.time(), back=420, ahead=900)
        if c["cpu_gap"] and len(pods) > 1:
            gap = f'pod="{cluster.pod_name(pods[-1])}"'
            text = "\n".join(line for line in text.splitlines()
                             if not (line.startswith("container_cpu_usage_seconds_total{")
                                     and gap in line and 'container="postgres"' in line)) + "\n"
        parts.append(text)
        series += len(pods)
        if c["duplicate"]:
            parts.append(re.sub(r'job="[^"]*"', 'job="second-scrape"', text))
            series += len(pods)
    return "".join(parts), series


def outcome(keda: Keda, namespace: str, so: str, md: dict):
    """(value, None) or (None, status code and message) of one GetMetrics."""
    ref = keda.ref(namespace, so, md)
    try:
        resp = keda.metrics(ref, f"cnpg-{md['cluster']}-{md['metric'].lower()}")
        return resp.metricValues[0].metricValueFloat, None
    except grpc.RpcError as e:
        return None, (e.code(), e.details())


def scrape(scaler: Scaler):
    return promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text)


def ticks(scaler: Scaler) -> float:
    return promtext.total(scrape(scaler), "scaler_refresh_duration_seconds_count")


def multi_cluster_queries(scaler: Scaler) -> float:
    """Decision queries that answered for more than one cluster."""
    samples = scrape(scaler)
    single = sum(v for labels, v in promtext.select(samples, "scaler_backend_query_clusters_bucket")
                 if float(labels["le"]) == 1.0)
    return promtext.total(samples, "scaler_backend_query_clusters_count") - single


@settings(max_examples=8, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(specs=st.lists(cluster_spec, min_size=1, max_size=8,
                      unique_by=lambda c: (c["namespace"], c["name"])),
       keys=st.lists(key_spec, min_size=1, max_size=14))
def test_batched_and_single_cluster_answers_agree(fleet_vm, scalers, specs, keys):
    (batched, batched_keda), (single, single_keda) = scalers
    prefix = f"x{next(EXAMPLES)}-"
    text, series = fleet_text(prefix, specs)
    fleet_vm.import_and_wait(text, f'count(cnpg_pg_replication_in_recovery{{namespace=~"{prefix}.*"}})',
                             expect=lambda n: n == series)
    # Every cluster of the fleet has a ScaledObject, plus the drawn ones (some absent clusters).
    asked = [dict(namespace=c["namespace"], name=c["name"], metric="ReadConnections", target="5", lag=None)
             for c in specs] + keys
    calls = []
    for i, k in enumerate(asked):
        md = metadata(cluster=k["name"], target=k["target"], max_replicas="9", metric=k["metric"],
                      maxReplicationLagSeconds=k["lag"])
        calls.append((prefix + k["namespace"], f"so-{i}", md))

    for call in calls:  # cold: each one a batch of one
        outcome(batched_keda, *call)
    multi = multi_cluster_queries(batched)
    # The third tick finishing from here started a full interval after the last cold evaluation,
    # so it re-evaluated every key, batched.
    before = ticks(batched)
    wait_until(lambda: ticks(batched) - before >= 3, 20, 0.2, "three refresh ticks")
    got = [outcome(batched_keda, *call) for call in calls]
    want = [outcome(single_keda, *call) for call in calls]
    for call, g, w in zip(calls, got, want):
        assert g == w, f"{call[0]}/{call[1]} cluster {call[2]['cluster']}: batched {g}, single {w}"
    # The ticks did batch: this example's keys alone are more than one cluster per shape at times,
    # and earlier examples' keys are still cached and refreshed along.
    assert multi_cluster_queries(batched) > multi
