"""Serving behaviour: streams, health, admin endpoints, coalescing and refresh."""
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import requests
from grpc_health.v1 import health_pb2

import promtext
from cnpg_series import Backend, render, replicas
from fake_backend import FakePrometheus
from keda import code_of, metadata
from testkit import record_figure, wait_until


def test_grpc_health_serving(scaler):
    assert scaler.health("") == health_pb2.HealthCheckResponse.SERVING


def test_stream_metric_spec_is_unimplemented(keda):
    ref = keda.ref("tenant-a", "so-pg", metadata(target="5"))
    assert code_of(lambda: next(keda.stub.StreamMetricSpec(ref, timeout=5))) == grpc.StatusCode.UNIMPLEMENTED


def test_stream_is_active_true_on_open_heartbeat_and_ok_on_sigterm(vm, start_scaler):
    scaler, keda = start_scaler(vm.url, "--stream-heartbeat", "300ms")
    stream = keda.stub.StreamIsActive(keda.ref("tenant-a", "so-pg", metadata(target="5")), timeout=60)
    t0 = time.monotonic()
    first = next(stream)
    assert first.result is True
    assert time.monotonic() - t0 < 2, "no `true` on open"
    beats = [next(stream).result for _ in range(3)]  # the heartbeat repeats `true`
    assert beats == [True] * 3
    assert 0.8 <= time.monotonic() - t0 < 3, "three heartbeats 300 ms apart"

    def streams():
        return promtext.total(promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text),
                              "scaler_active_streams")

    # A client that goes away ends its stream's task (the next heartbeat finds it gone).
    other = keda.stub.StreamIsActive(keda.ref("tenant-a", "so-pg2", metadata(target="5")), timeout=60)
    assert next(other).result is True
    assert streams() == 2
    other.cancel()
    wait_until(lambda: streams() == 1, 3, 0.05, "the cancelled stream's task to end")
    scaler.proc.signal()  # SIGTERM: graceful shutdown must end the stream with OK
    t0 = time.monotonic()
    rest = list(stream)  # raises grpc.RpcError unless the stream ends with status OK
    assert all(m.result for m in rest)
    assert stream.code() == grpc.StatusCode.OK
    assert time.monotonic() - t0 < 10
    assert scaler.proc.popen.wait(10) == 0


def test_admin_healthz_readyz(scaler):
    assert requests.get(f"{scaler.admin}/healthz", timeout=2).status_code == 200
    assert requests.get(f"{scaler.admin}/readyz", timeout=2).status_code == 200


def test_load_increase_is_picked_up_after_the_refresh_interval(vm, keda):
    cluster = replicas("tenant-d", "grow", 2, n_replicas=1)
    now = time.time()
    vm.import_and_wait(render([cluster], now), 'count(cnpg_pg_replication_in_recovery{namespace="tenant-d"})',
                       lambda n: n == 2)
    ref = keda.ref("tenant-d", "grow", metadata("grow", target="5"))
    assert keda.desired(ref, 5) == 2  # 1 + ceil(2 / 5)

    # 20 more sessions under another user on the replica: 1 + ceil(22 / 5) = 6.
    cluster.pods[1].backends = [Backend(20, usename="batch")]
    cluster.pods[1].internal = False
    vm.import_and_wait(render([cluster], now), 'sum(cnpg_backends_total{namespace="tenant-d",usename="batch"})',
                       lambda v: v == 20)
    visible_at = time.monotonic()
    wait_until(lambda: keda.desired(ref, 5) == 6, 5, 0.1, "new load in the answer")
    # refresh-interval 1s: picked up within a refresh plus one backend round trip.
    assert time.monotonic() - visible_at <= 3.5


def test_single_flight_one_set_of_queries_for_a_burst(vm, start_scaler):
    """60 KEDA callers hit a cold key at once, through a 0.5 s slow backend: the scaler must
    ask the backend for one decision, not 60."""
    proxy = FakePrometheus("proxy", delay=0.5, upstream=vm.url)
    try:
        _, keda = start_scaler(proxy.url, "--query-timeout", "5s", refresh="30s")
        # One cold call measures how many backend queries one decision needs.
        assert keda.desired(keda.ref("tenant-b", "so-1", metadata(target="5")), 5) == 2
        per_decision = proxy.requests
        assert per_decision >= 1

        ref = keda.ref("tenant-b", "so-2", metadata(target="5"))
        before = proxy.requests
        with ThreadPoolExecutor(60) as pool:
            answers = list(pool.map(lambda _: keda.metrics(ref, "cnpg-pg-readconnections", timeout=10), range(60)))
        assert {a.metricValues[0].metricValueFloat for a in answers} == {10}
        assert proxy.requests - before == per_decision
        # Within the refresh interval, the same key costs no backend query at all.
        before = proxy.requests
        for _ in range(20):
            keda.scale_loop_poll(ref)
        assert proxy.requests == before
    finally:
        proxy.close()


