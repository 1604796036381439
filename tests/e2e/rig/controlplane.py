"""etcd + kube-apiserver (aggregation, service-account keys, RBAC) + kube-controller-manager (HPA, ResourceQuota usage),
all on loopback.

Services get ClusterIPs from a random 127.x.y.0/24 range: without kube-proxy the apiserver dials a
webhook's or APIService's ClusterIP:port itself (aggregator routing off), and every 127/8 address is
local on Linux, so a backend that binds <clusterIP>:<port> is reached exactly as in a cluster, with
no root-only address changes and no traffic off loopback.

With a `NodeNetwork` the same control plane serves a real node (tests/node): it listens inside the
node's network namespace, advertises the node's address (so pods reach the `kubernetes` Service),
reaches the kubelet, and runs every controller a node's pods need."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import requests

from testkit import CA, Pair, free_port, openssl, wait_until

from .kube import Kube
from .procs import POLL, Group


@dataclass(frozen=True)
class NodeNetwork:
    """The addresses of a real node's network namespace."""
    ip: str  # the node's own address: apiserver, kubelet
    service_prefix: str  # Services get <prefix>.<n> of <prefix>.0/24; .1 is `kubernetes`, .10 DNS


@dataclass
class Binaries:
    etcd: Path
    apiserver: Path
    controller_manager: Path | None  # None: start_apiserver() only


def service_account_keys(directory: Path) -> Pair:
    """The key pair the apiserver signs and verifies service-account tokens with."""
    key, pub = directory / "sa.key", directory / "sa.pub"
    openssl("genrsa", "-out", str(key), "2048")
    openssl("rsa", "-in", str(key), "-pubout", "-out", str(pub))
    return Pair(pub, key)


class ControlPlane:
    def __init__(self, bins: Binaries, workdir: Path, group: Group, node: NodeNetwork | None = None):
        self.bins = bins
        self.dir = workdir
        self.group = group
        self.pki = workdir / "pki"
        self.node = node
        self.host = node.ip if node else "127.0.0.1"
        if node:
            self.service_prefix = node.service_prefix
        else:
            octets = (random.randint(100, 250), random.randint(0, 255))
            self.service_prefix = f"127.{octets[0]}.{octets[1]}"
        self.service_cidr = f"{self.service_prefix}.0/24"
        self._next_ip = 10

    def service_ip(self) -> str:
        """A fresh ClusterIP for a Service the rig creates with an explicit spec.clusterIP."""
        self._next_ip += 1
        return f"{self.service_prefix}.{self._next_ip}"

    # ------------------------------------------------------------------------------------
    def start(self) -> Kube:
        """The whole control plane: start_apiserver() plus kube-controller-manager (HPA)."""
        self.start_apiserver()
        self._start_controller_manager()
        return self.kube

    def start_apiserver(self) -> Kube:
        """etcd and kube-apiserver only, for tests of the API itself (no controllers run); then
        `kube` and `kubeconfig` are the admin client and its kubeconfig."""
        self._make_pki()
        self._start_etcd()
        self._start_apiserver()
        return self.kube

    def _make_pki(self) -> None:
        self.ca = CA(self.pki, "cluster")
        self.front_proxy_ca = CA(self.pki, "front-proxy")
        self.serving = self.ca.issue(
            "apiserver", "kube-apiserver",
            hosts=(*dict.fromkeys(("127.0.0.1", self.host)), "localhost", f"{self.service_prefix}.1", "kubernetes",
                   "kubernetes.default", "kubernetes.default.svc"))
        self.admin = self.ca.issue("admin", "e2e-admin", org="system:masters", client=True)
        self.proxy_client = self.front_proxy_ca.issue("front-proxy-client", "front-proxy-client",
                                                      client=True)
        self.sa = service_account_keys(self.pki)

    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.etcd_url = f"http://127.0.0.1:{client}"
        proc = self.group.start("etcd", [
            self.bins.etcd, "--data-dir", self.dir / "etcd", "--name", "e2e",
            "--listen-client-urls", self.etcd_url, "--advertise-client-urls", self.etcd_url,
            "--listen-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
            "--initial-cluster", f"e2e=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--unsafe-no-fsync", "--log-level", "warn"])
        wait_until(lambda: requests.get(f"{self.etcd_url}/health", timeout=2).ok,
                   timeout=30, interval=POLL, what="etcd /health", proc=proc)

    def _start_apiserver(self) -> None:
        port = free_port()
        self.server = f"https://{self.host}:{port}"
        if self.node:
            # Pods reach the apiserver through the `kubernetes` Service, so its Endpoints are kept;
            # the apiserver reaches the kubelet (logs, exec) with the admin identity.
            mode = ["--endpoint-reconciler-type", "lease",
                    "--kubelet-client-certificate", self.admin.cert, "--kubelet-client-key", self.admin.key,
                    "--kubelet-certificate-authority", self.ca.cert,
                    "--enable-admission-plugins", "NodeRestriction"]
        else:
            # The loopback advertise address is not a valid Endpoints IP; no in-cluster clients
            # use the kubernetes Service here, so its Endpoints are not maintained.
            mode = ["--endpoint-reconciler-type", "none"]
        proc = self.group.start("kube-apiserver", [
            self.bins.apiserver,
            "--etcd-servers", self.etcd_url,
            "--bind-address", self.host, "--secure-port", port, "--advertise-address", self.host,
            *mode,
            "--cert-dir", self.dir / "apiserver-certs",
            "--tls-cert-file", self.serving.cert, "--tls-private-key-file", self.serving.key,
            "--client-ca-file", self.ca.cert,
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", self.sa.cert,
            "--service-account-signing-key-file", self.sa.key,
            "--service-cluster-ip-range", self.service_cidr,
            "--authorization-mode", "Node,RBAC",
            # Aggregation (front-proxy): the apiserver authenticates to extension apiservers
            # (KEDA's metrics adapter) with this client cert and forwards the user in headers.
            "--requestheader-client-ca-file", self.front_proxy_ca.cert,
            "--requestheader-allowed-names", "front-proxy-client",
            "--requestheader-username-headers", "X-Remote-User",
            "--requestheader-group-headers", "X-Remote-Group",
            "--requestheader-extra-headers-prefix", "X-Remote-Extra-",
            "--proxy-client-cert-file", self.proxy_client.cert,
            "--proxy-client-key-file", self.proxy_client.key,
            "--enable-aggregator-routing=false",
            "--profiling=false", "--v=1"])
        self.kube = Kube(self.server, str(self.ca.cert), str(self.admin.cert), str(self.admin.key))
        wait_until(lambda: self.kube.request("GET", "/readyz") == "ok",
                   timeout=120, interval=POLL, what="kube-apiserver /readyz", proc=proc)
        self.kubeconfig = self.write_kubeconfig(self.dir / "admin.kubeconfig", self.admin)

    def write_kubeconfig(self, path: Path, client: Pair) -> Path:
        path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {{server: "{self.server}", certificate-authority: "{self.ca.cert}"}}
