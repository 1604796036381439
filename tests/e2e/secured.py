"""The package as the platform installs it (real helm) and the scaler as it runs there: gRPC over
mutual TLS with KEDA, wired by the package's own objects (its Certificates, its
ClusterTriggerAuthentication, the Deployment's --tls-* arguments).

Stand-ins, named as such: no cert-manager runs in the rig, so `SecuredScaler` does its work for the
package's Certificates (a test CA in place of the ClusterIssuer's CA signs what each Certificate asks
for; each Secret gets the keys cert-manager writes: ca.crt, tls.crt, tls.key) and the kubelet's (the
scaler's Secret, read back from the API, becomes the files of its volume). No cluster DNS either:
the scaler listens on its Service's ClusterIP, which the serving certificate carries as an extra IP
SAN, and ScaledObjects dial that IP."""

from __future__ import annotations

import base64
import os
import socket
import ssl
from pathlib import Path

import requests
import promtext
from charts import package_chart
from helm import Helm
from rig import POLL, keda
from testkit import CA, Pair, free_port, wait_until

NS = RELEASE = "cozy-autoscaling"
FLUX_NS = "cozy-fluxcd"
CERT_MANAGER_NS = "cert-manager"
SHARDS = 2
VALUES = {
    "flux": {"namespace": FLUX_NS},
    "shards": {"count": SHARDS},
    # KEDA's operator runs with KEDA_CLUSTER_OBJECT_NAMESPACE=keda (rig/keda.py).
    "keda": {"namespace": keda.NAMESPACE},
    "certManager": {"namespace": CERT_MANAGER_NS},
    # No Prometheus operator CRDs in the rig.
    "monitoring": {"scrape": "none", "alerts": {"enabled": False}},
}
SCALER = "cozy-autoscaling-scaler"
KEDA_CLIENT = "cozy-autoscaling-keda-client"
CERT = "cert-manager.io/v1"
VOLUME = "/tls/"


def install_package(rig) -> tuple[Helm, Path]:
    chart = package_chart()
    for ns in (FLUX_NS, CERT_MANAGER_NS):
        rig.kube.ensure_namespace(ns)
    helm = Helm(rig.dir / "helm", kubeconfig=rig.cp.kubeconfig)
    helm.upgrade_install(RELEASE, chart, NS, VALUES)
    return helm, chart


def pem(secret: dict, key: str) -> bytes:
    return base64.b64decode(secret["data"][key])


