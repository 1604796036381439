"""`scaler serve` against a hostile client and a hostile backend (issue 10): each test reproduces
one finding of the adversarial run with a fake backend (fake_backend.py, a stand-in) or raw
sockets, bounded in time and loopback only, and would fail on the binary before the fix.
Each probe also records its figures (testkit.record_figure, $TEST_FIGURES) for the tables in
docs/scaler-tests.md."""
import json
import socket
import threading
import time

import grpc
import pytest
import requests
from google.protobuf.wrappers_pb2 import StringValue

from fake_backend import FakePrometheus
from floods import closed_by_peer
from keda import Keda, code_of, error_of, metadata
from promtext import parse, total
from testkit import hwm_kib, record_figure, rss_kib, socket_fds, wait_until

MIB = 1 << 20


def answer(**parts) -> bytes:
    """A valid /api/v1/query answer with one sample per part, for tenant-a/pg."""
    result = [{"metric": {"namespace": "tenant-a", "cluster": "pg", "part": p}, "value": [time.time(), str(v)]}
              for p, v in parts.items()]
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@pytest.fixture
def fake():
    backends = []

    def make(*args, **kwargs):
        backends.append(FakePrometheus(*args, **kwargs))
        return backends[-1]

    yield make
    for b in backends:
        b.close()


def get_metrics(keda, namespace="tenant-a", name="pg", timeout=10.0, **md):
    ref = keda.ref(namespace, name, metadata(**md))
    return keda.metrics(ref, "cnpg-pg-readconnections", timeout=timeout)


def timed_error(call):
    t0 = time.monotonic()
    error = error_of(call)
    return error, time.monotonic() - t0


# --- the backend ---------------------------------------------------------------------------

def test_a_huge_answer_is_abandoned_while_streaming(start_scaler, fake):
    backend = fake("stream", stream_mib=256)
    scaler, keda = start_scaler(backend.url)
    error, took = timed_error(lambda: get_metrics(keda))
    peak = hwm_kib(scaler.proc.pid)
    record_figure("huge backend answer (256 MiB stream)", code=error.code().name, seconds=round(took, 2),
                  peak_rss_mib=round(peak / 1024))
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "--max-response-bytes (4194304 bytes)" in error.details()
    assert took < 2.5, f"answered after {took:.2f}s"
    assert peak < 120 * 1024, f"peak RSS {peak} KiB"
    assert backend.streamed < 64 * MIB, f"the scaler read {backend.streamed} bytes"


def big_valid_answer(samples: int) -> bytes:
    """A valid answer with `samples` extra parts: costly to parse, every byte legal."""
    extra = {f"extra{i}": 1 for i in range(samples)}
    return answer(instances=3, load=4, **extra)


def test_parsing_big_answers_stalls_no_other_rpc(start_scaler, fake):
    """Four keys whose answers are big and valid, parsed at once (more than the runtime's async
    workers on this machine), while GetMetricSpec, which never touches a backend, is timed."""
    body = big_valid_answer(300_000)  # ~20 MB
    backend = fake("answer", answer=body)
    # Each cold key its own query, so four answers parse at once (gathered, they would share one).
    scaler, keda = start_scaler(backend.url, "--max-response-bytes", str(64 * MIB), "--cold-batch-window", "0s")
    keda.spec(keda.ref("tenant-a", "pg", metadata()))  # connection warm

    def slow(namespace):
        return threading.Thread(target=lambda: code_of(lambda: get_metrics(keda, namespace=namespace, timeout=30)))

    parsers = [slow(f"tenant-big{i}") for i in range(4)]
    other = Keda(scaler.address)
    try:
        other.spec(other.ref("tenant-b", "other", metadata()))
        for t in parsers:
            t.start()
        worst, deadline = 0.0, time.monotonic() + 5
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            other.spec(other.ref("tenant-b", "other", metadata()), timeout=30)
            worst = max(worst, time.monotonic() - t0)
            time.sleep(0.02)
        for t in parsers:
            t.join(40)
    finally:
        other.close()
    record_figure(f"GetMetricSpec while 4 answers of {len(body) // MIB} MiB parse", worst_latency_s=round(worst, 3))
    assert backend.requests >= 4
    assert worst < 1.0, f"GetMetricSpec waited {worst:.2f}s for other keys' parses"


