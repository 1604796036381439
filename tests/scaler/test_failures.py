"""A backend that is down, slow or returns garbage gives an error within a bounded time:
never a made-up number, never 0. Cached answers expire after the staleness bound."""
import time

import grpc
import pytest

from fake_backend import MODES, FakePrometheus
from keda import code_of, metadata
from testkit import free_port, wait_until
from vm import VictoriaMetrics

FAILURE_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
BOUND = 2.5  # seconds: default --query-timeout 2s plus slack, inside the HPA path's 3 s


def timed_code(call):
    t0 = time.monotonic()
    code = code_of(call)
    return code, time.monotonic() - t0


def assert_fails_fast(keda, ref):
    for rpc, call in {
        "GetMetrics": lambda: keda.metrics(ref, "cnpg-pg-readconnections", timeout=10),
        "IsActive": lambda: keda.is_active(ref, timeout=10),
    }.items():
        code, took = timed_code(call)
        assert code in FAILURE_CODES, f"{rpc} answered {code}"
        assert took <= BOUND, f"{rpc} took {took:.2f}s"


def test_backend_down(start_scaler):
    _, keda = start_scaler(f"http://127.0.0.1:{free_port()}")
    assert_fails_fast(keda, keda.ref("tenant-a", "so-pg", metadata(target="5")))


@pytest.mark.parametrize("mode", ["hang", *MODES])
def test_backend_slow_or_garbage(start_scaler, mode):
    fake = FakePrometheus(mode)
    try:
        _, keda = start_scaler(fake.url)
        assert_fails_fast(keda, keda.ref("tenant-a", "so-pg", metadata(target="5")))
        assert fake.requests > 0, "the scaler never asked the backend"
    finally:
        fake.close()


def test_get_metric_spec_touches_no_backend(start_scaler):
    fake = FakePrometheus("status-error")
    try:
        _, keda = start_scaler(fake.url)
        for i in range(5):
            keda.spec(keda.ref("tenant-a", f"so-{i}", metadata(target="5")))
        assert fake.requests == 0
    finally:
        fake.close()


def test_stale_answers_become_unavailable_then_recover(tmp_path, start_scaler):
    vm = VictoriaMetrics(str(tmp_path / "vm")).start()
    try:
        _stale_then_recover(vm, start_scaler)
    finally:
        vm.stop()


def _stale_then_recover(vm, start_scaler):
    import scenarios
    from cnpg_series import render

    vm.import_and_wait(render([scenarios.TENANT_A_PG], time.time()),
                       'count(cnpg_pg_replication_in_recovery{namespace="tenant-a"})', lambda n: n == 3)
    staleness = 4.0
    _, keda = start_scaler(vm.url, "--staleness", f"{staleness:g}s")
    ref = keda.ref("tenant-a", "so-pg", metadata(target="5"))
    good = keda.metrics(ref, "cnpg-pg-readconnections").metricValues[0].metricValueFloat
    assert good == 20

    vm.stop()
    down_at = time.monotonic()
    first_unavailable = None
    while time.monotonic() - down_at < staleness + 6:
        try:
            value = keda.metrics(ref, "cnpg-pg-readconnections", timeout=5).metricValues[0].metricValueFloat
            assert value == good, f"served {value} while the backend is down (last good {good})"
            assert first_unavailable is None, "served a value again after UNAVAILABLE with the backend still down"
            assert time.monotonic() - down_at <= staleness + 1, "served a value past the staleness bound"
        except grpc.RpcError as e:
            assert e.code() in FAILURE_CODES, e
            first_unavailable = first_unavailable or time.monotonic()
        time.sleep(0.2)
    assert first_unavailable is not None, "never became UNAVAILABLE with the backend down"
    assert code_of(lambda: keda.is_active(ref)) in FAILURE_CODES
    # GetMetricSpec still answers: it never depends on the backend.
    assert keda.spec(ref, timeout=1).metricSpecs[0].metricName == "cnpg-pg-readconnections"

    # Same port, same data directory: answers come back without restarting the scaler.
    vm.start()
    wait_until(lambda: keda.metrics(ref, "cnpg-pg-readconnections").metricValues[0].metricValueFloat == good,
               15, 0.3, "answers after the backend came back")