class SecuredScaler:
    """`scaler serve` with the package's TLS arguments, its certificates issued from the package's
    Certificate objects."""

    def __init__(self, rig):
        self.rig = rig
        self.kube = rig.kube
        self.dir = rig.dir / "scaler-pki"
        # Stands in for ClusterIssuer cozy-autoscaling-scaler-ca (its CA lives in cert-manager's
        # namespace, where nothing runs here).
        self.ca = CA(self.dir, "package")
        svc = self.kube.get("v1", "Service", SCALER, NS)
        self.ip = svc["spec"]["clusterIP"]
        self.port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "grpc")
        self.address = f"{self.ip}:{self.port}"
        self.volume = rig.dir / "scaler-tls-volume"
        self.admin = ""
        self.proc = None
        self._serial = 0

    # -- cert-manager's part ---------------------------------------------------------------
    def certificate(self, name: str, namespace: str) -> dict:
        cert = self.kube.get(CERT, "Certificate", name, namespace)
        assert cert, f"the package has no Certificate {namespace}/{name}"
        issuer = cert["spec"]["issuerRef"]
        assert issuer == {"name": "cozy-autoscaling-scaler-ca", "kind": "ClusterIssuer"}, issuer
        return cert["spec"]

    def _store(self, name: str, namespace: str, pair: Pair, ca: CA) -> None:
        data = {"ca.crt": ca.cert, "tls.crt": pair.cert, "tls.key": pair.key}
        self.kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                         "metadata": {"name": name, "namespace": namespace},
                         "data": {k: base64.b64encode(p.read_bytes()).decode() for k, p in data.items()}},
                        manager="cert-manager")

    def _next(self, stem: str) -> str:
        self._serial += 1
        return f"{stem}-{self._serial}"

    def issue_server(self) -> bytes:
        """Issues (or renews: a new key every time, rotationPolicy Always) the serving certificate
        and updates its Secret and the pod's volume. Returns the new certificate (PEM)."""
        spec = self.certificate(SCALER, NS)
        assert "server auth" in spec["usages"], spec
        pair = self.ca.issue(self._next("scaler"), spec["dnsNames"][0], hosts=(*spec["dnsNames"], self.ip))
        self._store(spec["secretName"], NS, pair, self.ca)
        self._project(spec["secretName"])
        return pair.cert.read_bytes()

    def issue_keda_client(self) -> None:
        spec = self.certificate(KEDA_CLIENT, keda.NAMESPACE)
        assert "client auth" in spec["usages"], spec
        pair = self.ca.issue(self._next("keda-client"), spec["commonName"], client=True)
        self._store(spec["secretName"], keda.NAMESPACE, pair, self.ca)

    def replace_ca(self) -> bytes:
        """A new CA on both sides, as after the CA Secret was lost and re-created: both Secrets
        re-issued from it and the scaler's volume updated (the scaler then trusts only it).
        Returns the new serving certificate (PEM)."""
        self.ca = CA(self.dir, self._next("package"))
        self.issue_keda_client()
        return self.issue_server()

    # -- the kubelet's part ----------------------------------------------------------------
    def _project(self, secret_name: str) -> None:
        """Writes the Secret's keys as files, each replaced by rename (key first) so the scaler's
        reload never reads half a pair."""
        secret = self.kube.get("v1", "Secret", secret_name, NS)
        self.volume.mkdir(parents=True, exist_ok=True)
        for key in ("tls.key", "tls.crt", "ca.crt"):
            tmp = self.volume / f".{key}.new"
            tmp.write_bytes(pem(secret, key))
            os.replace(tmp, self.volume / key)

    def tls_args(self) -> list[str]:
        """The Deployment's --tls-* arguments, with the Secret volume's mount path mapped here."""
        pod = self.kube.get("apps/v1", "Deployment", SCALER, NS)["spec"]["template"]["spec"]
        [container] = pod["containers"]
        [mount] = container["volumeMounts"]
        [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["secret"]["secretName"] == self.certificate(SCALER, NS)["secretName"]
        assert mount["mountPath"] + "/" == VOLUME
        args = [a.replace(VOLUME, f"{self.volume}/") for a in container["args"] if a.startswith("--tls-")]
        assert {a.split("=")[0] for a in args} == {"--tls-cert", "--tls-key", "--tls-client-ca"}, args
        return args

    # -- the process -----------------------------------------------------------------------
    def start(self) -> "SecuredScaler":
        if self.proc is None:
            self.issue_server()
            self.issue_keda_client()
        admin = free_port()
        self.admin = f"http://127.0.0.1:{admin}"
        self.proc = self.rig.group.start("scaler", [
            self.rig.scaler_bin, "serve", "--listen", self.address,
            "--admin-listen", f"127.0.0.1:{admin}", "--prometheus-url", self.rig.vm.url,
            "--topology", "kube", "--refresh-interval", "1s", "--staleness", "5s",
            "--log-level", "debug", *self.tls_args()],
            env={"KUBECONFIG": str(self.rig.cp.kubeconfig)})
        wait_until(lambda: requests.get(f"{self.admin}/readyz", timeout=1).ok,
                   timeout=30, interval=POLL, what="scaler /readyz", proc=self.proc)
        return self

    def restart(self) -> None:
        """A rollout: the old process goes (KEDA's connection breaks), a new one serves the same
        address from the same volume."""
        self.proc.stop()
        self.start()

    def ok_requests(self) -> float:
        """gRPC requests this process answered with OK (its /metrics)."""
        return promtext.total(promtext.scrape(f"{self.admin}/metrics", timeout=2),
                              "scaler_grpc_requests_total", code="OK")

    def client_context(self, cert: Path | None = None, key: Path | None = None,
                       ca: Path | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca or self.ca.cert))
        ctx.set_alpn_protocols(["h2"])
        if cert:
            ctx.load_cert_chain(str(cert), str(key))
        return ctx

    def served_certificate(self) -> bytes:
        """The certificate a new connection gets now (DER), through a handshake as KEDA makes it."""
        pair = self.ca.issue("probe", "probe", client=True)
        ctx = self.client_context(pair.cert, pair.key)
        server_name = self.certificate(SCALER, NS)["dnsNames"][2]
        with socket.create_connection((self.ip, self.port), timeout=3) as raw:
            with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
                return tls.getpeercert(binary_form=True)