@pytest.mark.parametrize("part,value", [("instances", 4294967296), ("instances", 2.5), ("load", 1e308),
                                        ("lag", 1e300)])
def test_out_of_range_backend_values_are_garbage(start_scaler, fake, part, value):
    parts = {"instances": 3, "load": 4, "lag": 1, "wal": 0, part: value}
    backend = fake("answer", answer=answer(**parts))
    _, keda = start_scaler(backend.url)
    code = code_of(lambda: get_metrics(keda, maxReplicationLagSeconds="10"))
    record_figure(f"backend value {part}={value}", code=code.name)
    assert code == grpc.StatusCode.UNAVAILABLE


def test_backend_text_cannot_forge_log_lines(start_scaler, fake):
    backend = fake("answer", status=500, answer=b"boom\nFORGED level=ERROR message=pwned\r\n\x00")
    scaler, keda = start_scaler(backend.url)
    assert code_of(lambda: get_metrics(keda)) == grpc.StatusCode.UNAVAILABLE
    wait_until(lambda: "boom" in scaler.proc.log.read_text(errors="replace"), 5, what="the failure logged")
    lines = scaler.proc.log.read_text(errors="replace").splitlines()
    forged = [line for line in lines if line.startswith("FORGED")]
    record_figure("backend error text with newlines", forged_log_lines=len(forged))
    assert not forged, forged


# --- names from the request -----------------------------------------------------------------

def test_huge_names_are_refused_small_and_cost_nothing(start_scaler, fake):
    backend = fake("answer", answer=answer(instances=3, load=4))
    scaler, keda = start_scaler(backend.url)
    huge = "tenant-" + "a" * (3 * MIB)
    log_before, rss_before = scaler.proc.log.stat().st_size, rss_kib(scaler.proc.pid)
    errors = [error_of(lambda: get_metrics(keda, namespace=huge)) for _ in range(20)]
    logged = scaler.proc.log.stat().st_size - log_before
    grown = rss_kib(scaler.proc.pid) - rss_before
    record_figure("20 requests with a 3 MiB namespace", code=errors[0].code().name,
                  reply_bytes=len(errors[0].details() or ""), rss_growth_mib=round(grown / 1024),
                  log_bytes=logged, backend_queries=backend.requests)
    # Past the 64 KiB request limit: refused before the message is read, the limit named.
    assert {e.code() for e in errors} == {grpc.StatusCode.OUT_OF_RANGE}
    assert "the limit is: 65536 bytes" in errors[0].details()
    assert len(errors[0].details()) < 400
    assert backend.requests == 0, "an invalid name reached the backend"
    assert logged < 64 * 1024 and grown < 30 * 1024


