"""Closed loop: VictoriaMetrics load -> our scaler -> KEDA -> HPA (kube-controller-manager) ->
Cluster.spec.instances via the scale subresource -> CNPG stand-in -> series shape. KEDA reaches the
scaler over mutual TLS with the package's objects (secured.py), and keeps doing so across a renewal
of the scaler's certificate. Every assertion reads real objects from the apiserver."""

import os
import ssl
import subprocess
import time

import pytest

from rig import POLL
from testkit import wait_until
from scaledobject import DOWN_PERIOD, FLOOR, LAG_LIMIT, MAX, TARGET, cluster_and_scaledobject

NS = "tenant-loop"
NAME = "pg"
CNPG = "postgresql.cnpg.io/v1"
HPA = "autoscaling/v2"
STATE: dict[str, float] = {}


def instances(rig) -> int:
    return rig.kube.get(CNPG, "Cluster", NAME, NS)["spec"].get("instances")


def hpa_condition(rig, kind: str) -> dict:
    hpa = rig.kube.get(HPA, "HorizontalPodAutoscaler", f"keda-hpa-{NAME}", NS) or {}
    return next((c for c in hpa.get("status", {}).get("conditions", []) if c["type"] == kind), {})


def hold(rig, seconds: float, expected: int) -> None:
    """Asserts spec.instances stays at `expected` for `seconds` (sampled twice a second)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        assert instances(rig) == expected, f"instances moved off {expected} during a hold"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def loop(rig, scaler):
    rig.kube.ensure_namespace(NS)
    # The primary writes WAL throughout (a realistic busy primary); lag is what the test varies.
    rig.feeder.set(NS, NAME, connections=0, lag_seconds=0, wal_bytes_per_s=20000)
    for obj in cluster_and_scaledobject(rig, scaler.address, NS, NAME):
        rig.kube.apply(obj)
    wait_until(lambda: rig.kube.get(HPA, "HorizontalPodAutoscaler", f"keda-hpa-{NAME}", NS),
               timeout=60, interval=POLL, what="KEDA to create the HPA")
    return rig


def test_keda_authenticates_with_the_package_credentials(loop):
    so = loop.kube.get("keda.sh/v1alpha1", "ScaledObject", NAME, NS)
    assert so["spec"]["triggers"][0]["authenticationRef"] == {
        "kind": "ClusterTriggerAuthentication", "name": "cozy-autoscaling-scaler"}


def test_hpa_targets_cluster_scale_subresource(loop):
    hpa = loop.kube.get(HPA, "HorizontalPodAutoscaler", f"keda-hpa-{NAME}", NS)
    ref = hpa["spec"]["scaleTargetRef"]
    assert (ref["kind"], ref["name"]) == ("Cluster", NAME)
    metric = hpa["spec"]["metrics"][0]["external"]
    assert metric["metric"]["name"].endswith(f"cnpg-{NAME}-readconnections")
    assert metric["target"]["type"] == "AverageValue"
    # The HPA can read the scale subresource's selector (set by the CNPG stand-in) and our metric.
    wait_until(lambda: hpa_condition(loop, "ScalingActive").get("status") == "True",
               timeout=60, interval=POLL, what="HPA ScalingActive=True")
    # The chart leaves spec.instances to the HPA; with no load it settles on the floor.
    wait_until(lambda: instances(loop) == FLOOR,
               timeout=30, interval=POLL, what="spec.instances at the floor")
    STATE["at_floor"] = time.monotonic()


def test_load_raises_instances_to_the_expected_count(loop):
    # 35 active read sessions / target 10 -> 4 replicas + primary = 5 (= max).
    loop.feeder.set(NS, NAME, connections=35)
    wait_until(lambda: instances(loop) == 5,
               timeout=90, interval=POLL, what="spec.instances to reach 5")
    hold(loop, 6, 5)
    assert max(v for _, v in loop.cnpg.series(NS, NAME) if v is not None) <= MAX


def test_renewing_the_server_certificate_does_not_stop_scaling(loop, scaler):
    """cert-manager renews the scaler's certificate (a new key) mid-run. The scaler serves it to new
    connections within its 5 s reload poll, KEDA's pooled connection (older than the renewal) keeps
    working, and after a rollout KEDA reconnects, verifies the new certificate with the caCert it
    already holds, and scaling goes on both ways."""
    before = scaler.served_certificate()
    renewed = ssl.PEM_cert_to_DER_cert(scaler.issue_server().decode())
    assert renewed != before
    start = time.monotonic()
    wait_until(lambda: scaler.served_certificate() == renewed,
               timeout=15, interval=POLL, what="the scaler to serve the renewed certificate")
    print(f"renewed certificate served after {time.monotonic() - start:.1f} s")
    calls = scaler.ok_requests()
    wait_until(lambda: scaler.ok_requests() >= calls + 4,
               timeout=30, interval=POLL, what="KEDA's calls to go on over its pooled connection")
    scaler.restart()
    start = time.monotonic()
    # Every call the new process answers came over a handshake with the renewed certificate.
    wait_until(lambda: scaler.ok_requests() > 0,
               timeout=60, interval=POLL, what="KEDA to reconnect to the restarted scaler")
    print(f"KEDA's first call after the rollout: {time.monotonic() - start:.1f} s")
    # 15 sessions / target 10 -> 2 replicas + primary = 3, one pod per DOWN_PERIOD ...
    loop.feeder.set(NS, NAME, connections=15)
    wait_until(lambda: instances(loop) == 3,
               timeout=90, interval=POLL, what="spec.instances to come down to 3")
    # ... and back up to 5 for the scenarios that follow.
    loop.feeder.set(NS, NAME, connections=35)
    wait_until(lambda: instances(loop) == 5,
               timeout=90, interval=POLL, what="spec.instances to go back up to 5")
    print(f"scaled 5 -> 3 -> 5 in {time.monotonic() - start:.1f} s after the rollout")


def test_metrics_backend_down_holds_the_count(loop):
    loop.vm.stop()
    loop.feeder.set(NS, NAME, connections=0)  # would mean "scale down" if anyone could read it
    # KEDA surfaces the scaler's UNAVAILABLE: the HPA cannot compute a metric.
    wait_until(lambda: hpa_condition(loop, "ScalingActive").get("status") == "False",
               timeout=60, interval=POLL, what="HPA ScalingActive=False (metric unavailable)")
    assert hpa_condition(loop, "ScalingActive")["reason"] == "FailedGetExternalMetric"
    hold(loop, 3 * DOWN_PERIOD, 5)


def test_lag_while_primary_writes_holds_the_count(loop):
    # Replicas fall behind while the primary keeps writing: the brake must hold the count even
    # though the load is gone.
    loop.feeder.set(NS, NAME, lag_seconds=120)
    loop.vm.start()
    wait_until(lambda: hpa_condition(loop, "ScalingActive").get("status") == "True",
               timeout=60, interval=POLL, what="HPA ScalingActive=True again")
    hold(loop, 3 * DOWN_PERIOD, 5)
    # The hold is the brake's doing (not a stuck loop): the scaler says so for this cluster.
    assert "reason: brake" in explain(loop), explain(loop)


def explain(rig) -> str:
    r = subprocess.run([rig.scaler_bin, "explain", "--prometheus-url", rig.vm.url,
                        "--namespace", NS, "--cluster", NAME, "--target", str(TARGET),
                        "--min-replicas", str(FLOOR), "--max-replicas", str(MAX),
                        "--max-replication-lag-seconds", str(LAG_LIMIT), "--topology", "kube"],
                       capture_output=True, text=True, env={**os.environ,
                                                            "KUBECONFIG": str(rig.cp.kubeconfig)})
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_without_load_it_comes_down_paced_to_the_floor(loop):
    # Replicas caught up: drop the lag history so the 5-minute lag window is clean again.
    loop.feeder.set(NS, NAME, lag_seconds=0)
    loop.feeder.settle()  # no push with the old lag still in flight
    loop.vm.delete_series(f'cnpg_pg_replication_lag{{namespace="{NS}"}}')
    start = time.monotonic()
    wait_until(lambda: instances(loop) == FLOOR,
               timeout=120, interval=POLL, what="spec.instances to come down to the floor")
    hold(loop, 2 * DOWN_PERIOD, FLOOR)
    steps = [(t, v) for t, v in loop.cnpg.series(NS, NAME) if t >= start]
    values = [v for _, v in steps]
    assert values == list(range(4, FLOOR - 1, -1)), f"scale-down was not one pod at a time: {values}"
    gaps = [b[0] - a[0] for a, b in zip(steps, steps[1:])]
    # One pod per DOWN_PERIOD seconds (observed by polling every 0.5 s, hence the slack).
    assert all(g >= DOWN_PERIOD - 1.5 for g in gaps), f"scale-down not paced: gaps {gaps}"
    since_floor = [v for t, v in loop.cnpg.series(NS, NAME) if t >= STATE["at_floor"]]
    assert min(since_floor) >= FLOOR, f"went under the floor: {since_floor}"
