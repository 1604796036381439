"""`scaler backtest` on a real VictoriaMetrics holding a known day of history.

The history (one CNPG cluster, a primary and two replicas, 60 s samples on 2026-11-01 UTC) has a
designed load shape: 20 active connections, 240 from 08:00 to 12:00, 20 again, and no series at
all from 18:00 to 18:30. At target 50 the scaler recommends 1 + ceil(load / 50): 2, then 6. The
simulated HPA's counts are asserted minute by minute around each change."""
import csv
import json
import math
import os
import pathlib
import re
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET

import pytest

from cnpg_series import _labels
from scaler_proc import scaler_binary
from testkit import REPO
from vm import VictoriaMetrics

DAY = 1_793_491_200  # 2026-11-01T00:00:00Z
STEP = 60
NAMESPACE, CLUSTER = "backtest", "shop"
FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "backtest-scaledobject.yaml"
GAP = (DAY + 18 * 3600, DAY + 18 * 3600 + 1800)


def hms(h: int, m: int = 0, s: int = 0) -> int:
    return DAY + h * 3600 + m * 60 + s


def load_at(t: int) -> float:
    return 240.0 if hms(8) <= t < hms(12) else 20.0


def history() -> str:
    """CNPG series as a PodMonitor scrape has them: in_recovery for every pod, the application's
    active sessions on replica shop-2 (replica shop-3 idle), and CNPG's own sessions, which the
    scaler must not count."""
    lines = []
    for t in range(DAY, DAY + 86_400 + STEP, STEP):
        if GAP[0] <= t < GAP[1]:
            continue
        ms = t * 1000
        for n in (1, 2, 3):
            scrape = {"namespace": NAMESPACE, "pod": f"{CLUSTER}-{n}", "job": f"{NAMESPACE}/{CLUSTER}",
                      "instance": f"10.0.0.{n}:9187"}
            lines.append(f"cnpg_pg_replication_in_recovery{_labels(**scrape)} {0 if n == 1 else 1} {ms}")
            sessions = [("app", "active", 25 if n == 1 else 0), ("postgres", "active", 2),
                        ("cnpg_metrics_exporter", "active", 1)]
            if n == 2:
                sessions.append(("app", "active", load_at(t)))
            for usename, state, value in sessions:
                if value:
                    labels = _labels(**scrape, datname="app", usename=usename, application_name="web", state=state)
                    lines.append(f"cnpg_backends_total{labels} {value} {ms}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def history_vm(tmp_path_factory):
    v = VictoriaMetrics(str(tmp_path_factory.mktemp("backtest-vm"))).start()
    probe = f'count(cnpg_pg_replication_in_recovery{{namespace="{NAMESPACE}"}} @ {hms(23, 59)})'
    v.import_and_wait(history(), probe, expect=lambda n: n == 3)
    yield v
    v.stop()


def backtest(vm_url: str, *args: str, timeout=120, namespace=NAMESPACE) -> subprocess.CompletedProcess:
    ns = ["--namespace", namespace] if namespace else []
    return subprocess.run([scaler_binary(), "backtest", "--prometheus-url", vm_url, *ns, *args],
                          capture_output=True, text=True, timeout=timeout)


def run_day(vm_url: str, out: pathlib.Path, scaled_object: pathlib.Path, *extra: str, step=STEP) -> dict[int, dict]:
    result = backtest(vm_url, "--scaled-object", str(scaled_object), "--from", str(DAY),
                      "--to", str(DAY + 86_400), "--step", f"{step}s", "--csv", str(out / "day.csv"),
                      "--json", str(out / "day.json"), "--plot", str(out / "day.svg"), *extra)
    assert result.returncode == 0, result.stderr
    with open(out / "day.csv", newline="") as f:
        return {int(r["unix_seconds"]): r for r in csv.DictReader(f)}


def test_a_day_replays_into_table_json_and_plot_in_seconds(history_vm, tmp_path):
    started = time.monotonic()
    rows = run_day(history_vm.url, tmp_path, FIXTURE)
    elapsed = time.monotonic() - started
    print(f"a day at {STEP} s: {len(rows)} evaluations in {elapsed:.2f} s")
    assert elapsed < 30, f"{elapsed:.1f} s"
    assert len(rows) == 86_400 // STEP + 1
    sim = lambda t: int(rows[t]["simulated"])  # noqa: E731
    rec = lambda t: rows[t]["recommended"]  # noqa: E731
    # Loads and recommendations follow the designed shape; CNPG's own sessions do not count.
    assert (float(rows[hms(7, 59)]["load"]), rec(hms(7, 59)), rows[hms(7, 59)]["reason"]) == (20.0, "2", "load")
    assert (float(rows[hms(8)]["load"]), rec(hms(8)), rows[hms(8)]["reason"]) == (240.0, "6", "load")
    assert rec(hms(12)) == "2"
    assert all(rows[t]["observed"] == "3" for t in rows if not GAP[0] <= t < GAP[1] + 120)
    # The new HPA starts at the observed 3; its first 300 s scale-down window holds 3.
    assert [sim(hms(0, m)) for m in range(7)] == [3, 3, 3, 3, 3, 2, 2]
    # The step up is followed at once (+4 pods or +100 % per 15 s: 2 → 6 in one sync).
    assert [sim(hms(7, 59)), sim(hms(8))] == [2, 6]
    # The step down waits out the 300 s window: the answer of 6 at 11:59 is held by the syncs up to
    # 11:59:45; the sync at 12:04:45 is the first with no 6 in its window.
    assert [sim(hms(12, m)) for m in range(7)] == [6, 6, 6, 6, 6, 2, 2]
    # The gap: errors naming the cause, the simulated count held.
    inside = rows[hms(18, 10)]
    assert (inside["recommended"], inside["observed"], inside["simulated"]) == ("", "", "2")
    assert "no instance" in inside["error"].lower() or "instances" in inside["error"], inside["error"]
    assert rows[hms(19)]["error"] == "" and sim(hms(19)) == 2

    document = json.loads((tmp_path / "day.json").read_text())
    assert (document["namespace"], document["cluster"], document["scaled_object"]) == (NAMESPACE, CLUSTER, "shop")
    assert document["hpa"]["behavior"]["scale_down"]["stabilization_window_seconds"] == 300
    assert document["hpa"]["min_replicas"] == 2 and document["hpa"]["max_replicas"] == 8
    assert len(document["rows"]) == len(rows)
    assert document["rows"][480]["time"] == "2026-11-01T08:00:00Z" and document["rows"][480]["simulated"] == 6
    svg = (tmp_path / "day.svg").read_text()
    assert svg.startswith("<svg") and "simulated (HPA)" in svg and "observed instances" in svg
    assert not list(tmp_path.glob(".*.partial")), "temporary files are renamed or removed"


def test_without_behavior_the_controllers_fixed_rules_apply(history_vm, tmp_path):
    """A ScaledObject without `advanced`: KEDA's HPA has no behavior, so the controller doubles at
    most (at least to 4) per sync and scales down to the highest proposal of the last 300 s."""
    text = FIXTURE.read_text()
    start, end = text.index("  advanced:"), text.index("  triggers:")
    so = tmp_path / "plain.yaml"
    so.write_text(text[:start] + text[end:])
    rows = run_day(history_vm.url, tmp_path, so)
    sim = lambda t: int(rows[t]["simulated"])  # noqa: E731
    assert [sim(hms(7, 59)), sim(hms(8)), sim(hms(8, 1))] == [2, 4, 6]
    # The last 6 was proposed at 11:59:45; the window counts it up to 12:04:45 inclusive.
    assert [sim(hms(12, m)) for m in range(7)] == [6, 6, 6, 6, 6, 2, 2]
    assert json.loads((tmp_path / "day.json").read_text())["hpa"]["behavior"] is None


def test_schedule_windows_replay_at_each_evaluations_time(history_vm, tmp_path):
    """A schedule window (trigger metadata, like every control) is evaluated at each evaluation's
    time, not at the time the backtest runs: the floor of 4 holds from 14:00 to 16:00 UTC."""
    so = tmp_path / "scheduled.yaml"
    so.write_text(FIXTURE.read_text().replace(
        'maxReplicas: "8"', 'maxReplicas: "8"\n        schedules: "0 14 * * * for 2h floor 4 in UTC"'))
    rows = run_day(history_vm.url, tmp_path, so)
    assert [(rows[t]["recommended"], rows[t]["reason"]) for t in (hms(13, 59), hms(14), hms(15, 59), hms(16))] == \
        [("2", "load"), ("4", "schedule"), ("4", "schedule"), ("2", "load")]
    sim = lambda t: int(rows[t]["simulated"])  # noqa: E731
    assert [sim(hms(13, 59)), sim(hms(14)), sim(hms(16, 4)), sim(hms(16, 5))] == [2, 4, 4, 2]


def test_chunked_range_queries_replay_like_one(history_vm, tmp_path):
    """At a 5 s step the day is 17,281 evaluations: two range queries (10,000 per query, below
    VictoriaMetrics' 30,000 points per series). The samples change only on the minute, so the
    HPA syncs (every 15 s in both runs) see the same answers: the simulated counts must match the
    one-query 60 s run at every minute, with no evaluation lost or repeated at the chunk border."""
    coarse = run_day(history_vm.url, tmp_path, FIXTURE)
    fine_dir = tmp_path / "fine"
    fine_dir.mkdir()
    before = history_vm.query_requests()
    fine = run_day(history_vm.url, fine_dir, FIXTURE, step=5)
    assert history_vm.query_requests() - before == 2, "two range queries"
    assert sorted(fine) == list(range(DAY, DAY + 86_400 + 1, 5))
    differ = [t for t in coarse if not GAP[0] - 300 <= t < GAP[1] + 300
              and fine[t]["simulated"] != coarse[t]["simulated"]]
    assert not differ, [(t - DAY, fine[t], coarse[t]) for t in differ[:3]]
    border = DAY + 10_000 * 5
    assert fine[border - 5]["error"] == fine[border]["error"] == "" and fine[border]["recommended"] == "2"


def helm_binary() -> str:
    return os.path.join(os.environ.get("COZY_TOOLS", os.path.expanduser("~/.cache/cozy-autoscaling")), "helm3", "helm")


def test_the_example_charts_rendered_behaviour_paces_the_scale_down(history_vm, tmp_path):
    """The ScaledObject exactly as helm renders the example chart: scale-up window 300 s,
    scale-down window 1800 s and then one pod per 600 s, tolerance 0."""
    helm = helm_binary()
    if not os.path.exists(helm):
        pytest.skip(f"helm is not installed at {helm}: run tests/lib/setup.sh")
    rendered = subprocess.run(
        [helm, "template", CLUSTER, str(REPO / "charts" / "example-postgres"), "--kube-version", "1.35.0",
         "--api-versions", "keda.sh/v1alpha1", "--set", "autoscaling.enabled=true",
         "--set", "autoscaling.target=50"],
        capture_output=True, text=True, check=True, env=dict(os.environ, HOME=str(tmp_path)))
    so = tmp_path / "rendered.yaml"
    so.write_text(rendered.stdout)
    rows = run_day(history_vm.url, tmp_path, so, "--name", CLUSTER)
    sim = lambda t: int(rows[t]["simulated"])  # noqa: E731
    # Up: the 300 s scale-up window holds 2 until the 08:04:45 sync, whose window has only 6s.
    assert [sim(hms(8, m)) for m in range(6)] == [2, 2, 2, 2, 2, 6]
    # Down: 1800 s after the last 6 (11:59:45), then one pod per 600 s.
    assert [sim(t) for t in (hms(12, 29), hms(12, 30), hms(12, 39), hms(12, 40), hms(12, 50), hms(13))] == \
        [6, 5, 5, 4, 3, 2]


@pytest.mark.parametrize("args,names", [
    (["--step", "1500ms"], "--step"),
    (["--from", str(DAY + 100), "--to", str(DAY)], "--from"),
    (["--from", "yesterday"], "--from"),
    (["--step", "1s", "--from", str(DAY - 30 * 86_400)], "--step"),
    (["--step", "1d", "--from", str(DAY - 3 * 365 * 86_400)], "--hpa-sync-period"),
])
def test_malformed_flags_are_named(history_vm, tmp_path, args, names):
    base = {"--from": str(DAY), "--to": str(DAY + 3600), "--step": "60s"}
    flags = dict(zip(args[::2], args[1::2]))
    merged = [x for k, v in {**base, **flags}.items() for x in (k, v)]
    result = backtest(history_vm.url, "--scaled-object", str(FIXTURE), "--csv", str(tmp_path / "t.csv"), *merged)
    assert result.returncode != 0
    assert names in result.stderr, result.stderr
    assert not (tmp_path / "t.csv").exists(), "nothing is written on a refused run"


@pytest.mark.parametrize("edit,names", [
    (('target: "50"', "target: 50"), "spec.triggers[1].metadata.target"),
    (('target: "50"', 'target: "50"\n        targett: "5"'), "targett"),
    (('target: "50"', 'target: "zero"'), "target"),
    (("tolerance: 100m", "tolerance: lots"), "tolerance"),
    (("tolerance: 100m", "stabilizationWindowSeconds: 7200"), "behavior.scaleUp.stabilizationWindowSeconds"),
    (("maxReplicaCount: 8", "maxReplicaCount: 1"), "spec.minReplicaCount"),
    (("kind: ScaledObject", "kind: ScaledJob"), "no document of kind ScaledObject"),
])
def test_malformed_scaled_objects_are_named(history_vm, tmp_path, edit, names):
    text = FIXTURE.read_text()
    assert edit[0] in text
    so = tmp_path / "so.yaml"
    so.write_text(text.replace(edit[0], edit[1]))
    result = backtest(history_vm.url, "--scaled-object", str(so), "--from", str(DAY), "--to", str(DAY + 600),
                      "--csv", str(tmp_path / "t.csv"))
    assert result.returncode != 0
    assert names in result.stderr, result.stderr
    assert "--scaled-object" in result.stderr, result.stderr


def test_an_output_is_required_and_a_dead_backend_is_named(tmp_path):
    result = backtest("http://127.0.0.1:9", "--scaled-object", str(FIXTURE), "--from", str(DAY))
    assert result.returncode != 0 and "--csv" in result.stderr, result.stderr
    result = backtest("http://127.0.0.1:9", "--scaled-object", str(FIXTURE), "--from", str(DAY),
                      "--to", str(DAY + 600), "--json", str(tmp_path / "t.json"), "--query-timeout", "2s")
    assert result.returncode != 0 and "unreachable" in result.stderr, result.stderr
    assert not (tmp_path / "t.json").exists()


# --- the worked example (docs/backtest.md) --------------------------------------------------

EXAMPLE_NS = "example"
EXAMPLE_DAY = DAY + 86_400  # 2026-11-02
EXAMPLE_GAP = (EXAMPLE_DAY + 3 * 3600, EXAMPLE_DAY + 3 * 3600 + 1800)
LAG = (EXAMPLE_DAY + 15 * 3600, EXAMPLE_DAY + 15 * 3600 + 2400)  # replica shop-3 lags 120 s


def ehms(h: int, m: int = 0) -> int:
    return EXAMPLE_DAY + h * 3600 + m * 60


def example_load(t: int) -> float:
    """30 at night, a daytime hump to about 220 at 13:00, and a deterministic ±15 of noise."""
    hour = (t - EXAMPLE_DAY) / 3600
    hump = 190 * math.sin(math.pi * (hour - 6) / 14) if 6 <= hour <= 20 else 0.0
    noise = ((t // 60) * 7919 % 31) - 15
    return max(0.0, round(30 + hump + noise))


def example_history() -> str:
    lines = []
    wal = 1_000_000.0
    for t in range(EXAMPLE_DAY, EXAMPLE_DAY + 86_400 + STEP, STEP):
        wal += 50_000 * STEP  # the primary writes all day: the lag brake applies
        if EXAMPLE_GAP[0] <= t < EXAMPLE_GAP[1]:
            continue
        ms = t * 1000
        for n in (1, 2, 3):
            scrape = {"namespace": EXAMPLE_NS, "pod": f"{CLUSTER}-{n}", "job": f"{EXAMPLE_NS}/{CLUSTER}",
                      "instance": f"10.0.1.{n}:9187"}
            lines.append(f"cnpg_pg_replication_in_recovery{_labels(**scrape)} {0 if n == 1 else 1} {ms}")
            lag = 120 if n == 3 and LAG[0] <= t < LAG[1] else 0
            lines.append(f"cnpg_pg_replication_lag{_labels(**scrape)} {lag} {ms}")
            if n == 1:
                lines.append(f"cnpg_collector_wal_bytes{_labels(**scrape, stats_reset='2026-11-01T00:00:00Z')} "
                             f"{wal} {ms}")
            else:
                half = example_load(t) / 2
                labels = _labels(**scrape, datname="app", usename="app", application_name="web", state="active")
                lines.append(f"cnpg_backends_total{labels} {half} {ms}")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def example_vm(history_vm):
    probe = f'count(cnpg_pg_replication_in_recovery{{namespace="{EXAMPLE_NS}"}} @ {ehms(23, 59)})'
    history_vm.import_and_wait(example_history(), probe, expect=lambda n: n == 3)
    return history_vm


def example_scaled_object(tmp_path: pathlib.Path, **edits) -> pathlib.Path:
    """The fixture with the lag brake on (30 s) and `edits` (`target`, `window`) applied."""
    text = FIXTURE.read_text().replace('maxReplicas: "8"', 'maxReplicas: "8"\n        maxReplicationLagSeconds: "30"')
    if "target" in edits:
        text = text.replace('target: "50"', f'target: "{edits["target"]}"')
    if "window" in edits:
        text = text.replace("        scaleUp:\n", f"        scaleDown:\n          stabilizationWindowSeconds: {edits['window']}\n"
                            "        scaleUp:\n")
    path = tmp_path / f"example-{'-'.join(f'{k}{v}' for k, v in edits.items()) or 'base'}.yaml"
    path.write_text(text)
    return path


def example_args(so: pathlib.Path) -> list[str]:
    return ["--scaled-object", str(so), "--from", str(EXAMPLE_DAY), "--to", str(EXAMPLE_DAY + 86_400),
            "--step", f"{STEP}s"]


def texts(svg: ET.Element) -> list[tuple[str, ET.Element]]:
    return [((t.text or "").strip(), t) for t in svg.iter("{http://www.w3.org/2000/svg}text")]


def tick_map(svg: ET.Element, zone_times: dict[str, int]) -> tuple[float, float]:
    """(seconds per pixel, time at x = 0) from the x-axis tick labels the plot drew."""
    found = {}
    for label, text in texts(svg):
        if label in zone_times:
            found[label] = float(text.get("x"))
    (a, xa), (b, xb) = sorted(found.items(), key=lambda kv: kv[1])[:1] + sorted(found.items(), key=lambda kv: kv[1])[-1:]
    per_px = (zone_times[b] - zone_times[a]) / (xb - xa)
    return per_px, zone_times[a] - xa * per_px


def bands(svg: ET.Element, color: str, origin: tuple[float, float], min_height=100) -> list[tuple[float, float]]:
    """The time spans of the tall rectangles filled with `color` (the legend's swatch is small)."""
    per_px, t0 = origin
    out = []
    for rect in svg.iter("{http://www.w3.org/2000/svg}rect"):
        if rect.get("fill", "").upper() == color and float(rect.get("height", 0)) >= min_height:
            x, w = float(rect.get("x")), float(rect.get("width"))
            out.append((t0 + x * per_px, t0 + (x + w) * per_px))
    return sorted(out)


def spans_of(times: list[int]) -> list[tuple[int, int]]:
    out = []
    for t in sorted(times):
        if out and t == out[-1][1]:
            out[-1] = (out[-1][0], t + STEP)
        else:
            out.append((t, t + STEP))
    return out


def brake_holds(rows: list[dict]) -> list[tuple[int, int]]:
    """Per brake row: the recommendation and the simulated count. The brake holds the simulated
    HPA's count, so the two are one count, the same all through the episode (issue 44: it held
    the observed 3 and the simulated count fell to it)."""
    return [(int(r["recommended"]), int(r["simulated"])) for r in rows if r["reason"] == "brake"]


def test_reasons_gaps_and_bounds_are_drawn_at_their_times(example_vm, tmp_path):
    """The brake (lag 120 s > 30 s while the primary writes) and the metrics gap appear as bands
    at the times the table gives them, read back from the SVG through its own tick labels; the
    ticks are round hours of the chosen zone; min and max are drawn; the PNG renders. The brake
    holds the simulated count (6, the afternoon's) while history's count stays 3."""
    so = example_scaled_object(tmp_path)
    result = backtest(example_vm.url, *example_args(so), "--namespace", EXAMPLE_NS, "--csv", str(tmp_path / "e.csv"),
                      "--plot", str(tmp_path / "e.svg"), "--png", str(tmp_path / "e.png"),
                      "--time-zone", "Europe/Berlin", namespace=None)
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "e.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    brake = spans_of([int(r["unix_seconds"]) for r in rows if r["reason"] == "brake"])
    gaps = spans_of([int(r["unix_seconds"]) for r in rows if r["error"]])
    # Lag from 15:00 to 15:39, counted over a 5-minute window (its start excluded): the brake
    # holds 15:00 to 15:43.
    assert brake == [(LAG[0], LAG[1] + 240)], brake
    assert set(brake_holds(rows)) == {(6, 6)}, brake_holds(rows)
    assert all(r["observed"] == "3" for r in rows if r["reason"] == "brake")
    # VictoriaMetrics' lookback may carry the last sample a minute or two into the gap.
    assert len(gaps) == 1 and EXAMPLE_GAP[0] <= gaps[0][0] <= EXAMPLE_GAP[0] + 120, gaps
    text = (tmp_path / "e.svg").read_text()
    svg = ET.fromstring(text)
    # Europe/Berlin is UTC+1 in November: local 06:00 is 05:00 UTC.
    zone_times = {f"{h:02d}:00": EXAMPLE_DAY + (h - 1) * 3600 for h in range(1, 24)}
    labels = [label for label, _ in texts(svg)]
    ticks = [x for x in labels if x and re.fullmatch(r"(\w{3} \d\d )?\d\d:\d\d", x)]
    assert ticks and all(x.endswith(":00") for x in ticks), ticks
    assert "time (Europe/Berlin)" in labels
    origin = tick_map(svg, zone_times)
    pixel = origin[0]  # one pixel, in seconds
    for color, expected in (("#FF8C00", brake), ("#5A5A5A", gaps)):
        drawn = bands(svg, color, origin)
        assert len(drawn) == len(expected), (color, drawn)
        for (a, b), (ea, eb) in zip(drawn, expected):
            assert abs(a - ea) <= 2 * pixel and abs(b - eb) <= 2 * pixel, (color, a, b, ea, eb)
    for label in ("reason: brake", "no answer (metrics gap or error)", "minReplicas 2 (dashed)", "maxReplicas 8 (dashed)"):
        assert labels.count(label) == 1, label
    # The legend is right of the data: every legend label starts past the last tick.
    last_tick = max(float(t.get("x")) for label, t in texts(svg) if label in ticks)
    for label, t in texts(svg):
        if label in ("reason: brake", "simulated (HPA)", "observed instances"):
            assert float(t.get("x")) > last_tick + 80, (label, t.get("x"), last_tick)
    # The legend says what the simulation leaves out, so no figure is read as more than it is.
    notes = " ".join(label for label, t in texts(svg) if float(t.get("x") or 0) > last_tick + 80)
    for said in ("simulated: what the HPA asks for", "holds hold it", "CNPG takes to create an instance",
                 "readiness", "come from history"):
        assert said in notes, notes
    png = (tmp_path / "e.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 1200
    if os.environ.get("BACKTEST_SAMPLE_DIR"):
        out = pathlib.Path(os.environ["BACKTEST_SAMPLE_DIR"])
        shutil.copy(tmp_path / "e.svg", out / "backtest-sample.svg")
        shutil.copy(tmp_path / "e.png", out / "backtest-sample.png")


def independent_figures(rows: list[dict], overload_above: float) -> tuple[float, float, int]:
    """Instance-hours, minutes overloaded and scale events, computed here from the run's rows."""
    sims = [int(r["simulated"]) for r in rows]
    over = sum(1 for r, s in zip(rows, sims) if r["load"] not in ("", None)
               and (float(r["load"]) > 0 if s <= 1 else float(r["load"]) / (s - 1) > overload_above))
    events = sum(1 for a, b in zip(sims, sims[1:]) if a != b)
    return sum(sims) * STEP / 3600, over * STEP / 60, events


def tune(vm_url: str, so: pathlib.Path, *extra: str) -> subprocess.CompletedProcess:
    return backtest(vm_url, *example_args(so), "--tune", *extra, namespace=EXAMPLE_NS, timeout=300)


def test_the_sweep_agrees_with_single_runs_and_recommends_on_the_front(example_vm, tmp_path):
    so = example_scaled_object(tmp_path)
    started = time.monotonic()
    result = tune(example_vm.url, so, "--tune-target", "40..70:10", "--tune-scale-down-window", "300,1800",
                  "--max-overload", "2%", "-o", "json")
    print(f"tune: 8 settings over a day at {STEP} s in {time.monotonic() - started:.2f} s")
    assert result.returncode == 0, result.stderr
    lines = json.loads(result.stdout)
    assert [(l["target"], l["scale_down_window_seconds"]) for l in lines] == \
        [(t, w) for t in (40, 50, 60, 70) for w in (300, 1800)]
    errors = None
    braked = {}  # minutes overloaded during the brake, per setting
    for line in lines:
        single = tmp_path / f"t{line['target']}-w{line['scale_down_window_seconds']}.csv"
        edited = example_scaled_object(tmp_path, target=int(line["target"]), window=line["scale_down_window_seconds"])
        run = backtest(example_vm.url, *example_args(edited), "--csv", str(single), "--overload-above", "50",
                       namespace=EXAMPLE_NS)
        assert run.returncode == 0, run.stderr
        with open(single, newline="") as f:
            rows = list(csv.DictReader(f))
        hours, minutes, events = independent_figures(rows, 50)
        errors = sum(1 for r in rows if r["error"])
        assert (round(line["instance_hours"], 6), round(line["overloaded_minutes"], 6), line["scale_events"]) == \
            (round(hours, 6), round(minutes, 6), events), line
        assert f"{events} scale events, {hours:.1f} instance-hours, {minutes:.1f} min overloaded" in run.stdout
        # Every setting's brake holds its own simulated count, never history's 3.
        held = brake_holds(rows)
        assert len(held) == 44 and len(set(held)) == 1 and held[0][0] > 3, (line, held)
        braked[line["target"], line["scale_down_window_seconds"]] = independent_figures(
            [r for r in rows if r["reason"] == "brake"], 50)[1]
    # Cost falls and overload rises with the target. The brake no longer charges its minutes to
    # every setting (issue 44: at least 39 each): it holds what a setting had, and the load falls
    # through it, so a setting that carried the load before it carries it through it; a target
    # up to the threshold is never overloaded.
    assert lines[0]["instance_hours"] > lines[-1]["instance_hours"]
    assert [l["overloaded_minutes"] for l in lines if l["target"] <= 50] == [0, 0, 0, 0], lines
    assert [m for (target, _), m in braked.items() if target <= 50] == [0, 0, 0, 0], braked
    (best,) = [l for l in lines if l["recommended"]]
    assert best["pareto"]
    answered = 1441 - errors
    budget = math.floor(answered * 0.02) * STEP / 60
    assert best["overloaded_minutes"] <= budget
    assert not [l for l in lines if l["overloaded_minutes"] <= budget and l["instance_hours"] < best["instance_hours"]]
    for l in lines:  # the front: nobody beats a front point in both
        beaten = any(o["instance_hours"] <= l["instance_hours"] and o["overloaded_minutes"] <= l["overloaded_minutes"]
                     and (o["instance_hours"], o["overloaded_minutes"]) != (l["instance_hours"], l["overloaded_minutes"])
                     for o in lines)
        assert l["pareto"] == (not beaten), l
    assert f'metadata.target: "{best["target"]:g}"' in result.stderr, result.stderr
    assert "stabilizationWindowSeconds: " in result.stderr


def test_the_tune_table_and_what_to_apply(example_vm, tmp_path):
    """The default grid (50 % to 200 % of the target) with minReplicas swept too, within the
    default 1 % budget (14 minutes of the day). The brake episode no longer overloads every
    setting (issue 44: 39 minutes each, above the budget, and no recommendation): the target of
    50 with minReplicas 2 is never overloaded, and the cheapest. A grid of targets that all
    overload recommends nothing and says so."""
    so = example_scaled_object(tmp_path)
    result = tune(example_vm.url, so, "--tune-min-replicas", "2,3")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.splitlines()[0].split()[:3] == ["target", "down", "window"], out
    # Default targets: 25 to 100 in steps of 5, each with minReplicas 2 and 3.
    assert len([line for line in out.splitlines() if re.match(r"\s+\d", line)]) == 32, out
    assert "budget --max-overload 1% = 14.0 min" in out, out
    (best,) = [line.split() for line in out.splitlines() if line.endswith("* recommended")]
    assert (best[0], best[2], best[4]) == ("50", "2", "0.0"), best
    for apply in ('spec.triggers[1].metadata.target: "50"', 'spec.triggers[1].metadata.minReplicas: "2"',
                  "spec.minReplicaCount: 2"):
        assert apply in out, out
    result = tune(example_vm.url, so, "--tune-target", "60..100:20")
    assert result.returncode == 0, result.stderr
    assert "recommended: none" in result.stdout and "* recommended" not in result.stdout, result.stdout
    # The docs' grid: the brake holds the count whatever the window, so the default 300 s wins.
    result = tune(example_vm.url, so, "--tune-target", "40..70:5", "--tune-scale-down-window", "300,1800")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert out.count("* recommended") == 1, out
    (best,) = [line.split() for line in out.splitlines() if line.endswith("* recommended")]
    assert best[:2] == ["50", "300s"], best
    assert 'spec.triggers[1].metadata.target: "50"' in out, out
    assert "behavior.scaleDown.stabilizationWindowSeconds: 300" in out, out
    if os.environ.get("BACKTEST_SAMPLE_DIR"):
        (pathlib.Path(os.environ["BACKTEST_SAMPLE_DIR"]) / "backtest-tune.txt").write_text(out)


@pytest.mark.parametrize("args,names", [
    (["--tune-target", "70..40:10"], '--tune-target: range "70..40:10" is empty'),
    (["--tune-target", ""], "--tune-target: empty grid"),
    (["--tune-target", "1..1000:1"], "--tune-target: more than 100 values"),
    (["--tune-target", "1..100:1", "--tune-scale-down-window", "0..3000:600"], "600 settings, above 400"),
    (["--tune-scale-down-window", "9000"], "--tune-scale-down-window: 9000"),
    (["--tune-min-replicas", "9"], "--tune-min-replicas: 9"),
    (["--tune-target", "50", "--csv", "x.csv"], "--csv"),
])
def test_empty_or_too_large_grids_are_refused_naming_the_flag(example_vm, tmp_path, args, names):
    so = example_scaled_object(tmp_path)
    result = tune(example_vm.url, so, *args)
    assert result.returncode != 0 and names in result.stderr, result.stderr
    assert result.stdout == ""


def test_a_list_and_multi_document_files_pick_by_name_and_take_the_namespace(example_vm, tmp_path):
    """`kubectl get scaledobjects -o yaml` is a `kind: List` whose items carry their namespace."""
    so_text = example_scaled_object(tmp_path).read_text().split("---\n", 1)[1]
    item = "\n".join("  " + line if line else line for line in so_text.splitlines())
    first = item.replace("  name: shop\n", f"  name: shop\n    namespace: {EXAMPLE_NS}\n", 1)
    other = item.replace("  name: shop\n", "  name: other\n    namespace: elsewhere\n", 1)
    listed = tmp_path / "list.yaml"
    listed.write_text("apiVersion: v1\nkind: List\nitems:\n-" + first[1:] + "\n-" + other[1:] + "\n")
    common = ["--from", str(EXAMPLE_DAY), "--to", str(EXAMPLE_DAY + 3600), "--step", "60s"]
    result = backtest(example_vm.url, "--scaled-object", str(listed), *common, "-o", "csv", namespace=None)
    assert result.returncode != 0 and '2 ScaledObjects ("shop", "other"); choose one with --name' in result.stderr, \
        result.stderr
    result = backtest(example_vm.url, "--scaled-object", str(listed), "--name", "shop", *common,
                      "--json", str(tmp_path / "l.json"), "-o", "csv", namespace=None)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "l.json").read_text())["namespace"] == EXAMPLE_NS
    rows = list(csv.DictReader(result.stdout.splitlines()))
    assert len(rows) == 61 and rows[0]["observed"] == "3", rows[0]
    assert "61 evaluations" in result.stderr, "the summary goes to stderr with -o"
    # Without a namespace anywhere, --namespace is asked for.
    multi = tmp_path / "multi.yaml"
    multi.write_text(FIXTURE.read_text() + "---\n" + FIXTURE.read_text().split("---\n", 1)[1].replace("name: shop", "name: two", 1))
    result = backtest(example_vm.url, "--scaled-object", str(multi), *common, "-o", "table", namespace=None)
    assert result.returncode != 0 and '("shop", "two"); choose one with --name' in result.stderr, result.stderr
    result = backtest(example_vm.url, "--scaled-object", str(multi), "--name", "two", *common, "-o", "table",
                      namespace=None)
    assert result.returncode != 0 and "--namespace: required" in result.stderr, result.stderr


def test_the_printed_table_lists_the_changes(history_vm, tmp_path):
    result = backtest(history_vm.url, "--scaled-object", str(FIXTURE), "--from", str(DAY), "--to", str(DAY + 86_400),
                      "--step", "60s", "-o", "table")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split()[:3] == ["time", "load", "recommended"]
    at = {line[:19]: line.split() for line in lines[1:]}
    assert at["2026-11-01 08:00:00"][3:7] == ["240.0", "6", "load", "6"], at["2026-11-01 08:00:00"]
    gap = [line for line in lines if "no instance series" in line]
    assert gap and "18:0" in gap[0][:19], gap
    assert len(lines) < 40, "changes only"