def test_many_oversized_requests_on_one_connection_hold_no_memory(start_scaler, fake):
    """100 requests of 3 MiB at once on one connection: each is refused on its length prefix.
    Under tonic's default 4 MiB limit each was read whole and parsed (peak RSS +300 MiB here):
    one connection's 1,024 streams could hold 4 GiB."""
    backend = fake("answer", answer=answer(instances=3, load=4))
    scaler, keda = start_scaler(backend.url)
    ref = keda.ref("tenant-" + "a" * (3 * MIB), "pg", metadata())
    request = keda.metrics_request(ref, "cnpg-pg-readconnections")
    peak_before = hwm_kib(scaler.proc.pid)
    t0 = time.monotonic()
    calls = [keda.stub.GetMetrics.future(request, timeout=30) for _ in range(100)]
    codes = [code_of(call.result) for call in calls]
    took = time.monotonic() - t0
    grown = hwm_kib(scaler.proc.pid) - peak_before
    record_figure("100 requests of 3 MiB at once on one connection", codes=sorted({c.name for c in codes}),
                  seconds=round(took, 2), peak_rss_growth_mib=round(grown / 1024),
                  backend_queries=backend.requests)
    assert set(codes) == {grpc.StatusCode.OUT_OF_RANGE}
    assert grown < 40 * 1024, f"peak RSS grew {grown // 1024} MiB"
    assert backend.requests == 0
    assert keda.spec(keda.ref("tenant-a", "pg", metadata())).metricSpecs, "the connection still serves"
    # The health service has the same limit: a HealthCheckRequest of 3 MiB. Its one field (1,
    # string `service`) is encoded as StringValue's, so the health stubs are not needed.
    health = StringValue(value="s" * (3 * MIB)).SerializeToString()
    check = keda.channel.unary_unary("/grpc.health.v1.Health/Check")
    assert code_of(lambda: check(health, timeout=10)) == grpc.StatusCode.OUT_OF_RANGE


def test_rpcs_in_flight_over_all_connections_are_bounded(start_scaler, fake):
    """`--max-in-flight-rpcs 32`, and 4 connections each sending 24 rpcs for new ScaledObjects
    while the backend takes 2 s to answer: 32 are taken, the other 64 refused at once with
    RESOURCE_EXHAUSTED; once the backend has answered, rpcs are taken again. Without the bound
    every connection may hold `--max-streams-per-connection` of them, so a flood spread over
    `--max-connections` holds a million."""
    backend = fake("answer", answer=answer(instances=3, load=4), delay=2.0)
    scaler, keda = start_scaler(backend.url, "--max-in-flight-rpcs", "32", "--query-timeout", "5s")
    clients = [Keda(scaler.address) for _ in range(4)]
    try:
        ended: dict[int, float] = {}
        t0 = time.monotonic()
        calls = []
        for i, client in enumerate(clients):
            for j in range(24):
                ref = client.ref("tenant-a", f"so-{i}-{j}", metadata())
                request = client.metrics_request(ref, "cnpg-pg-readconnections")
                call = client.stub.GetMetrics.future(request, timeout=10)
                call.add_done_callback(lambda _, n=len(calls): ended.setdefault(n, time.monotonic() - t0))
                calls.append(call)
        codes = [code_of(call.result) for call in calls]
        refused = [n for n, c in enumerate(codes) if c == grpc.StatusCode.RESOURCE_EXHAUSTED]
        record_figure("96 slow rpcs on 4 connections, --max-in-flight-rpcs 32",
                      refused=len(refused), ok=codes.count(grpc.StatusCode.OK),
                      refused_within_s=round(max(ended[n] for n in refused), 2) if refused else None)
        assert set(codes) == {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED}, codes
        assert len(refused) == 64, f"{len(refused)} refused"
        assert max(ended[n] for n in refused) < 1.5, "a refusal waited for the backend"
        assert code_of(lambda: get_metrics(keda, name="so-0-0")) == grpc.StatusCode.OK
    finally:
        for client in clients:
            client.close()


def test_long_names_do_not_bloat_metrics(start_scaler, fake):
    backend = fake("answer", answer=answer(instances=3, load=4))
    scaler, keda = start_scaler(backend.url)
    # 60 KiB: under the request limit, so the names reach validation.
    codes = {code_of(lambda i=i: get_metrics(keda, name=f"so{i}-" + "b" * (60 * 1024), cluster="pg"))
             for i in range(200)}
    size = len(requests.get(scaler.admin + "/metrics", timeout=10).content)
    record_figure("200 ScaledObject names of 60 KiB", codes=sorted(c.name for c in codes), metrics_bytes=size)
    assert codes == {grpc.StatusCode.INVALID_ARGUMENT}
    assert size < 64 * 1024, f"/metrics is {size} bytes"


