"""A scaler start under a fleet (issue 29, items 1 and 6): the smoke variant of the fleet and
restart benchmarks (docs/benchmarks.md), a few hundred ScaledObjects on a debug build.

A real VictoriaMetrics holds FLEET clusters' CNPG series. A scaler starts with nothing cached and
KEDA asks for the whole fleet at once, as its scale loops do after a rollout (every ScaledObject
asked once, over two connections: the operator's and the metrics apiserver's; KEDA's 3 s HPA
deadline). The backend
queries of that burst, counted by VictoriaMetrics itself, must stay within twice a steady refresh
tick's (measured in the same run), where a scaler that answers each cold key with a query of its
own sends FLEET; and every answer must arrive before the deadline. Then the scaler restarts and the
same holds again, with the same answers."""
import asyncio
import time

import grpc
import pytest

import promtext
from cnpg_series import Backend, Cluster, Pod, render
from keda import metadata, stubs
from scaler_proc import Scaler
from testkit import wait_until
from vm import VictoriaMetrics

FLEET = 300
NAMESPACES = 10
DEADLINE = 3.0  # KEDA's metrics apiserver's deadline on the HPA path
REFRESH = 10  # seconds: no refresh tick falls inside a burst


def so(i: int) -> tuple[str, str]:
    return f"fleet-{i % NAMESPACES}", f"db-{i}"


def load_fleet(vm: VictoriaMetrics, n: int, so, sessions, ahead: int, timeout: float):
    """Clusters so(0) … so(n - 1) into `vm`, each a primary (10 sessions, not counted) and a
    standby with sessions(i) active sessions (the read load), until `ahead` seconds from now."""
    clusters = [Cluster(*so(i), [Pod(1, primary=True, backends=[Backend(10)], internal=False),
                                 Pod(2, backends=[Backend(sessions(i))], internal=False)])
                for i in range(n)]
    namespaces = "|".join(sorted({so(i)[0] for i in range(n)}))
    vm.import_and_wait(render(clusters, time.time(), back=360, ahead=ahead, step=60),
                       f'count(cnpg_pg_replication_in_recovery{{namespace=~"{namespaces}"}})',
                       expect=lambda got: got == 2 * n, timeout=timeout)


@pytest.fixture(scope="module")
def fleet_vm(tmp_path_factory):
    v = VictoriaMetrics(str(tmp_path_factory.mktemp("restart-vm"))).start()
    load_fleet(v, FLEET, so, lambda i: 1 + i % 17, ahead=1800, timeout=60)
    yield v
    v.stop()


async def burst(address: str, n: int = FLEET, so=so) -> list[tuple[float | None, str, float]]:
    """ScaledObjects so(0) … so(n - 1) asked once, all at once, alternating two connections (also
    tests/scaler/bench/restart.py's client): per call its value (None on error), status code
    name and seconds taken."""
    pb2, pb2_grpc = stubs()

    async def ask(stub, i):
        ns, name = so(i)
        ref = pb2.ScaledObjectRef(name=name, namespace=ns,
                                  scalerMetadata=metadata(name, target="5", max_replicas="10"))
        start = time.monotonic()
        call = stub.GetMetrics(pb2.GetMetricsRequest(
            scaledObjectRef=ref, metricName=f"cnpg-{name}-readconnections"), timeout=DEADLINE)
        try:
            # Bounded here too: a connection the server closed (GOAWAY) can leave a call hanging.
            resp = await asyncio.wait_for(call, DEADLINE + 5)
            return resp.metricValues[0].metricValueFloat, "OK", time.monotonic() - start
        except grpc.aio.AioRpcError as e:
            return None, e.code().name, time.monotonic() - start
        except asyncio.TimeoutError:
            return None, "CLIENT_HUNG", time.monotonic() - start

    async with grpc.aio.insecure_channel(address) as operator, \
            grpc.aio.insecure_channel(address) as adapter:
        stubs_ = [pb2_grpc.ExternalScalerStub(ch) for ch in (operator, adapter)]
        return await asyncio.gather(*(ask(stubs_[i % 2], i) for i in range(n)))


def backend_queries(scaler: Scaler) -> float:
    return promtext.total(promtext.scrape(f"{scaler.admin}/metrics"), "scaler_backend_queries_total")


def ticks(scaler: Scaler) -> float:
    return promtext.total(promtext.scrape(f"{scaler.admin}/metrics"), "scaler_refresh_duration_seconds_count")


