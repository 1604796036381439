"""`scaler backtest` on a real VictoriaMetrics holding a known day of history.

The history (one CNPG cluster, a primary and two replicas, 60 s samples on 2026-11-01 UTC) has a
designed load shape: 20 active connections, 240 from 08:00 to 12:00, 20 again, and no series at
all from 18:00 to 18:30. At target 50 the scaler recommends 1 + ceil(load / 50): 2, then 6. The
simulated HPA's counts are asserted minute by minute around each change."""
import csv
import json
import os
import pathlib
import subprocess
import time

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


def backtest(vm_url: str, *args: str, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([scaler_binary(), "backtest", "--prometheus-url", vm_url, "--namespace", NAMESPACE,
                           *args], capture_output=True, text=True, timeout=timeout)


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