def test_backend_queries_per_refresh_tick_do_not_grow_with_scaledobjects(private_vm, start_scaler):
    """300 ScaledObjects on 300 clusters (the base set's real ones and absent ones, half with the
    lag brake: two query shapes), polled like KEDA: VictoriaMetrics' own query counter sees a few
    queries per refresh tick, against about one per ScaledObject with --observe-batch-size 1 (the
    old per-ScaledObject cost) in the same run."""
    namespaces = ("tenant-a", "tenant-b", "tenant-c", "tenant-a-dev")
    real = ("pg", "pg-archive", "quiet", "busy-lag")
    refs = []
    for i in range(300):
        cluster = real[i % 4] if i < 16 else f"db-{i}"
        md = metadata(cluster=cluster, target="5", maxReplicationLagSeconds="30" if i % 2 else None)
        refs.append(((namespaces[i % 4], f"so-fleet-{i}", md), f"cnpg-{cluster}-readconnections"))

    def queries_per_tick(*flags):
        scaler, keda = start_scaler(private_vm.url, *flags)
        poll = lambda: [code_of(lambda: keda.metrics(keda.ref(*ref), name)) for ref, name in refs]
        poll()  # cold: one query each
        time.sleep(1.5)  # every key is due from the next tick on
        ticks = lambda: promtext.total(promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text),
                                       "scaler_refresh_duration_seconds_count")
        queries, ticked = private_vm.query_requests(), ticks()
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3.0:
            poll()  # answered from memory
        queries, ticked = private_vm.query_requests() - queries, ticks() - ticked
        assert ticked >= 2, f"{ticked} refresh ticks in 3 s at --refresh-interval 1s"
        scaler.stop()
        return queries, ticked

    batched, ticks_batched = queries_per_tick()
    single, ticks_single = queries_per_tick("--observe-batch-size", "1")
    record_figure("backend queries per refresh tick, 300 ScaledObjects",
                  batched=round(batched / ticks_batched, 1), batch_size_1=round(single / ticks_single, 1))
    # 150 clusters per shape, batches of 100: 4 queries per tick. The window may cut a tick at
    # either end, hence one tick of slack.
    assert batched <= 8 * (ticks_batched + 1), f"{batched} queries in {ticks_batched} ticks"
    assert single >= 250 * (ticks_single - 1), f"{single} queries in {ticks_single} ticks (batch size 1)"


def test_metrics_endpoint(scaler, keda):
    """Names as documented in scaler/src/metrics.rs."""
    keda.scale_loop_poll(keda.ref("tenant-a", "so-metrics", metadata(target="5", dryRun="true")))
    keda.scale_loop_poll(keda.ref("tenant-b", "so-floor", metadata(target="5", maxSyncReplicas="3")))
    code_of(lambda: keda.spec(keda.ref("tenant-a", "so-bad", metadata(target="nope"))))
    samples = promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text)

    assert promtext.total(samples, "scaler_grpc_requests_total", rpc="GetMetrics", code="OK") >= 1
    assert promtext.total(samples, "scaler_grpc_requests_total", rpc="IsActive", code="OK") >= 1
    assert promtext.total(samples, "scaler_grpc_requests_total", rpc="GetMetricSpec", code="InvalidArgument") >= 1
    assert promtext.select(samples, "scaler_grpc_request_duration_seconds_bucket", rpc="GetMetrics", code="OK")
    assert promtext.total(samples, "scaler_backend_queries_total", outcome="ok") >= 1
    assert promtext.select(samples, "scaler_backend_query_duration_seconds_count")

    so = dict(namespace="tenant-a", scaledobject="so-metrics", cluster="pg")
    assert promtext.select(samples, "scaler_decision_desired_instances", **so) == [(so, 3.0)]  # held
    assert promtext.select(samples, "scaler_decision_recommended_instances", **so) == [(so, 4.0)]
    reasons = {l["reason"] for l, v in promtext.select(samples, "scaler_decision_reason", **so) if v == 1}
    assert len(reasons) == 1 and "dry" in reasons.pop().lower()

    # The decision's inputs, for dashboards: read load against target, the brake's state.
    assert promtext.select(samples, "scaler_decision_load", **so) == [(so, 13.0)]
    assert promtext.select(samples, "scaler_decision_target", **so) == [(so, 5.0)]
    brake = {l["state"] for l, v in promtext.select(samples, "scaler_decision_brake", **so) if v == 1}
    assert brake == {"off"}

    floor = dict(namespace="tenant-b", scaledobject="so-floor", cluster="pg")
    assert promtext.select(samples, "scaler_decision_desired_instances", **floor) == [(floor, 4.0)]
    reasons = {l["reason"] for l, v in promtext.select(samples, "scaler_decision_reason", **floor) if v == 1}
    assert len(reasons) == 1 and "quorum" in reasons.pop().lower()


