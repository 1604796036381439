"""The scaler's two Kubernetes-side guards against the real kube-apiserver (issue 17):

* the tenant-quota ceiling: a namespace whose ResourceQuota (usage computed by the real
  kube-controller-manager quota controller from real Pod objects) fits two more instances, and a
  load asking for five more: the served count stops at what fits, and `explain` names the binding
  resource;
* the convergence hold: a Cluster whose status (CNPG stand-in, see rig/cnpg.py) never reaches the
  asked size: after the deadline the scaler holds at the ready count, asks again in retry
  windows, the second hold lasts twice the first, and it recovers when the status catches up.

Decisions are read the way KEDA reads them: gRPC GetMetrics over mTLS from the package-wired
`scaler serve` (watch-fed index of Clusters and ResourceQuotas), plus `scaler explain` (one GET
and one LIST) for the reasons."""

import json
import os
import subprocess
import sys
import time
from calendar import timegm

import grpc
import pytest

from rig import POLL, REPO
from secured import NS, SCALER
from test_mtls import keda_secret
from testkit import wait_until

sys.path.insert(0, str(REPO / "tests" / "scaler"))
from keda import Keda, metadata  # noqa: E402  (the independent gRPC client of the scaler suite)

CNPG = "postgresql.cnpg.io/v1"
TARGET = 10
MAX = 10
DEADLINE = 5  # seconds: the convergence deadline the stuck scenario uses
MARGIN = 2.0  # seconds: the served answer may lag by one refresh interval (1 s) plus polling


