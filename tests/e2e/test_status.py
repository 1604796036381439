"""`scaler status`, `scaler explain --scaled-object` and the scaler's Events against the real
kube-apiserver, KEDA and HPA (issue 27).

A mixed fleet in one namespace, every object rendered from the example app chart the way a
platform would (scaledobject.py): `healthy` (no load: the floor), `braked` (load, replicas
lagging while the primary writes: the lag brake), `invalid` (a trigger metadata key the scaler
rejects), `unreachable` (its scalerAddress names the scaler's host on a port nothing serves:
KEDA never reaches it). `status` must list all four with the right reason, in text and JSON,
trouble first; `explain --scaled-object` must agree with what serve serves; and the brake
engaging and releasing, and the invalid metadata, must each make one Event."""

import json
import os
import subprocess
import time

import pytest
import requests

import promtext
from rig import POLL
from scaledobject import FLOOR, cluster_and_scaledobject
from testkit import free_port, wait_until

NS = "tenant-status"
HPA = "autoscaling/v2"
KEDA = "keda.sh/v1alpha1"
FLEET = ("healthy", "braked", "invalid", "unreachable")


def env(rig) -> dict:
    return {**os.environ, "KUBECONFIG": str(rig.cp.kubeconfig)}


def host(scaler) -> str:
    return scaler.address.rsplit(":", 1)[0]


