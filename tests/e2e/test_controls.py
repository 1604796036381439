"""Operator controls in the closed loop (issue 15): VictoriaMetrics load -> `scaler serve` ->
KEDA -> HPA -> Cluster.spec.instances, with the app chart's values rendered into the trigger.

Signals: a Cluster whose idle client sessions fill max_connections scales on the connection-usage
signal (`autoscaling.signals`) while its active sessions ask for the floor; a Cluster scaling on
CPU gets a standby that restores (WAL receiver down) at high CPU for 20 s, and the count does not
run away. Schedules, in one scenario with windows aligned to the scaler's clock (cron has minute
resolution):

  now ......... B: scale-in disabled ......... | A: floor 4 .........
  load 35 -> 5 instances; load 0 -> held at 5  | 5 -> 4 (scale-in resumes, stops at the window's floor)

Every count is read from the apiserver; the reasons from the scaler's own metrics."""

import datetime
import json
import os
import subprocess
import time

import pytest

import promtext
from rig import POLL
from scaledobject import DOWN_PERIOD, MAX, TARGET, cluster_and_scaledobject
from testkit import wait_until

NS = "tenant-controls"
NAME = "pg"
CNPG = "postgresql.cnpg.io/v1"
HPA = "autoscaling/v2"
SCHEDULE_FLOOR = 4


def instances(rig) -> int:
    return rig.kube.get(CNPG, "Cluster", NAME, NS)["spec"].get("instances")


def reason(scaler) -> set[str]:
    samples = promtext.scrape(f"{scaler.admin}/metrics", timeout=2)
    return {l["reason"] for l, v in promtext.select(samples, "scaler_decision_reason", namespace=NS,
                                                    scaledobject=NAME) if v == 1}


def hold(rig, seconds: float, expected: int) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert instances(rig) == expected, f"instances moved off {expected} during a hold"
        time.sleep(0.5)