users:
- name: e2e
  user: {{client-certificate: "{client.cert}", client-key: "{client.key}"}}
contexts:
- name: e2e
  context: {{cluster: e2e, user: e2e, namespace: default}}
current-context: e2e
""")
        return path

    def _start_controller_manager(self) -> None:
        kc = self.kubeconfig
        if self.node:
            # Every default controller (Deployments, EndpointSlices, Jobs, service accounts, the
            # kube-root-ca.crt ConfigMap, PersistentVolume binding): the node runs real pods.
            controllers = ["--controllers", "*", "--root-ca-file", self.ca.cert,
                           "--service-account-private-key-file", self.sa.key,
                           "--cluster-signing-cert-file", self.ca.cert,
                           "--cluster-signing-key-file", self.ca.key]
        else:
            # clusterrole-aggregation fills the built-in view/edit/admin roles from labelled
            # ClusterRoles (the package's tenant read access).
            controllers = ["--controllers",
                           "horizontalpodautoscaling,garbagecollector,namespace,resourcequota,clusterrole-aggregation"]
        proc = self.group.start("kube-controller-manager", [
            self.bins.controller_manager,
            "--kubeconfig", kc, "--authentication-kubeconfig", kc, "--authorization-kubeconfig", kc,
            "--bind-address", "127.0.0.1", "--secure-port", free_port(),
            *controllers,
            # Fast HPA loop so scenarios take seconds, not minutes.
            "--horizontal-pod-autoscaler-sync-period", "3s",
            "--leader-elect=false", "--v=2"])
        # Ready when it has written its first events/leases is hard to observe; its healthz is.
        wait_until(lambda: proc.alive() and proc.log.stat().st_size > 0,
                   timeout=30, interval=POLL, what="kube-controller-manager running", proc=proc)
