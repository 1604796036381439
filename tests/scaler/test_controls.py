"""Operator controls (`schedules`, `scaleIn`) on the real scaler and VictoriaMetrics.

The base data set's tenant-a/pg has 3 instance series (the current count in metrics topology)
and 13 active sessions on its replicas. The scaler evaluates schedules at its own clock, so the
windows here are built around the time the test runs."""
import datetime
import zoneinfo

import requests

import promtext
from keda import metadata


def reason_of(scaler, namespace, so, cluster="pg"):
    samples = promtext.parse(requests.get(f"{scaler.admin}/metrics", timeout=2).text)
    labels = dict(namespace=namespace, scaledobject=so, cluster=cluster)
    return {l["reason"] for l, v in promtext.select(samples, "scaler_decision_reason", **labels) if v == 1}


def window_open_now(zone: str, floor: int, minutes_ago: int = 2, length: str = "10m") -> str:
    """A daily window that opened `minutes_ago` minutes ago in `zone`'s wall-clock time."""
    start = datetime.datetime.now(zoneinfo.ZoneInfo(zone)) - datetime.timedelta(minutes=minutes_ago)
    return f"{start.minute} {start.hour} * * * for {length} floor {floor} in {zone}"


def test_an_open_window_raises_the_floor_and_says_schedule(scaler, keda):
    # Load 13 / target 20 asks for 1 + 1 = 2; the open window asks for 5.
    md = metadata(target="20", schedules=window_open_now("UTC", 5))
    assert keda.desired(keda.ref("tenant-a", "so-sched-open", md), 20) == 5
    assert reason_of(scaler, "tenant-a", "so-sched-open") == {"schedule"}


def test_the_window_is_read_in_its_time_zone(scaler, keda):
    # 02:00 ago in Kolkata's wall clock (UTC+05:30) is not 02:00 ago in UTC.
    kolkata = window_open_now("Asia/Kolkata", 5)
    md = metadata(target="20", schedules=kolkata)
    assert keda.desired(keda.ref("tenant-a", "so-sched-tz", md), 20) == 5
    utc = kolkata.replace("in Asia/Kolkata", "in UTC")
    md = metadata(target="20", schedules=utc)
    assert keda.desired(keda.ref("tenant-a", "so-sched-utc", md), 20) == 2
    assert reason_of(scaler, "tenant-a", "so-sched-utc") == {"load"}


def test_a_closed_window_changes_nothing_and_the_load_above_a_floor_decides(scaler, keda):
    # Opened 30 minutes ago for 10 minutes: closed.
    closed = window_open_now("UTC", 5, minutes_ago=30)
    assert keda.desired(keda.ref("tenant-a", "so-sched-closed", metadata(target="20", schedules=closed)), 20) == 2
    # Load 13 / target 2 asks for 1 + 7 = 8, above the window's 5.
    md = metadata(target="2", schedules=window_open_now("UTC", 5))
    assert keda.desired(keda.ref("tenant-a", "so-sched-load", md), 2) == 8
    assert reason_of(scaler, "tenant-a", "so-sched-load") == {"load"}


def test_a_window_floor_stops_at_max_replicas(scaler, keda):
    # Metadata refuses a floor above maxReplicas; the quorum cannot lower the ceiling either,
    # so the window's 6 with maxReplicas 6 and load asking 2 gives 6.
    md = metadata(target="20", max_replicas="6", schedules=window_open_now("UTC", 6))
    assert keda.desired(keda.ref("tenant-a", "so-sched-max", md), 20) == 6


def test_scale_in_disabled_holds_the_current_count(scaler, keda):
    # Load asks for 2; 3 instances exist: held at 3, the HPA stays active.
    md = metadata(target="20", scaleIn="disabled")
    ref = keda.ref("tenant-a", "so-scalein-off", md)
    assert keda.desired(ref, 20) == 3
    assert keda.is_active(ref) is True
    assert reason_of(scaler, "tenant-a", "so-scalein-off") == {"scale-in-hold"}
    # Growth still goes through: load 13 / target 2 asks for 8.
    md = metadata(target="2", scaleIn="disabled")
    assert keda.desired(keda.ref("tenant-a", "so-scalein-grow", md), 2) == 8
    # Enabled (the default spelled out) scales in.
    md = metadata(target="20", scaleIn="enabled")
    assert keda.desired(keda.ref("tenant-a", "so-scalein-on", md), 20) == 2


def test_a_scale_in_window_holds_only_while_open(scaler, keda):
    start = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(minutes=2)
    open_window = f"{start.minute} {start.hour} * * * for 10m scaleIn disabled"
    md = metadata(target="20", schedules=open_window)
    assert keda.desired(keda.ref("tenant-a", "so-scalein-window", md), 20) == 3
    assert reason_of(scaler, "tenant-a", "so-scalein-window") == {"scale-in-hold"}
    earlier = start - datetime.timedelta(minutes=30)
    closed_window = f"{earlier.minute} {earlier.hour} * * * for 10m scaleIn disabled"
    md = metadata(target="20", schedules=closed_window)
    assert keda.desired(keda.ref("tenant-a", "so-scalein-closed", md), 20) == 2