@pytest.mark.parametrize("namespace,name", [("tenant-x/../../../api/v1/secrets", "pg"),
                                            ("tenant-x?labelSelector=a&watch=true", "pg"),
                                            ("tenant-a", "pg\nFORGED level=ERROR")])
def test_path_and_newline_names_are_invalid_argument(start_scaler, fake, namespace, name):
    backend = fake("answer", answer=answer(instances=3, load=4))
    scaler, keda = start_scaler(backend.url)
    error = error_of(lambda: get_metrics(keda, namespace=namespace, name=name, cluster="pg"))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "\n" not in error.details()
    assert backend.requests == 0
    assert not any(line.startswith("FORGED") for line in scaler.proc.log.read_text(errors="replace").splitlines())


# --- connections ----------------------------------------------------------------------------

def open_silent(port: int, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.setblocking(False)
        socks.append(s)
    return socks


def all_closed(socks: list[socket.socket]) -> bool:
    return all([closed_by_peer(s) for s in socks])  # a list: poll (and drain) every socket


def test_silent_connections_are_reaped_and_capped(start_scaler, fake):
    backend = fake("answer", answer=answer(instances=3, load=4))
    scaler, keda = start_scaler(backend.url, "--idle-timeout", "2s", "--max-connections", "64")
    base = socket_fds(scaler.proc.pid)
    socks = open_silent(scaler.grpc_port, 300)
    try:
        time.sleep(1)
        held = socket_fds(scaler.proc.pid) - base
        # Past the cap the rest wait in the backlog, then get their own idle timeout in turn.
        deadline = time.monotonic() + 30
        while not (reaped := all_closed(socks)) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = socket_fds(scaler.proc.pid) - base
        record_figure("300 silent TCP connections to gRPC (--max-connections 64, --idle-timeout 2s)",
                      held_after_1s=held, held_after_reaping=left)
        assert held <= 64, f"{held} connections held"
        assert reaped and left <= 2, f"{left} silent connections still open"
        assert keda.spec(keda.ref("tenant-a", "pg", metadata())).metricSpecs
    finally:
        for s in socks:
            s.close()


def test_an_idle_live_client_survives_the_idle_timeout(start_scaler, fake):
    """The keepalive PINGs keep a quiet but live HTTP/2 client open past --idle-timeout."""
    backend = fake("answer", answer=answer(instances=3, load=4))
    scaler, keda = start_scaler(backend.url, "--idle-timeout", "2s", "--stream-heartbeat", "6s")
    ref = keda.ref("tenant-a", "pg", metadata())
    keda.spec(ref)
    stream = keda.stub.StreamIsActive(ref, timeout=20)
    first = next(stream)
    time.sleep(5)
    assert first.result and next(stream).result
    stream.cancel()
    assert keda.spec(ref).metricSpecs


def test_streams_per_connection_are_capped(start_scaler, fake):
    backend = fake("answer", answer=answer(instances=3, load=4))
    # Below the default (1,024), so that 1,000 streams show the cap.
    scaler, keda = start_scaler(backend.url, "--stream-heartbeat", "60s", "--max-streams-per-connection", "128")
    ref = keda.ref("tenant-a", "pg", metadata())
    streams = [keda.stub.StreamIsActive(ref, timeout=30) for _ in range(1000)]
    try:
        def active():
            text = requests.get(scaler.admin + "/metrics", timeout=5).text
            return total(parse(text), "scaler_active_streams")
        wait_until(lambda: active() >= 128, 15, 0.2, what="128 open streams")
        time.sleep(1)
        seen = active()
        peak = hwm_kib(scaler.proc.pid)
        record_figure("1,000 StreamIsActive on one connection", open_streams=seen, peak_rss_mib=round(peak / 1024))
        assert seen == 128, f"{seen} streams open on one connection"
    finally:
        for s in streams:
            s.cancel()
