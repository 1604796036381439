"""Operator controls in the closed loop (issue 15): VictoriaMetrics load -> `scaler serve` ->
KEDA -> HPA -> Cluster.spec.instances, with the app chart's `autoscaling.schedules` rendered into
the trigger. One scenario, windows aligned to the scaler's clock (cron has minute resolution):

  now ......... B: scale-in disabled ......... | A: floor 4 .........
  load 35 -> 5 instances; load 0 -> held at 5  | 5 -> 4 (scale-in resumes, stops at the window's floor)

Every count is read from the apiserver; the reasons from the scaler's own metrics."""

import datetime
import time

import pytest

import promtext
from rig import POLL
from scaledobject import DOWN_PERIOD, cluster_and_scaledobject
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
    35 s away (time to scale up and see the hold); window A (floor) opens at `switch`."""
    minute = now.replace(second=0, microsecond=0)
    switch = minute + datetime.timedelta(minutes=1 if now.second <= 25 else 2)
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
