"""The package as the platform installs it (real helm) and the scaler as it runs there: gRPC over
mutual TLS with KEDA, wired by the package's own objects (its Certificates, its
ClusterTriggerAuthentication, the Deployment's --tls-* arguments).

Stand-ins, named as such: no cert-manager runs in the rig, so `SecuredScaler` does its work for the
package's Certificates (a test CA per issuer, in place of the server CA behind the ClusterIssuer and
the client CA behind KEDA's namespaced Issuer, signs what each Certificate asks for, and signs anew
when a Certificate's issuer changes; each Secret gets the keys cert-manager writes: ca.crt, tls.crt,
tls.key) and the kubelet's (the scaler's Secret, read back from the API, becomes the files of its
volume; the process talks to the API server as its ServiceAccount, impersonated, so the package's
RBAC is what it gets). No cluster DNS either:
the scaler listens on its Service's ClusterIP, which the serving certificate carries as an extra IP
SAN, and ScaledObjects dial that IP."""

from __future__ import annotations

import base64
import os
import socket
import ssl
from pathlib import Path

import requests
import yaml
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
# Carries the server CA into KEDA's namespace (the package of this commit; earlier ones used the
# client certificate's ca.crt, from the one CA that signed both).
CA_BUNDLE = "cozy-autoscaling-scaler-ca-bundle"
SERVICE_ACCOUNT = f"system:serviceaccount:{NS}:{SCALER}"
# The issuers the package's Certificates may name: (kind, name, namespace of an Issuer).
SERVER_ISSUER = ("ClusterIssuer", "cozy-autoscaling-scaler-ca", None)
CLIENT_ISSUER = ("Issuer", "cozy-autoscaling-keda-client-ca", keda.NAMESPACE)
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
        # One test CA per issuer, made on first use (their real CAs live where nothing runs here).
        self.cas: dict[tuple, CA] = {}
        # (namespace, Certificate) -> the issuer that signed its Secret last.
        self.issued: dict[tuple[str, str], tuple] = {}
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
        return cert["spec"]

    def issuer(self, spec: dict, namespace: str) -> tuple:
        ref = spec["issuerRef"]
        key = (ref["kind"], ref["name"], namespace if ref["kind"] == "Issuer" else None)
        assert key in (SERVER_ISSUER, CLIENT_ISSUER), f"an issuer the package does not define: {ref}"
        return key

    def ca(self, issuer: tuple) -> CA:
        if issuer not in self.cas:
            self.cas[issuer] = CA(self.dir, self._next(issuer[1]))
        return self.cas[issuer]

    @property
    def server_ca(self) -> CA:
        return self.ca(SERVER_ISSUER)

    @property
    def client_ca(self) -> CA:
        """The CA that signs KEDA's client certificate under the installed chart."""
        return self.ca(self.issuer(self.certificate(KEDA_CLIENT, keda.NAMESPACE), keda.NAMESPACE))

    def _store(self, name: str, namespace: str, pair: Pair, ca: CA) -> None:
        data = {"ca.crt": ca.cert, "tls.crt": pair.cert, "tls.key": pair.key}
        self.kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                         "metadata": {"name": name, "namespace": namespace},
                         "data": {k: base64.b64encode(p.read_bytes()).decode() for k, p in data.items()}},
                        manager="cert-manager")

    def _next(self, stem: str) -> str:
        self._serial += 1
        return f"{stem}-{self._serial}"

    def _issue(self, name: str, namespace: str, sign) -> None:
        spec = self.certificate(name, namespace)
        issuer = self.issuer(spec, namespace)
        ca = self.ca(issuer)
        self._store(spec["secretName"], namespace, sign(spec, ca), ca)
        self.issued[(namespace, name)] = issuer

    def issue_server(self) -> bytes:
        """Issues (or renews: a new key every time, rotationPolicy Always) the serving certificate
        and updates its Secret and the pod's volume. Returns the new certificate (PEM)."""
        def sign(spec, ca):
            assert "server auth" in spec["usages"], spec
            return ca.issue(self._next("scaler"), spec["dnsNames"][0], hosts=(*spec["dnsNames"], self.ip))
        self._issue(SCALER, NS, sign)
        spec = self.certificate(SCALER, NS)
        self._project(spec["secretName"])
        return (self.volume / "tls.crt").read_bytes()

    def issue_keda_client(self) -> None:
        def sign(spec, ca):
            assert "client auth" in spec["usages"], spec
            return ca.issue(self._next("keda-client"), spec["commonName"], client=True)
        self._issue(KEDA_CLIENT, keda.NAMESPACE, sign)
        if self.kube.get(CERT, "Certificate", CA_BUNDLE, keda.NAMESPACE):
            self._issue(CA_BUNDLE, keda.NAMESPACE,
                        lambda spec, ca: ca.issue(self._next("ca-bundle"), spec["commonName"]))

    def sync(self) -> None:
        """What cert-manager does when a Certificate's issuer changed (a package upgrade): signs
        it again from its new issuer."""
        for name, ns, issue in ((KEDA_CLIENT, keda.NAMESPACE, self.issue_keda_client),
                                (SCALER, NS, self.issue_server)):
            if self.issued.get((ns, name)) != self.issuer(self.certificate(name, ns), ns):
                issue()

    def replace_ca(self) -> bytes:
        """New CAs on both sides, as after the CA Secrets were lost and re-created: every Secret
        re-issued from them and the scaler's volume updated (the scaler then trusts only them).
        Returns the new serving certificate (PEM)."""
        self.cas = {}
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
        # This commit's chart, or an earlier one's (one CA, its ca.crt mounted).
        assert {a.split("=")[0] for a in args} in (
            {"--tls-cert", "--tls-key", "--tls-client-ca-secret", "--tls-client-identity"},
            {"--tls-cert", "--tls-key", "--tls-client-ca"}), args
        return args

    def kubeconfig(self) -> Path:
        """The rig's admin kubeconfig, impersonating the scaler's ServiceAccount (what its pod's
        token would be)."""
        config = yaml.safe_load(Path(self.rig.cp.kubeconfig).read_text())
        for user in config["users"]:
            user["user"]["as"] = SERVICE_ACCOUNT
        path = self.rig.dir / "scaler-sa.kubeconfig"
        path.write_text(yaml.safe_dump(config))
        return path

    # -- the process -----------------------------------------------------------------------
    def start(self, as_service_account: bool = True) -> "SecuredScaler":
        """`as_service_account=False` runs it with the rig's admin credentials: for an earlier
        chart, whose RBAC was written for its own image, not for this binary."""
        self.sync()
        admin = free_port()
        self.admin = f"http://127.0.0.1:{admin}"
        self.proc = self.rig.group.start("scaler", [
            self.rig.scaler_bin, "serve", "--listen", self.address,
            "--admin-listen", f"127.0.0.1:{admin}", "--prometheus-url", self.rig.vm.url,
            "--topology", "kube", "--refresh-interval", "1s", "--staleness", "5s",
            # Its ScaledObjects name it by the Service's IP: what its warm start looks for.
            "--scaler-address", self.address,
            "--log-level", "debug", *self.tls_args()],
            env={"KUBECONFIG": str(self.kubeconfig() if as_service_account else self.rig.cp.kubeconfig)})
        wait_until(lambda: requests.get(f"{self.admin}/readyz", timeout=1).ok,
                   timeout=30, interval=POLL, what="scaler /readyz", proc=self.proc)
        return self

    def restart(self, as_service_account: bool = True) -> None:
        """A rollout: the old process goes (KEDA's connection breaks), a new one serves the same
        address from the same volume."""
        self.proc.stop()
        self.start(as_service_account)

    def ok_requests(self) -> float:
        """gRPC requests this process answered with OK (its /metrics)."""
        return promtext.total(promtext.scrape(f"{self.admin}/metrics", timeout=2),
                              "scaler_grpc_requests_total", code="OK")

    def client_context(self, cert: Path | None = None, key: Path | None = None,
                       ca: Path | None = None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(ca or self.server_ca.cert))
        ctx.set_alpn_protocols(["h2"])
        if cert:
            ctx.load_cert_chain(str(cert), str(key))
        return ctx

    def served_certificate(self) -> bytes:
        """The certificate a new connection gets now (DER), through a handshake as KEDA makes it."""
        pair = self.client_ca.issue(self._next("probe"), "keda-operator", client=True)
        ctx = self.client_context(pair.cert, pair.key)
        server_name = self.certificate(SCALER, NS)["dnsNames"][2]
        with socket.create_connection((self.ip, self.port), timeout=3) as raw:
            with ctx.wrap_socket(raw, server_hostname=server_name) as tls:
                return tls.getpeercert(binary_form=True)
