"""The package as an operator installs it on the node, shared by the suite's modules:
`charts/cozy-autoscaling` installed with helm as pods of the project's own image (`./run.sh image`,
imported into containerd) in a namespace that enforces restricted PodSecurity, its ScaleAdapter
controller on, its Certificates issued by cert-manager (noderig/certmanager.py); KEDA's operator and
metrics apiserver and cert-manager as processes beside the node."""

from __future__ import annotations

import json
import os
import subprocess
import time

import requests
import yaml

from charts import package_chart
from helm import Helm
from placement import MWC
from rig import REPO, binary, install_crds, keda
from secured import CERT_MANAGER_NS, FLUX_NS, VALUES
from testkit import crd_files, versions, wait_until

from . import certmanager, images

NS = RELEASE = "cozy-autoscaling"
REPOSITORY = "ghcr.io/cozystack/cozy-autoscaling"
# Where tests/node/run.sh has `./run.sh image` stage the image and its binaries.
IMAGE_DIR = REPO / os.environ.get("COZY_IMAGE_DIR", "target/image")
# The scaler's Service as KEDA dials it (the charts' default scalerAddress).
SCALER_ADDRESS = f"{RELEASE}-scaler.{NS}.svc:6000"
SCALE_ADAPTER = "autoscaling.cozystack.io/v1alpha1"


def image_archive():
    """What `./run.sh image` wrote for the chart's appVersion."""
    version = yaml.safe_load((package_chart() / "Chart.yaml").read_text())["appVersion"]
    path = IMAGE_DIR / f"cozy-autoscaling-{version}.oci.tar"
    assert path.is_file(), f"{path} is missing: run ./run.sh image"
    return path


def install(node, metrics) -> dict:
    """Installs the package and waits for its Deployments; returns the image and what was issued."""
    kube, t = node.kube, time.monotonic()
    ref = images.import_oci_archive(image_archive(), node.node.containerd_sock, REPOSITORY)
    repository, tag = ref.rsplit(":", 1)
    install_crds(kube, crd_files("keda", "helm-controller", "source-controller", "cert-manager"))
    kube.ensure_namespace(NS, {"pod-security.kubernetes.io/enforce": "restricted",
                               "pod-security.kubernetes.io/enforce-version": "latest"})
    for ns in (FLUX_NS, CERT_MANAGER_NS, keda.NAMESPACE):
        kube.ensure_namespace(ns)
    cert_manager = certmanager.CertManager(node, CERT_MANAGER_NS)
    values = {**VALUES,
              "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
              "scaler": {"replicas": 1, "prometheusUrl": metrics.url, "refreshInterval": "2s",
                         "staleness": "30s", "logLevel": "debug"},
              "webhook": {"replicas": 1}, "shardController": {"replicas": 1},
              # Writes on a test's time scale (the chart's defaults: 30 s apart, synced every 5 s).
              "scaleAdapter": {"enabled": True, "replicas": 1, "minWriteInterval": "5s", "syncInterval": "1s"}}
    Helm(node.dir / "helm", kubeconfig=node.cp.kubeconfig).upgrade_install(RELEASE, package_chart(), NS, values)
    t_issue = time.monotonic()
    issued = cert_manager.wait_issued((CERT_MANAGER_NS, NS, keda.NAMESPACE))
    cert_manager.wait_injected("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", MWC)
    node.timings["package's Certificates issued by cert-manager"] = time.monotonic() - t_issue

    def available():
        deployments = kube.list("apps/v1", "Deployment", NS)
        return deployments and all(d["status"].get("availableReplicas") == d["spec"]["replicas"]
                                   for d in deployments) and deployments
    try:
        wait_until(available, timeout=180, interval=1, what="the package's Deployments available")
    except TimeoutError as e:
        pods = {p["metadata"]["name"]: p["status"] for p in kube.list("v1", "Pod", NS)}
        events = [f"{e['involvedObject']['name']}: {e['reason']} {e['message']}" for e in kube.list("v1", "Event", NS)]
        raise TimeoutError(f"{e}\npods: {pods}\nevents: {events[-20:]}") from None
    node.timings["package installed, pods available"] = time.monotonic() - t
    return {"image": ref, "issued": issued, "prometheus_url": metrics.url}


def scaler_cli(node, *args) -> dict:
    """The package image's own `scaler` binary (what `./run.sh image` staged), as an operator runs
    it from a workstation: the admin kubeconfig, JSON output."""
    r = subprocess.run([str(IMAGE_DIR / "scaler"), *args], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "KUBECONFIG": str(node.cp.kubeconfig)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def start_keda(node) -> None:
    v, t = versions(), time.monotonic()
    keda.start(node.cp, binary("keda-operator", v["KEDA_VERSION"]), binary("keda-adapter", v["KEDA_VERSION"]),
               node.group)
    node.timings["KEDA available"] = time.monotonic() - t


def scaler_admin(kube) -> str:
    [pod] = kube.list("v1", "Pod", NS, selector="app.kubernetes.io/component=scaler")
    return f"http://{pod['status']['podIP']}:9090"


def decisions(kube, namespace: str, scaled_object: str) -> list[dict]:
    """The scaler pod's /decisions entries for a ScaledObject: one per metadata it was asked with
    (a metadata change leaves the earlier entry in its cache until it ages out)."""
    answer = requests.get(f"{scaler_admin(kube)}/decisions?namespace={namespace}", timeout=5).json()
    found = [e for e in answer["entries"] if e["scaledObject"] == scaled_object]
    assert found, answer
    return found


def latest_decision(kube, namespace: str, scaled_object: str) -> dict:
    return max(decisions(kube, namespace, scaled_object), key=lambda e: e["lastEvaluation"] or "")


def scaler_events(kube, namespace: str, regarding: str) -> set[str]:
    return {e["reason"] for e in kube.list("events.k8s.io/v1", "Event", namespace)
            if e.get("reportingController") == "cozy-autoscaling-scaler" and e["regarding"]["name"] == regarding}


def pod_ready(pod: dict) -> bool:
    """Ready and not being deleted."""
    return (not pod["metadata"].get("deletionTimestamp")
            and any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", [])))


def adapter_scale(kube, namespace: str, name: str) -> dict:
    """A ScaleAdapter's /scale status once the controller has synced it (a selector written)."""
    def synced():
        status = (kube.get(SCALE_ADAPTER, "ScaleAdapter", name, namespace, sub="scale") or {}).get("status", {})
        return "selector" in status and status
    return wait_until(synced, timeout=60, interval=1, what=f"the ScaleAdapter {namespace}/{name}'s /scale status synced")