def counts(scaler: Scaler) -> tuple[float, float]:
    """(refresh ticks ended, backend queries sent) from one scrape of the scaler's page, cut to
    those two families (a page of thousands of ScaledObjects takes a second to parse whole)."""
    samples = promtext.scrape(f"{scaler.admin}/metrics",
                              families=("scaler_refresh_duration_seconds", "scaler_backend_queries"))
    return (promtext.total(samples, "scaler_refresh_duration_seconds_count"),
            promtext.total(samples, "scaler_backend_queries_total"))


def after_a_tick(scaler: Scaler, refresh: float) -> tuple[float, float]:
    """counts() read as soon as a refresh tick has ended, before the next one starts: the queries
    of whole ticks only. A count read at any moment can fall inside a tick (three ticks of 3,000
    ScaledObjects once measured 37.5 queries each against a pass of 30)."""
    ended, _ = counts(scaler)
    now = (ended, 0.0)

    def next_tick_ended() -> bool:
        nonlocal now
        now = counts(scaler)
        return now[0] > ended

    wait_until(next_tick_ended, 3 * refresh, 0.02, "a refresh tick")
    return now


def steady_tick(scaler: Scaler, refresh: float, over: int = 1) -> float:
    """The backend queries of a whole refresh tick, averaged over `over` ticks (the scaler counts
    what the backend received: cold_start() below checks it against VictoriaMetrics' own count)."""
    t0, q0 = after_a_tick(scaler, refresh)
    for _ in range(over):
        t1, q1 = after_a_tick(scaler, refresh)
    return (q1 - q0) / (t1 - t0)


def cold_start(fleet_vm, tmp_path, *extra) -> tuple[Scaler, float, list]:
    """Starts a scaler, sends the burst; returns it, the burst's VictoriaMetrics queries, the answers."""
    before = fleet_vm.query_requests()
    scaler = Scaler(str(tmp_path), fleet_vm.url, "--log-level", "warn", *extra, refresh=f"{REFRESH}s").start()
    started = time.monotonic()
    answers = asyncio.run(burst(scaler.address))
    assert time.monotonic() - started < REFRESH / 2, "the burst ran into a refresh tick"
    queries = fleet_vm.query_requests() - before
    # The scaler counts what VictoriaMetrics received.
    assert backend_queries(scaler) == queries
    late = [a for a in answers if a[1] != "OK" or a[2] >= DEADLINE]
    assert not late, f"{len(late)} of {len(answers)} answers failed or missed the deadline: {late[:5]}"
    return scaler, queries, [a[0] for a in answers]


def test_a_start_under_a_fleet_costs_batched_queries_and_answers_everyone_in_time(fleet_vm, tmp_path):
    scaler, first, values = cold_start(fleet_vm, tmp_path)
    try:
        # A steady refresh: one tick re-evaluating the whole fleet, batched.
        before_tick = ticks(scaler)
        wait_until(lambda: ticks(scaler) > before_tick, 2 * REFRESH, 0.2, "a refresh tick")
        q0 = fleet_vm.query_requests()
        before_tick = ticks(scaler)
        wait_until(lambda: ticks(scaler) > before_tick, 2 * REFRESH, 0.2, "another refresh tick")
        steady = fleet_vm.query_requests() - q0
    finally:
        scaler.stop()
    assert 0 < steady < FLEET / 20, f"a steady tick cost {steady} queries"
    assert first <= 2 * steady, f"start: {first} backend queries for {FLEET} ScaledObjects, a tick {steady}"

    # The restart: the same burst, the same cost, the same answers.
    scaler, again, values_again = cold_start(fleet_vm, tmp_path)
    scaler.stop()
    assert again <= 2 * steady, f"restart: {again} backend queries for {FLEET} ScaledObjects, a tick {steady}"
    assert values_again == values
    print(f"{FLEET} ScaledObjects: start {first:.0f} queries, restart {again:.0f}, steady tick {steady:.0f}")


def test_without_the_window_a_start_costs_one_query_per_scaledobject(fleet_vm, tmp_path):
    """The baseline the window removes (and proof the burst above is one that would cost FLEET)."""
    scaler, queries, _ = cold_start(fleet_vm, tmp_path, "--cold-batch-window", "0s")
    scaler.stop()
    assert queries >= FLEET * 0.9, f"{queries} queries"
