"""The scale adapter (`scaler scale-adapter`) as a rig process, run as the package chart's
ServiceAccount with the RBAC the chart renders (conftest.py's `scale_adapter` fixture): what
test_scale_adapter.py examines and what the flip matrix's Redis rows rely on."""

from __future__ import annotations

from pathlib import Path

import requests
import yaml

from rig import POLL
from testkit import Proc, free_port, wait_until

SA = "autoscaling.cozystack.io/v1alpha1"
MANAGER = "cozy-scale-adapter"  # the field manager of its writes to a target
ADAPTER_NS = "cozy-scale-adapter-e2e"
ACCOUNT = "cozy-autoscaling-scale-adapter"
IDENTITY = "adapter-e2e"
MIN_WRITE = 3  # seconds, --min-write-interval of the adapter under test
LEASE = ("coordination.k8s.io/v1", "Lease", "cozy-scale-adapter", ADAPTER_NS)


def as_chart_service_account(rig, package) -> Path:
    """Installs the RBAC the package chart renders for the adapter (scaleAdapter.enabled=true, in
    ADAPTER_NS) and returns a kubeconfig acting as its ServiceAccount, as `kubectl --as` does: the
    adapter then runs with exactly the chart's permissions."""
    helm, chart = package
    rig.kube.ensure_namespace(ADAPTER_NS)
    kinds = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
    objs = [o for o in helm.render(chart, ["scaleAdapter.enabled=true"], keda=False, release="cozy-autoscaling",
                                   namespace=ADAPTER_NS)
            if o["kind"] in kinds and o["metadata"]["name"].startswith(ACCOUNT)]
    assert sorted(o["kind"] for o in objs) == sorted(kinds), objs
    for o in objs:
        if o["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            o["metadata"]["namespace"] = ADAPTER_NS
        rig.kube.apply(o)
    config = yaml.safe_load(rig.cp.kubeconfig.read_text())
    config["users"][0]["user"]["as"] = f"system:serviceaccount:{ADAPTER_NS}:{ACCOUNT}"
    config["users"][0]["user"]["as-groups"] = ["system:serviceaccounts", f"system:serviceaccounts:{ADAPTER_NS}",
                                               "system:authenticated"]
    path = rig.dir / "scale-adapter.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def start(rig, package) -> Proc:
    """The adapter with the chart's RBAC, after the package chart (whose crds/ hold the
    ScaleAdapter CRD) is installed, once it leads; its admin URL is `.admin`."""
    kubeconfig = as_chart_service_account(rig, package)
    admin = free_port()
    proc = rig.group.start("scale-adapter", [
        rig.scaler_bin, "scale-adapter", "--admin-listen", f"127.0.0.1:{admin}", "--sync-interval", "1s",
        "--min-write-interval", f"{MIN_WRITE}s", "--lease-namespace", ADAPTER_NS, "--identity", IDENTITY,
        "--lease-duration", "4s", "--renew-deadline", "3s", "--retry-period", "1s", "--log-level", "info"],
        env={"KUBECONFIG": str(kubeconfig)})
    wait_until(lambda: requests.get(f"http://127.0.0.1:{admin}/readyz", timeout=1).ok,
               timeout=60, interval=POLL, what="scale-adapter /readyz", proc=proc)
    wait_until(lambda: (rig.kube.get(*LEASE) or {}).get("spec", {}).get("holderIdentity") == IDENTITY,
               timeout=30, interval=POLL, what="the adapter to lead")
    proc.admin = f"http://127.0.0.1:{admin}"
    return proc
