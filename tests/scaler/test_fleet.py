"""A held fleet (issue 42, items 1 and 5): the smoke variant of the 50,000-ScaledObject benchmarks
(tests/scaler/bench/memory.py and backend_cost.py, docs/benchmarks.md) at a size that runs in
under a minute on a debug build: FLEET ScaledObjects, ten per namespace as on issue 42's fleet.

A real VictoriaMetrics holds the fleet's CNPG series. A scaler with the package's allocator setting
is asked for every ScaledObject (test_restart.py's client), then for every one again after a
refresh tick has re-evaluated them all. Asserted: every answer is the count the series imply (on
both rounds); a steady refresh tick costs at most 1.2 times one pass (every cluster asked once
in batches of the default 100: FLEET / 100 queries, counted by the scaler, whose count
test_restart.py checks against VictoriaMetrics' own); and the peak memory per held ScaledObject stays under the bound that keeps 50,000 under
128 MiB in the release build (2.1 KiB), with room for this debug build and this small fleet."""
import asyncio
import math

import pytest

from scaler_proc import PACKAGE_ENV, Scaler
from test_restart import after_a_tick, burst, load_fleet, steady_tick
from vm import VictoriaMetrics

FLEET = 3000
PER_NAMESPACE = 10
REFRESH = 2  # seconds
BATCH = 100  # the scaler's default --observe-batch-size
TARGET = 5
CHUNK = 250
ROUNDS = 6
# What this debug build holds per ScaledObject at this size, measured 5.6–10.7 KiB (VmRSS after a
# round, less VmRSS at start, over FLEET; allocator and tables' fixed growth included, which is why
# it is far above the release build's 1.4 KiB at 50,000): the bound catches a per-key cost grown by half.
HELD_KIB_PER_OBJECT = 15
# A cost per call or per tick never given back grows VmRSS by the round: 400 bytes per call is
# 6 MiB over five rounds; the rounds' own spread was up to 6.4 MiB between any two, 1.6 first to last.
GROWTH_KIB = 6 * 1024


def so(i: int) -> tuple[str, str]:
    return f"held-{i // PER_NAMESPACE}", f"db-{i}"


def sessions(i: int) -> int:
    """Active sessions on ScaledObject i's standby: its read load."""
    return 1 + i % 17


def expected(i: int) -> float:
    """The metric value KEDA should get: desired × target, desired = 1 primary + ceil(load /
    target) standbys within the floor 2 and the trigger's maxReplicas 10 (docs/scaler.md)."""
    return TARGET * min(10, max(2, 1 + math.ceil(sessions(i) / TARGET)))


@pytest.fixture(scope="module")
def fleet_vm(tmp_path_factory):
    v = VictoriaMetrics(str(tmp_path_factory.mktemp("fleet-vm"))).start()
    load_fleet(v, FLEET, so, sessions, ahead=600, timeout=120)
    yield v
    v.stop()


def status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def ask_all(scaler) -> list:
    """Every ScaledObject once, CHUNK at a time (a KEDA connection's streams, not the whole fleet
    in flight: the smoke measures what is held, not a burst's buffers)."""
    out = []
    for lo in range(0, FLEET, CHUNK):
        out += asyncio.run(burst(scaler.address, min(CHUNK, FLEET - lo), lambda i, lo=lo: so(lo + i)))
    return out


def test_a_held_fleet_answers_right_refreshes_in_one_pass_and_stays_small(fleet_vm, tmp_path):
    scaler = Scaler(str(tmp_path), fleet_vm.url, "--log-level", "warn", refresh=f"{REFRESH}s",
                    env=PACKAGE_ENV).start()
    try:
        pid = scaler.proc.pid
        rss_start = status_kib(pid, "VmRSS")
        want = [expected(i) for i in range(FLEET)]

        first = ask_all(scaler)
        wrong = [(so(i), a, want[i]) for i, a in enumerate(first) if a[1] != "OK" or a[0] != want[i]]
        assert not wrong, f"{len(wrong)} of {FLEET} first answers wrong: {wrong[:5]}"

        # Refresh ticks re-evaluating all of it (a key is due once its answer is half an interval
        # old), counted over three whole ticks.
        steady = steady_tick(scaler, REFRESH, over=3)

        # Rounds of KEDA's polling, each after a refresh tick: every answer right each time, and
        # what the scaler holds stops growing once every key is held (a cost per call or per tick
        # that is never given back would grow it by the round).
        held = []
        for _ in range(ROUNDS):
            again = ask_all(scaler)
            wrong = [(so(i), a, want[i]) for i, a in enumerate(again) if a[1] != "OK" or a[0] != want[i]]
            assert not wrong, f"{len(wrong)} of {FLEET} answers after a refresh wrong: {wrong[:5]}"
            held.append(status_kib(pid, "VmRSS"))
            after_a_tick(scaler, REFRESH)
        peak = status_kib(pid, "VmHWM")
    finally:
        scaler.stop()

    one_pass = math.ceil(FLEET / BATCH)
    per_object = (max(held) - rss_start) / FLEET
    print(f"{FLEET} ScaledObjects: a steady tick {steady:.1f} queries (one pass {one_pass}); VmRSS at "
          f"start {rss_start / 1024:.1f} MiB, after each round {[round(h / 1024, 1) for h in held]} MiB "
          f"({per_object:.2f} KiB per held ScaledObject), VmHWM {peak / 1024:.1f} MiB")
    assert 0 < steady <= 1.2 * one_pass, f"a steady tick cost {steady} queries, one pass is {one_pass}"
    assert per_object <= HELD_KIB_PER_OBJECT, f"{per_object:.2f} KiB per held ScaledObject"
    assert held[-1] - held[0] <= GROWTH_KIB, f"VmRSS grew by the round: {held} KiB"