REASONS = [
    # (namespace, scaledobject, metadata, desired, reason)
    ("tenant-a", "so-r-load", metadata(target="5"), 4, "load"),
    ("tenant-b", "so-r-floor", metadata(target="5", minReplicas="3"), 3, "floor"),
    ("tenant-a", "so-r-max", metadata(target="1", max_replicas="6"), 6, "max"),
    ("tenant-b", "so-r-quorum", metadata(target="5", max_replicas="3", maxSyncReplicas="4"), 5, "quorum"),
    ("tenant-c", "so-r-brake", metadata("busy-lag", target="2", maxReplicationLagSeconds="30"), 3, "brake"),
    ("tenant-c", "so-r-idle", metadata("idle-lag", target="2", maxReplicationLagSeconds="30"), 7, "load"),
]


def test_every_decision_publishes_its_reason(scaler, keda):
    for ns, so, md, desired, _ in REASONS:
        assert keda.desired(keda.ref(ns, so, md), float(md["target"])) == desired, so
    samples = promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text)
    for ns, so, md, desired, reason in REASONS:
        labels = dict(namespace=ns, scaledobject=so, cluster=md["cluster"])
        assert promtext.total(samples, "scaler_decision_desired_instances", **labels) == desired, so
        current = {l["reason"] for l, v in promtext.select(samples, "scaler_decision_reason", **labels) if v == 1}
        assert current == {reason}, f"{so}: {current}"


def test_topology_auto_without_kubernetes_falls_back_to_metrics(vm, start_scaler, tmp_path):
    env = {"KUBECONFIG": str(tmp_path / "no-such-kubeconfig"), "KUBERNETES_SERVICE_HOST": "", "HOME": str(tmp_path)}
    _, keda = start_scaler(vm.url, topology="auto", env=env)
    assert keda.desired(keda.ref("tenant-a", "so-pg", metadata(target="5")), 5) == 4


def test_idle_scaled_objects_are_evicted_with_their_gauges(vm, start_scaler):
    scaler, keda = start_scaler(vm.url, "--cache-ttl", "2s")
    keda.scale_loop_poll(keda.ref("tenant-a", "so-evict", metadata(target="5")))
    so = dict(namespace="tenant-a", scaledobject="so-evict", cluster="pg")

    def scrape():
        return promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text)

    samples = scrape()
    assert promtext.total(samples, "scaler_cache_entries") == 1
    assert promtext.select(samples, "scaler_decision_desired_instances", **so) == [(so, 4.0)]
    # ttl 2 s, swept every refresh interval (1 s).
    wait_until(lambda: promtext.total(scrape(), "scaler_cache_entries") == 0, 6, 0.2, "eviction")
    samples = scrape()
    assert promtext.select(samples, "scaler_decision_desired_instances", **so) == []
    assert promtext.select(samples, "scaler_decision_reason", **so) == []


def test_sigterm_drains_in_flight_calls(vm, start_scaler):
    """An rpc waiting on a slow backend when SIGTERM arrives still gets its answer."""
    proxy = FakePrometheus("proxy", delay=1.0, upstream=vm.url)
    try:
        scaler, keda = start_scaler(proxy.url, "--query-timeout", "5s")
        ref = keda.ref("tenant-b", "so-drain", metadata(target="5"))
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(keda.metrics, ref, "cnpg-pg-readconnections", 10)
            wait_until(lambda: proxy.in_flight > 0, 5, 0.02, "the backend query in flight")
            scaler.proc.signal()
            assert pending.result().metricValues[0].metricValueFloat == 10
        assert scaler.proc.popen.wait(10) == 0
    finally:
        proxy.close()


def test_warm_key_answers_at_memory_speed_while_refreshing(vm, start_scaler):
    """Stale-while-revalidate: after the refresh interval a warm key still answers at once with
    its previous good value while one background refresh goes to the (slow) backend."""
    proxy = FakePrometheus("proxy", delay=1.5, upstream=vm.url)
    try:
        _, keda = start_scaler(proxy.url, "--query-timeout", "5s", refresh="1s")
        ref = keda.ref("tenant-b", "so-swr", metadata(target="5"))
        assert keda.desired(ref, 5) == 2  # cold: waits for the backend once
        time.sleep(1.2)  # past the refresh interval
        before = proxy.requests
        for _ in range(5):
            t0 = time.monotonic()
            (mv,) = keda.metrics(ref, "cnpg-pg-readconnections").metricValues
            assert mv.metricValueFloat == 10
            assert time.monotonic() - t0 < 0.5, "a warm key waited for the backend"
        wait_until(lambda: proxy.requests == before + 1, 3, 0.05, "one background refresh")
        time.sleep(0.3)
        assert proxy.requests == before + 1
    finally:
        proxy.close()