def cluster(namespace: str, name: str, instances: int) -> dict:
    return {"apiVersion": CNPG, "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"instances": instances, "storage": {"size": "1Gi"},
                     "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                                   "limits": {"cpu": "1", "memory": "256Mi"}}}}


def explain(rig, namespace: str, name: str, *extra: str) -> dict:
    r = subprocess.run([rig.scaler_bin, "explain", "--prometheus-url", rig.vm.url,
                        "--namespace", namespace, "--cluster", name, "--target", str(TARGET),
                        "--max-replicas", str(MAX), "--topology", "kube", "--output", "json",
                        *extra],
                       capture_output=True, text=True,
                       env={**os.environ, "KUBECONFIG": str(rig.cp.kubeconfig)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def client(scaler):
    """KEDA's view: the package-wired scaler over mTLS with KEDA's client certificate."""
    auth = keda_secret(scaler.rig)
    creds = grpc.ssl_channel_credentials(root_certificates=auth["caCert"], private_key=auth["tlsClientKey"],
                                         certificate_chain=auth["tlsClientCert"])
    k = Keda(scaler.address, tls=(creds, scaler.certificate(SCALER, NS)["dnsNames"][2]))
    yield k
    k.close()


def served(client, namespace: str, name: str, **md) -> int:
    return client.desired(client.ref(namespace, name, metadata(cluster=name, target=str(TARGET),
                                                               max_replicas=str(MAX), **md)),
                          TARGET)


def test_quota_ceiling_stops_growth_at_what_fits(rig, client):
    ns, name = "tenant-quota", "pg"
    rig.kube.ensure_namespace(ns)
    rig.kube.apply({"apiVersion": "v1", "kind": "ServiceAccount",
                    "metadata": {"name": "default", "namespace": ns}})
    # 2.5 CPUs of requests; three instance pods of 500m each exist: room for two more.
    rig.kube.apply({"apiVersion": "v1", "kind": "ResourceQuota",
                    "metadata": {"name": "tenant", "namespace": ns},
                    "spec": {"hard": {"requests.cpu": "2500m", "pods": "20"}}})
    wait_until(lambda: rig.kube.get("v1", "ResourceQuota", "tenant", ns).get("status", {}).get("used"),
               timeout=30, interval=POLL, what="the quota controller to count the namespace")
    for i in (1, 2, 3):
        rig.kube.apply({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": f"{name}-{i}", "namespace": ns,
                                     "labels": {"cnpg.io/cluster": name, "cnpg.io/podRole": "instance"}},
                        "spec": {"automountServiceAccountToken": False, "containers": [{
                            "name": "postgres", "image": "postgres",
                            "resources": {"requests": {"cpu": "500m", "memory": "256Mi"},
                                          "limits": {"cpu": "1", "memory": "256Mi"}}}]}})
    rig.kube.apply(cluster(ns, name, 3))
    used = lambda: rig.kube.get("v1", "ResourceQuota", "tenant", ns)["status"]["used"]  # noqa: E731
    wait_until(lambda: used().get("requests.cpu") == "1500m", timeout=30, interval=POLL,
               what="quota usage of three 500m pods")
    # 70 active read sessions / target 10: 1 primary + 7 replicas = 8, five more than the 3 there.
    rig.feeder.set(ns, name, connections=70)
    wait_until(lambda: served(client, ns, name) == 5, timeout=30, interval=POLL,
               what="the served count to stop at 3 + 2 that fit")
    report = explain(rig, ns, name)
    d = report["decision"]
    assert (d["desired"], d["reason"], d["raw"]) == (5, "quota", 8), d
    assert (report["quota"]["resource"], report["quota"]["more"], report["quota"]["quota"]) == \
        ("requests.cpu", 2, "tenant")
    text = subprocess.run([rig.scaler_bin, "explain", "--prometheus-url", rig.vm.url,
                           "--namespace", ns, "--cluster", name, "--target", str(TARGET),
                           "--max-replicas", str(MAX), "--topology", "kube"],
                          capture_output=True, text=True,
                          env={**os.environ, "KUBECONFIG": str(rig.cp.kubeconfig)}).stdout
    assert "binding: requests.cpu in ResourceQuota tenant" in text, text
    # The ceiling follows the quota through the watch: raise it and the load decides again.
    rig.kube.merge_patch("v1", "ResourceQuota", "tenant", {"spec": {"hard": {"requests.cpu": "10"}}},
                         namespace=ns)
    wait_until(lambda: served(client, ns, name) == 8, timeout=30, interval=POLL,
               what="the served count to follow the raised quota")
    print(f"\nquota: load asks for 8, quota fits 5 -> served 5 (reason quota); quota raised -> 8")


def not_ready_since(rig, ns: str, name: str) -> float | None:
    status = rig.kube.get(CNPG, "Cluster", name, ns).get("status", {})
    c = next((c for c in status.get("conditions", []) if c["type"] == "Ready"), None)
    if not c or c["status"] != "False":
        return None
    return timegm(time.strptime(c["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ"))


def test_a_scale_up_that_never_converges_is_held_with_backoff_then_recovers(rig, client):
    ns, name = "tenant-stuck", "pg"
    rig.kube.ensure_namespace(ns)
    rig.cnpg.cap_ready(ns, name, 3)
    md = {"convergenceDeadlineSeconds": str(DEADLINE)}

    def answer() -> int | None:
        try:
            return served(client, ns, name, **md)
        except grpc.RpcError:  # the feeder's first push of this Cluster's series is not in yet
            return None

    # Converged at 3; 40 sessions / target 10 ask for 5.
    rig.feeder.set(ns, name, connections=40)
    rig.kube.apply(cluster(ns, name, 3))
    wait_until(lambda: answer() == 5, timeout=30, interval=POLL, what="the load's 5 served")
    assert not_ready_since(rig, ns, name) is None
    # The scale-up (as the HPA writes it): only 3 instances ever become ready.
    rig.kube.merge_patch(CNPG, "Cluster", name, {"spec": {"instances": 5}}, namespace=ns)
    wait_until(lambda: not_ready_since(rig, ns, name), timeout=30, interval=POLL,
               what="the stand-in to report Ready=False")
    t0 = not_ready_since(rig, ns, name)
    # Expected schedule (in deadlines after t0): converging [0,1), hold [1,2), retry [2,3),
    # hold 2x [3,5), retry [5,6).
    samples: list[tuple[float, int]] = []
    while time.time() < t0 + 6 * DEADLINE:
        samples.append((time.time() - t0, served(client, ns, name, **md)))
        time.sleep(0.3)
    D = DEADLINE

    def during(start: float, end: float) -> set[int]:
        return {v for t, v in samples if start * D + MARGIN <= t <= end * D - 0.3}

    assert during(0, 1) <= {5}, samples
    assert during(1, 2) == {3}, samples
    assert during(2, 3) == {5}, samples
    assert during(3, 5) == {3}, samples
    assert during(5, 6) == {5}, samples
    # The holds as served: the second is twice the first (doubling), within the sampling margin.
    runs, start = [], None
    for t, v in samples:
        if v == 3 and start is None:
            start = t
        elif v != 3 and start is not None:
            runs.append(t - start)
            start = None
    assert len(runs) >= 2, (runs, samples)
    assert abs(runs[0] - D) < 2 * MARGIN and abs(runs[1] - 2 * D) < 2 * MARGIN, (runs, samples)
    print(f"\nstuck: t0 + {D}s deadline; served holds lasted {runs[0]:.1f}s and {runs[1]:.1f}s")

    # Inside the third hold (4x, from 6D to 10D): explain agrees with the served answer.
    wait_until(lambda: time.time() > t0 + 6 * D + 0.5, timeout=3 * D, interval=POLL, what="hold 3")
    report = explain(rig, ns, name, "--convergence-deadline-seconds", str(D))
    d = report["decision"]
    assert (d["desired"], d["recommended"], d["reason"]) == (3, 5, "stuck"), d
    assert d["convergence"]["state"] == "hold" and d["convergence"]["attempt"] == 3, d
    assert 2.5 * D < d["convergence"]["remaining_seconds"] <= 4 * D, d

    # The status catches up: the Cluster is Ready again and the load decides at once.
    rig.cnpg.cap_ready(ns, name, None)
    wait_until(lambda: not_ready_since(rig, ns, name) is None, timeout=10, interval=POLL,
               what="Ready=True")
    recovered = time.time()
    wait_until(lambda: served(client, ns, name, **md) == 5, timeout=10, interval=POLL,
               what="the served count back to the load's 5")
    report = explain(rig, ns, name, "--convergence-deadline-seconds", str(D))
    assert (report["decision"]["reason"], report["decision"]["convergence"]["state"]) == \
        ("load", "converged"), report["decision"]
    print(f"recovery: served 5 again {time.time() - recovered:.1f}s after Ready=True")
