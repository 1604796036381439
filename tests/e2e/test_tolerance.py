"""A +-1 step above ten instances. At 12 instances a load asking for 13 is +8 %, inside the HPA's
default 10 % tolerance: the Cluster installed with the tolerance the chart renders on Kubernetes
>= 1.35 (autoscaling.tolerance: 0) moves to 13, the same Cluster without it (tolerance: null, the
HPA default) stays at 12 while its HPA reads the same load. Both run side by side on the rig's
kube-controller-manager v1.37 (HPAConfigurableTolerance on by default)."""

import time

from charts import example_chart
from helm import Helm
from rig import POLL
from testkit import wait_until

CNPG = "postgresql.cnpg.io/v1"
HPA = "autoscaling/v2"
RELEASE = "pg"
TARGET = 10
# Active read sessions: 1 primary + ceil(110 / 10) = 12 instances, 1 + ceil(120 / 10) = 13.
WANTS_12, WANTS_13 = 110, 120
WITH, WITHOUT = "tolerance-zero", "tolerance-default"


def install(address: str, helm: Helm, ns: str, tolerance: float | None) -> None:
    helm.upgrade_install(RELEASE, example_chart(), ns, {
        "replicas": 12,
        "autoscaling": {
            "enabled": True, "scalerAddress": address,
            "minReplicas": 2, "maxReplicas": 15, "target": TARGET, "metric": "ReadConnections",
            "tolerance": tolerance,  # None: Helm drops the key, the chart renders no tolerance
            # Only the step up is under test: a fresh HPA's first samples can come before the
            # feeder's series show all 12 instances, and must not scale it down meanwhile.
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                         "scaleDown": {"selectPolicy": "Disabled"}}}})


def instances(rig, ns: str) -> int:
    return rig.kube.get(CNPG, "Cluster", RELEASE, ns)["spec"]["instances"]


def hpa(rig, ns: str) -> dict:
    return rig.kube.get(HPA, "HorizontalPodAutoscaler", f"keda-hpa-{RELEASE}", ns) or {}


def active(rig, ns: str) -> bool:
    return any(c["type"] == "ScalingActive" and c["status"] == "True"
               for c in hpa(rig, ns).get("status", {}).get("conditions", []))


def average(rig, ns: str) -> float | None:
    """The HPA's current per-instance metric (AverageValue: usage / current instances)."""
    for m in hpa(rig, ns).get("status", {}).get("currentMetrics") or []:
        q = m["external"]["current"]["averageValue"]
        return float(q[:-1]) / 1000 if q.endswith("m") else float(q)
    return None


def test_tolerance_zero_moves_twelve_to_thirteen_and_the_default_does_not(rig, scaler):
    helm = Helm(rig.dir / "helm-tolerance", kubeconfig=rig.cp.kubeconfig)
    for ns, tolerance in ((WITH, 0), (WITHOUT, None)):
        rig.feeder.set(ns, RELEASE, connections=WANTS_12)
        install(scaler.address, helm, ns, tolerance)
    # Rendered (KubeVersion 1.37) and passed through KEDA to the HPA, or absent.
    with_tol, without = (wait_until(lambda: hpa(rig, ns).get("spec", {}).get("behavior"),
                                    timeout=60, interval=POLL, what=f"KEDA to create {ns}'s HPA")
                         for ns in (WITH, WITHOUT))
    for direction in ("scaleUp", "scaleDown"):
        assert with_tol[direction]["tolerance"] == "0", with_tol
        assert "tolerance" not in without[direction], without
    for ns in (WITH, WITHOUT):
        # 12 x target over 12 instances: exactly the target.
        wait_until(lambda: active(rig, ns) and average(rig, ns) == TARGET,
                   timeout=60, interval=POLL, what=f"{ns}: the HPA reading the load for 12")
        assert instances(rig, ns) == 12

    for ns in (WITH, WITHOUT):
        rig.feeder.set(ns, RELEASE, connections=WANTS_13)
    # Both HPAs read 13 x target over 12 instances: +8.3 %.
    wait_until(lambda: abs((average(rig, WITHOUT) or 0) - 13 * TARGET / 12) < 0.01,
               timeout=60, interval=POLL,
               what="the default-tolerance HPA to read the load asking for 13")
    wait_until(lambda: instances(rig, WITH) == 13, timeout=60, interval=POLL,
               what="tolerance 0: the HPA to take 12 to 13")
    # Five more HPA syncs (3 s each) with the same load: the default tolerance holds 12.
    end = time.monotonic() + 15
    while time.monotonic() < end:
        assert instances(rig, WITHOUT) == 12, "the default 10 % tolerance let a +8 % step through"
        time.sleep(0.5)
    assert hpa(rig, WITHOUT)["status"]["desiredReplicas"] == 12
    assert [v for _, v in rig.cnpg.series(WITHOUT, RELEASE)] == [12]
    assert [v for _, v in rig.cnpg.series(WITH, RELEASE)] == [12, 13]
    for ns in (WITH, WITHOUT):
        helm.output("uninstall", RELEASE, "--namespace", ns)
