"""Serving behaviour: streams, health, admin endpoints, coalescing and refresh."""
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
import requests
from grpc_health.v1 import health_pb2

from cnpg_series import Backend, render, replicas
from fake_backend import FakePrometheus
from keda import code_of, metadata
from procs import wait_until


def test_grpc_health_serving(scaler):
    assert scaler.health("") == health_pb2.HealthCheckResponse.SERVING


def test_stream_metric_spec_is_unimplemented(keda):
    ref = keda.ref("tenant-a", "so-pg", metadata(target="5"))
    assert code_of(lambda: next(keda.stub.StreamMetricSpec(ref, timeout=5))) == grpc.StatusCode.UNIMPLEMENTED


def test_stream_is_active_true_on_open_and_ok_on_sigterm(vm, start_scaler):
    scaler, keda = start_scaler(vm.url)
    stream = keda.stub.StreamIsActive(keda.ref("tenant-a", "so-pg", metadata(target="5")), timeout=60)
    first = next(stream)
    assert first.result is True
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


def test_backend_queries_per_refresh_interval(vm, start_scaler):
    """KEDA's ~9 rpcs per poll for 10 ScaledObjects over 3 s (refresh 1 s): VictoriaMetrics
    sees at most one set of queries per ScaledObject per refresh interval."""
    _, keda = start_scaler(vm.url)  # its own scaler: no other test's keys refreshing meanwhile
    refs = [keda.ref("tenant-a", f"so-budget-{i}", metadata(target="5", minReplicas=str(2 + i % 3)))
            for i in range(10)]
    for r in refs:  # warm up and measure the queries one decision needs
        keda.scale_loop_poll(r)
    before, t0, rpcs = vm.query_requests(), time.monotonic(), 0
    while time.monotonic() - t0 < 3.0:
        for r in refs:
            keda.scale_loop_poll(r)
            keda.hpa_query(r)
            rpcs += 6
    elapsed = time.monotonic() - t0
    delta = vm.query_requests() - before
    per_decision = _queries_per_decision(vm, keda)
    budget = len(refs) * per_decision * (elapsed / 1.0 + 1)
    assert rpcs > 200
    assert delta <= budget, f"{delta} backend queries for {rpcs} rpcs; budget {budget:.0f}"


def _queries_per_decision(vm, keda) -> float:
    before = vm.query_requests()
    keda.metrics(keda.ref("tenant-b", f"so-probe-{time.monotonic_ns()}", metadata(target="5")),
                 "cnpg-pg-readconnections")
    return vm.query_requests() - before


def test_metrics_endpoint(scaler, keda):
    ok_ref = keda.ref("tenant-a", "so-metrics", metadata(target="5", dryRun="true"))
    keda.scale_loop_poll(ok_ref)
    code_of(lambda: keda.spec(keda.ref("tenant-a", "so-bad", metadata(target="nope"))))
    text = requests.get(f"{scaler.admin}/metrics", timeout=2).text
    samples = _parse(text)

    def find(pred):
        return [(name, labels, v) for name, labels, v in samples if pred(name, labels)]

    def has_value(labels, *wanted):
        vals = {v.lower() for v in labels.values()}
        return all(w.lower() in vals for w in wanted)

    assert find(lambda n, l: has_value(l, "GetMetrics", "OK") or has_value(l, "GetMetrics", "0")), \
        "no request count for GetMetrics with code OK"
    assert find(lambda n, l: has_value(l, "GetMetricSpec") and any(
        v.lower() in ("invalidargument", "invalid_argument", "3") for v in l.values())), \
        "no request count for GetMetricSpec with code INVALID_ARGUMENT"
    assert find(lambda n, l: "backend" in n or "prometheus" in n or "query" in n), "no backend query series"
    decision = find(lambda n, l: l.get("namespace") == "tenant-a" and "so-metrics" in l.values())
    assert decision, "no decision series for tenant-a/so-metrics"
    reasons = " ".join(" ".join(l.values()) + " " + n for n, l, _ in decision).lower()
    assert "dry" in reasons, f"dry-run reason not visible: {decision}"
    assert 4 in {v for _, _, v in decision}, f"recommendation 4 not visible: {decision}"
    assert 3 in {v for _, _, v in decision}, f"held count 3 not visible: {decision}"


def _parse(text):
    """Prometheus text exposition -> [(name, {label: value}, float)]."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        name, labels = head, {}
        if "{" in head:
            name, _, rest = head.partition("{")
            for part in _split_labels(rest.rstrip("}")):
                k, _, v = part.partition("=")
                labels[k] = v.strip('"')
        try:
            out.append((name, labels, float(value)))
        except ValueError:
            pass
    return out


def _split_labels(s):
    parts, cur, quoted = [], "", False
    for ch in s:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return parts