def windows(now: datetime.datetime) -> tuple[datetime.datetime, list[dict]]:
    """Window B (scale-in off) opened this minute and closes at the boundary `switch`, at least
    50 s away (time to scale up on a busy machine and see the hold); window A (floor) opens at
    `switch`."""
    minute = now.replace(second=0, microsecond=0)
    switch = minute + datetime.timedelta(minutes=1 if now.second <= 10 else 2)
    length = int((switch - minute).total_seconds() // 60)
    cron = lambda t: f"{t.minute} {t.hour} * * *"  # noqa: E731
    return switch, [
        {"cron": cron(minute), "duration": f"{length}m", "scaleIn": "disabled", "timeZone": "UTC"},
        {"cron": cron(switch), "duration": "1m", "floor": SCHEDULE_FLOOR},
    ]


@pytest.fixture(scope="module")
def loop(rig, scaler):
    rig.kube.ensure_namespace(NS)
    rig.feeder.set(NS, NAME, connections=35, lag_seconds=0, wal_bytes_per_s=20000)
    switch, schedule = windows(datetime.datetime.now(datetime.timezone.utc))
    for obj in cluster_and_scaledobject(rig, scaler.address, NS, NAME, schedules=schedule):
        rig.kube.apply(obj)
    so = rig.kube.get("keda.sh/v1alpha1", "ScaledObject", NAME, NS)
    assert "scaleIn disabled" in so["spec"]["triggers"][0]["metadata"]["schedules"]
    return rig, switch


def test_a_scale_in_window_holds_then_a_floor_window_takes_over(loop, scaler):
    rig, switch = loop
    # 35 sessions / target 10 -> 1 + 4 = 5 (= max): growth goes through the scale-in window.
    wait_until(lambda: instances(rig) == 5, timeout=40, interval=POLL, what="spec.instances to reach 5")
    rig.feeder.set(NS, NAME, connections=0)
    wait_until(lambda: reason(scaler) == {"scale-in-hold"}, timeout=10, interval=POLL,
               what="the scaler to hold (reason scale-in-hold)")
    # Without the window this is 5 -> 2 at one pod per DOWN_PERIOD; held at 5 instead.
    until_switch = (switch - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    assert until_switch > 2 * DOWN_PERIOD, f"only {until_switch:.0f} s left in the scale-in window"
    hold(rig, min(until_switch - 2, 3 * DOWN_PERIOD), 5)

    # At the switch the scale-in window closes and the floor window opens: down to 4, no further.
    wait_until(lambda: instances(rig) == SCHEDULE_FLOOR,
               timeout=max(until_switch, 0) + 30, interval=POLL, what="spec.instances down to the floor 4")
    assert reason(scaler) == {"schedule"}
    hold(rig, 2 * DOWN_PERIOD, SCHEDULE_FLOOR)
    history = [v for t, v in rig.cnpg.series(NS, NAME) if v is not None]
    assert min(history[history.index(5):]) == SCHEDULE_FLOOR, history


SIGNALS_NS = "tenant-signals"


def count(rig, name) -> int:
    return rig.kube.get(CNPG, "Cluster", name, SIGNALS_NS)["spec"].get("instances")


def explain(rig, name, *flags) -> dict:
    r = subprocess.run([rig.scaler_bin, "explain", "--prometheus-url", rig.vm.url, "--namespace", SIGNALS_NS,
                        "--cluster", name, "--max-replicas", str(MAX), "--max-sync-replicas", "1",
                        "--topology", "kube", "--output", "json", *flags],
                       capture_output=True, text=True, env={**os.environ, "KUBECONFIG": str(rig.cp.kubeconfig)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def signals_loop(rig, scaler):
    rig.kube.ensure_namespace(SIGNALS_NS)
    # "usage": no active sessions, 120 idle client sessions over max_connections 100.
    rig.feeder.set(SIGNALS_NS, "usage", connections=0, idle_connections=120, max_connections=100,
                   wal_bytes_per_s=20000)
    # "warm": 150m of read CPU over the streaming standbys; every standby the HPA adds restores
    # for 20 s at 1000m first.
    rig.feeder.set(SIGNALS_NS, "warm", read_cpu_millicores=150, restore_cpu_millicores=1000,
                   warmup_seconds=20, warmup_from_pod=3, wal_bytes_per_s=20000)
    objs = cluster_and_scaledobject(rig, scaler.address, SIGNALS_NS, "usage",
                                    signals=[{"metric": "ReadConnectionUsage", "target": 50}])
    objs += cluster_and_scaledobject(rig, scaler.address, SIGNALS_NS, "warm",
                                     metric="ReadCPUUtilization", target=100)
    for obj in objs:
        rig.kube.apply(obj)
    return rig


def test_connection_usage_wins_over_idle_active_connections(signals_loop):
    rig = signals_loop
    # Active sessions ask for the floor; usage (120 idle + 3 per standby) / 100 x 100 % over a
    # target of 50 % asks for 1 + 3 = 4, whatever the number of standbys they spread over.
    wait_until(lambda: count(rig, "usage") == 4, timeout=60, interval=POLL, what="usage to scale to 4")
    e = explain(rig, "usage", "--target", str(TARGET), "--signals", "ReadConnectionUsage=50")
    assert (e["decision"]["signal"], e["decision"]["reason"], e["decision"]["desired"]) == (
        "ReadConnectionUsage", "load", 4), e["summary"]
    hold_at(rig, "usage", 6, 4)


def test_a_restoring_replica_is_not_read_as_load(signals_loop):
    rig = signals_loop
    # 150m over one standby / 100 -> 1 + 2 = 3 instances. The new standby restores for 20 s at
    # 1000m: read as load, that is 1150m -> max 5 at once; left out (for the 5-minute rate
    # window), the count stays at 3.
    wait_until(lambda: count(rig, "warm") == 3, timeout=60, interval=POLL, what="warm to scale to 3")
    e = explain(rig, "warm", "--metric", "ReadCPUUtilization", "--target", "100")
    assert e["warming_replicas"] == 1, e
    hold_at(rig, "warm", 25, 3)
    history = [v for _, v in rig.cnpg.series(SIGNALS_NS, "warm") if v is not None]
    assert max(history) == 3, history


def hold_at(rig, name, seconds, expected) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert count(rig, name) == expected, f"{name} moved off {expected} during a hold"
        time.sleep(0.5)
