"""KEDA's operator and metrics apiserver as processes, registered as the external metrics APIService
through a real Service (ClusterIP on loopback, see controlplane.py)."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path

from testkit import CA, Proc, free_port, wait_until

from .controlplane import ControlPlane
from .procs import POLL, Group

NAMESPACE = "keda"
ADAPTER_SERVICE = "keda-operator-metrics-apiserver"
APISERVICE = "v1beta1.external.metrics.k8s.io"


@dataclass
class Keda:
    operator: Proc
    adapter: Proc
    operator_metrics: str  # the operator's /metrics (keda_scaler_detail_errors_total, ...)


def available(kube) -> bool:
    svc = kube.get("apiregistration.k8s.io/v1", "APIService", APISERVICE) or {}
    return any(c["type"] == "Available" and c["status"] == "True"
               for c in svc.get("status", {}).get("conditions", []))


def start(cp: ControlPlane, operator_bin: Path, adapter_bin: Path, group: Group) -> Keda:
    kube = cp.kube
    kube.ensure_namespace(NAMESPACE)
    ip = cp.service_ip()
    # One cert dir for both: KEDA's operator<->adapter gRPC reads ca.crt/tls.crt/tls.key from it,
    # and the same pair serves the adapter's HTTPS to the aggregator.
    cert_dir = cp.dir / "keda-certs"
    ca = CA(cert_dir, "keda")
    pair = ca.issue("tls", "keda", hosts=(
        f"{ADAPTER_SERVICE}.{NAMESPACE}.svc", f"keda-operator.{NAMESPACE}.svc.cluster.local",
        "localhost", "127.0.0.1", ip))
    (cert_dir / "ca.crt").write_bytes(ca.cert.read_bytes())
    env = {"KUBECONFIG": str(cp.kubeconfig), "WATCH_NAMESPACE": "", "POD_NAMESPACE": NAMESPACE,
           "KEDA_CLUSTER_OBJECT_NAMESPACE": NAMESPACE, "POD_NAME": "keda-operator"}
    grpc_port, metrics_port = free_port(), free_port()
    operator = group.start("keda-operator", [
        operator_bin, "--metrics-bind-address", f"127.0.0.1:{metrics_port}",
        "--health-probe-bind-address", f"127.0.0.1:{free_port()}",
        "--metrics-service-bind-address", f"127.0.0.1:{grpc_port}",
        "--cert-dir", cert_dir, "--ca-dir", cert_dir, "--enable-cert-rotation=false",
        "--leader-elect=false", "--zap-log-level=info", "--zap-encoder=console"], env=env)
    kc = str(cp.kubeconfig)
    # On a real node kube-proxy routes the ClusterIP to the EndpointSlice's address, so the
    # adapter listens on the node's address; on loopback the rig's apiserver dials the ClusterIP.
    bind, port = (cp.host, free_port()) if cp.node else (ip, 443)
    adapter = group.start("keda-adapter", [
        adapter_bin, "--secure-port", port, "--bind-address", bind,
        "--tls-cert-file", pair.cert, "--tls-private-key-file", pair.key, "--cert-dir", cert_dir,
        "--metrics-service-address", f"127.0.0.1:{grpc_port}", "--port", free_port(),
        "--lister-kubeconfig", kc, "--authentication-kubeconfig", kc,
        "--authorization-kubeconfig", kc, "--v=1"], env=env)
    kube.apply({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE},
                "spec": {"clusterIP": ip, "ports": [{"name": "https", "port": 443,
                                                     "targetPort": port}]}})
    # The aggregator's availability check wants a ready EndpointSlice behind a ClusterIP Service
    # (the endpointslice controller would write the adapter pod's IP). On loopback traffic never
    # goes there: with aggregator routing off the apiserver dials the ClusterIP. Loopback IPs are
    # rejected in EndpointSlices, so the placeholder is from the documentation range (RFC 5737),
    # never dialed.
    endpoint = cp.host if cp.node else "192.0.2.10"
    kube.apply({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": f"{ADAPTER_SERVICE}-rig", "namespace": NAMESPACE,
                             "labels": {"kubernetes.io/service-name": ADAPTER_SERVICE}},
                "addressType": "IPv4",
                "endpoints": [{"addresses": [endpoint], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}]})
    kube.apply({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": APISERVICE},
                "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1",
                         "groupPriorityMinimum": 100, "versionPriority": 100,
                         "caBundle": base64.b64encode(ca.cert.read_bytes()).decode(),
                         "service": {"name": ADAPTER_SERVICE, "namespace": NAMESPACE,
                                     "port": 443}}})
    wait_until(lambda: available(kube), timeout=90, interval=POLL,
               what=f"APIService {APISERVICE} Available", proc=adapter)
    return Keda(operator, adapter, f"http://127.0.0.1:{metrics_port}/metrics")
