"""Every rpc and every backend query is counted, whoever gives up first (issue 29, item 4).

A slow backend (tests/scaler/fake_backend.py, a STAND-IN: a delaying proxy in front of the real
VictoriaMetrics) takes 1.5 s per query; KEDA-like clients ask for 20 cold ScaledObjects with a 1 s
deadline. The clients give up first. Still, the scaler's scaler_backend_queries_total must equal
the queries the backend received, and scaler_grpc_requests_total must hold all 20 rpcs as
DeadlineExceeded; the queries must finish (not be torn down with the rpc) and their answers serve
the retries without another query."""
import concurrent.futures
import time

import grpc
import pytest

import promtext
from fake_backend import FakePrometheus
from keda import metadata
from testkit import wait_until

KEYS = 20
DELAY = 1.5
DEADLINE = 1.0


def counters(scaler) -> list:
    return promtext.scrape(f"{scaler.admin}/metrics")


@pytest.mark.parametrize("window", ["0s", None], ids=["each-alone", "gathered-by-default"])
def test_calls_the_client_gave_up_on_are_counted_and_their_answers_kept(vm, start_scaler, window):
    slow = FakePrometheus("proxy", delay=DELAY, upstream=vm.url)
    try:
        flags = ["--cold-batch-window", window] if window else []
        # Room for the stand-in's 1.5 s on a loaded machine: the queries must end "ok".
        scaler, keda = start_scaler(slow.url, "--query-timeout", "2800ms", *flags, refresh="1m")
        refs = [keda.ref("tenant-a", f"counted-{i}", metadata("pg")) for i in range(KEYS)]

        def ask(ref, timeout):
            try:
                keda.metrics(ref, "cnpg-pg-readconnections", timeout=timeout)
                return grpc.StatusCode.OK
            except grpc.RpcError as e:
                return e.code()

        with concurrent.futures.ThreadPoolExecutor(KEYS) as pool:
            codes = list(pool.map(lambda ref: ask(ref, DEADLINE), refs))
        # CANCELLED when the server's copy of the deadline (tonic's, from grpc-timeout) fires
        # before the client's own.
        assert set(codes) <= {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED}, codes
        # The queries outlive the rpcs: each one ends at the backend and is counted there.
        wait_until(lambda: slow.requests > 0 and slow.in_flight == 0, 10, 0.1, "the backend done")
        received = slow.requests
        if window == "0s":
            assert received == KEYS
        wait_until(lambda: promtext.total(counters(scaler), "scaler_backend_queries_total") == received,
                   5, 0.1, f"{received} backend queries counted")
        samples = counters(scaler)
        assert promtext.total(samples, "scaler_backend_queries_total", outcome="ok") == received
        assert promtext.total(samples, "scaler_grpc_requests_total", rpc="GetMetrics") == KEYS
        assert promtext.total(samples, "scaler_grpc_requests_total", rpc="GetMetrics",
                              code="DeadlineExceeded") == KEYS
        # The retries find the answers the abandoned calls left: no new query, no wait.
        start = time.monotonic()
        assert [ask(ref, 3.0) for ref in refs] == [grpc.StatusCode.OK] * KEYS
        assert time.monotonic() - start < DELAY
        assert slow.requests == received
    finally:
        slow.close()


def test_a_call_cancelled_by_the_client_is_counted_as_cancelled(vm, start_scaler):
    slow = FakePrometheus("proxy", delay=DELAY, upstream=vm.url)
    try:
        scaler, keda = start_scaler(slow.url, refresh="1m")
        ref = keda.ref("tenant-a", "cancelled", metadata("pg"))
        req = keda.metrics_request(ref, "cnpg-pg-readconnections")
        call = keda.stub.GetMetrics.future(req, timeout=10)
        wait_until(lambda: slow.in_flight == 1, 5, 0.02, "the query at the backend")
        call.cancel()
        wait_until(lambda: promtext.total(counters(scaler), "scaler_grpc_requests_total", rpc="GetMetrics",
                                          code="Canceled") == 1, 5, 0.1, "the cancelled rpc counted")
        wait_until(lambda: promtext.total(counters(scaler), "scaler_backend_queries_total", outcome="ok") == 1,
                   5, 0.1, "its query counted")
    finally:
        slow.close()