def status(rig, scaler, *flags, decisions_url=None, binary=None) -> subprocess.CompletedProcess:
    r = subprocess.run([str(binary or rig.scaler_bin), "status", "-n", NS, "--scaler-address", host(scaler),
                        "--decisions-url", decisions_url or f"{scaler.admin}/decisions", *flags],
                       capture_output=True, text=True, env=env(rig), timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def status_json(rig, scaler, **kw) -> dict:
    return json.loads(status(rig, scaler, "-o", "json", **kw).stdout)


def decision(scaler, name) -> dict:
    page = requests.get(f"{scaler.admin}/decisions", params={"namespace": NS}, timeout=5).json()
    return next((e for e in page["entries"] if e["scaledObject"] == name), {})


def events(rig, name) -> list[dict]:
    return [e for e in rig.kube.list("events.k8s.io/v1", "Event", NS)
            if e.get("regarding", {}).get("name") == name
            and e.get("reportingController") == "cozy-autoscaling-scaler"]


def reasons(rig, name) -> list[str]:
    return sorted(e["reason"] for e in events(rig, name))


@pytest.fixture(scope="module")
def fleet(rig, scaler):
    rig.kube.ensure_namespace(NS)
    port = int(scaler.address.rsplit(":", 1)[1])
    for name in FLEET:
        address = f"{host(scaler)}:{free_port() if name == 'unreachable' else port}"
        rig.feeder.set(NS, name, connections=35 if name == "braked" else 0,
                       lag_seconds=600 if name == "braked" else 0, wal_bytes_per_s=20000)
        for obj in cluster_and_scaledobject(rig, address, NS, name):
            if obj["kind"] == "ScaledObject" and name == "invalid":
                obj["spec"]["triggers"][0]["metadata"]["targett"] = "10"  # a typo: rejected
            rig.kube.apply(obj)
    # KEDA makes no HPA while GetMetricSpec fails (invalid, unreachable).
    for name in ("healthy", "braked"):
        wait_until(lambda name=name: rig.kube.get(HPA, "HorizontalPodAutoscaler", f"keda-hpa-{name}", NS),
                   timeout=60, interval=POLL, what=f"KEDA to create the HPA of {name}")
    wait_until(lambda: decision(scaler, "healthy").get("reason") == "floor"
               and decision(scaler, "braked").get("reason") == "brake",
               timeout=60, interval=POLL, what="serve's decisions: healthy at the floor, braked held")
    wait_until(lambda: events(rig, "invalid"), timeout=60, interval=POLL,
               what="the InvalidMetadata event")
    return rig


def test_a_lagging_writing_cluster_started_from_nothing_never_moves(fleet):
    """Issue 43: `braked` is created lagging 600 s behind a writing primary, with 35 sessions
    asking for 5. On a new machine its first evaluation came before the WAL rate had two samples,
    counted the primary as idle and served 5: the HPA moved it 2 -> 5 within a second. Unknown write
    activity now holds: the count never leaves the floor it was created at."""
    def hpa_read_the_metric() -> bool:
        hpa = fleet.kube.get(HPA, "HorizontalPodAutoscaler", "keda-hpa-braked", NS) or {}
        return bool(hpa.get("status", {}).get("currentMetrics"))
    wait_until(hpa_read_the_metric, timeout=60, interval=POLL, what="the HPA to read the metric")
    time.sleep(7)  # two more HPA syncs (3 s each): a count it would write has been written
    seen = fleet.cnpg.series(NS, "braked")
    assert seen and {v for _, v in seen} == {FLOOR}, seen


def test_status_lists_the_mixed_fleet_with_the_right_reasons_trouble_first(fleet, scaler):
    report = status_json(fleet, scaler)
    assert report["missing"] == [], report["missing"]
    rows = {r["name"]: r for r in report["items"]}
    assert sorted(rows) == sorted(FLEET), rows.keys()
    assert {n: r["reason"] for n, r in rows.items()} == {
        "healthy": "floor", "braked": "brake", "invalid": "invalid-metadata", "unreachable": "no-decision"}
    assert [r["name"] for r in report["items"]] == ["invalid", "unreachable", "braked", "healthy"]
    assert "\"targett\"" in rows["invalid"]["lastError"], rows["invalid"]
    braked = rows["braked"]
    # Held at the current count although 35 sessions ask for 5.
    assert braked["desired"] == braked["current"] and braked["recommended"] == 5, braked
    assert braked["hpa"]["name"] == "keda-hpa-braked"
    assert rows["healthy"]["desired"] == FLOOR and rows["healthy"]["hpa"]["name"] == "keda-hpa-healthy"
    assert rows["unreachable"]["current"] == FLOOR, "from the Cluster"

    text = status(fleet, scaler).stdout.splitlines()
    assert text[0].split()[:7] == ["NAMESPACE", "NAME", "CLUSTER", "CURRENT", "DESIRED", "RECOMMENDED", "REASON"]
    assert [line.split()[1] for line in text[1:]] == ["invalid", "unreachable", "braked", "healthy"]
    assert [line.split()[6] for line in text[1:]] == ["invalid-metadata", "no-decision", "brake", "floor"]
    wide = status(fleet, scaler, "-o", "wide").stdout
    assert "SCALER" in wide and scaler.address in wide
    assert "items:" in status(fleet, scaler, "-o", "yaml").stdout


def test_a_missing_source_is_named_and_the_rest_still_listed(fleet, scaler):
    url = f"http://127.0.0.1:{free_port()}/decisions"
    r = status(fleet, scaler, decisions_url=url)
    assert "decisions:" in r.stderr and url in r.stderr, r.stderr
    report = status_json(fleet, scaler, decisions_url=url)
    assert len(report["missing"]) == 1 and report["missing"][0].startswith("decisions:")
    got = {r["name"]: r["reason"] for r in report["items"]}
    assert got == {"invalid": "invalid-metadata", "healthy": "unknown", "braked": "unknown",
                   "unreachable": "unknown"}, got


def test_the_kubectl_plugin_name_runs_the_same_status(fleet, scaler, tmp_path):
    plugin = tmp_path / "kubectl-cozy_autoscaling"
    plugin.symlink_to(fleet.scaler_bin)
    report = status_json(fleet, scaler, binary=plugin)
    assert sorted(r["name"] for r in report["items"]) == sorted(FLEET)
    usage = subprocess.run([str(plugin), "status", "--help"], capture_output=True, text=True, timeout=10)
    assert "kubectl cozy-autoscaling status" in usage.stdout, usage.stdout


def explain(rig, scaler, name) -> dict:
    r = subprocess.run([str(rig.scaler_bin), "explain", "--prometheus-url", rig.vm.url,
                        "--scaled-object", f"{NS}/{name}", "--scaler-address", host(scaler),
                        "--topology", "kube", "--output", "json"],
                       capture_output=True, text=True, env=env(rig), timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_explain_from_the_live_scaled_object_agrees_with_serve(fleet, scaler):
    for name in ("healthy", "braked"):
        served = decision(scaler, name)
        e = explain(fleet, scaler, name)
        assert (e["decision"]["desired"], e["decision"]["reason"]) == (served["desired"], served["reason"]), \
            (name, e["decision"], served)
    r = subprocess.run([str(fleet.scaler_bin), "explain", "--prometheus-url", fleet.vm.url,
                        "--scaled-object", f"{NS}/invalid", "--scaler-address", host(scaler), "--topology", "kube"],
                       capture_output=True, text=True, env=env(fleet), timeout=30)
    assert r.returncode != 0 and "\"targett\"" in r.stderr, r.stderr


def test_events_once_each_on_the_brake_engaging_and_releasing_and_on_invalid_metadata(fleet, scaler):
    assert reasons(fleet, "invalid") == ["InvalidMetadata"]
    [invalid] = events(fleet, "invalid")
    assert invalid["type"] == "Warning" and "\"targett\"" in invalid["note"], invalid
    assert reasons(fleet, "braked") == ["LagBrakeEngaged"]
    # Replicas caught up: the lag history goes so the 5-minute lag window is clean again.
    fleet.feeder.set(NS, "braked", lag_seconds=0)
    fleet.feeder.settle()  # no push with the old lag still in flight
    fleet.vm.delete_series(f'cnpg_pg_replication_lag{{namespace="{NS}",pod=~"braked-[0-9]+"}}')
    wait_until(lambda: "LagBrakeReleased" in reasons(fleet, "braked"),
               timeout=60, interval=POLL, what="the LagBrakeReleased event")
    time.sleep(5)  # five more refresh intervals: no repeat
    assert reasons(fleet, "braked") == ["LagBrakeEngaged", "LagBrakeReleased"]
    for e in events(fleet, "braked"):
        assert e.get("series") is None, e
    assert reasons(fleet, "healthy") == [] and reasons(fleet, "invalid") == ["InvalidMetadata"]


def test_the_package_grants_the_scaler_exactly_what_events_and_the_warm_start_need(fleet, package):
    """The scaler above runs with the admin kubeconfig; its in-cluster ServiceAccount gets the
    package's ClusterRole: create and patch Events, get ScaledObjects and list them (the warm
    start), and nothing more on them."""
    def allowed(group, resource, verb):
        review = fleet.kube.create({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "metadata": {},
            "spec": {"user": "system:serviceaccount:cozy-autoscaling:cozy-autoscaling-scaler",
                     "groups": ["system:serviceaccounts", "system:serviceaccounts:cozy-autoscaling"],
                     "resourceAttributes": {"group": group, "resource": resource, "verb": verb,
                                            "namespace": NS}}})
        return review["status"]["allowed"]
    for verb in ("create", "patch"):
        assert allowed("events.k8s.io", "events", verb), verb
    assert allowed("keda.sh", "scaledobjects", "get") and allowed("keda.sh", "scaledobjects", "list")
    for group, resource, verb in [("events.k8s.io", "events", "delete"), ("events.k8s.io", "events", "list"),
                                  ("keda.sh", "scaledobjects", "watch"), ("keda.sh", "scaledobjects", "patch"),
                                  ("", "events", "create")]:
        assert not allowed(group, resource, verb), (group, resource, verb)


def test_a_restarted_scaler_holds_its_scaledobjects_before_it_is_ready(fleet, scaler):
    """Issue 42's warm start, with the package's RBAC (the scaler runs as its ServiceAccount): a
    new process lists the ScaledObjects naming it and evaluates them before /readyz says ready,
    so a whole fleet's first calls are answered from memory. Held: every valid one naming it
    (`healthy`, `braked`, and those of other modules still in the rig), not `invalid` (a call
    would refuse its metadata) nor `unreachable` (another port)."""
    naming = [o for o in fleet.kube.list(KEDA, "ScaledObject")
              if any(t.get("metadata", {}).get("scalerAddress") == scaler.address
                     for t in o["spec"].get("triggers", []))]
    scaler.restart()
    samples = promtext.scrape(f"{scaler.admin}/metrics", timeout=5)
    held = promtext.total(samples, "scaler_warm_start_scaledobjects")
    assert 2 <= held <= len(naming) - 1, (held, [o["metadata"]["name"] for o in naming])
    # Evaluated before ready: both already have their decisions.
    assert decision(scaler, "healthy").get("reason") == "floor"
    assert decision(scaler, "braked").get("reason"), decision(scaler, "braked")


def test_watch_prints_again_every_interval(fleet, scaler):
    p = subprocess.Popen([str(fleet.scaler_bin), "status", "-n", NS, "--scaler-address", host(scaler),
                          "--decisions-url", f"{scaler.admin}/decisions", "--watch", "--watch-interval", "1s"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(fleet))
    try:
        time.sleep(6)
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=10)
    # Each round is a full re-list (about a second here) and then the interval.
    headers = [line for line in out.splitlines() if line.startswith("NAMESPACE")]
    assert 2 <= len(headers) <= 6, out
