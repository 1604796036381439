"""cert-manager on the real node: its controller and cainjector, built from cert-manager's own Go
module (tests/node/tools/certmanager: upstream's controllers and injectors, wired by a `main` of
ours because upstream's lives in a nested module the module proxy does not serve; docs/e2e.md),
run as processes beside the node like KEDA, with the cluster's admin kubeconfig.

The package's Certificates are issued by them: `selfSigned` for its CAs, `ca` Issuers and a
ClusterIssuer for the leaves; the cainjector writes the webhook's CA bundle."""

from __future__ import annotations

import base64
from pathlib import Path

from testkit import versions, wait_until

from . import source_build

CERT = "cert-manager.io/v1"
INJECT_FROM = "cert-manager.io/inject-ca-from"


def _binary(part: str) -> Path:
    """The build of upstream's version with our mains' sources (tests/node/setup.sh)."""
    return source_build(f"cert-manager-{part}-{versions()['CERT_MANAGER_VERSION']}")


def _ready(cert: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in cert.get("status", {}).get("conditions", []))


class CertManager:
    def __init__(self, node, cluster_resource_namespace: str):
        kubeconfig = str(node.cp.kubeconfig)
        self.kube = node.kube
        self.controller = node.group.start("cert-manager-controller", [
            _binary("controller"), "--kubeconfig", kubeconfig,
            "--cluster-resource-namespace", cluster_resource_namespace])
        self.cainjector = node.group.start("cert-manager-cainjector", [
            _binary("cainjector"), "--kubeconfig", kubeconfig])

    def wait_issued(self, namespaces: tuple[str, ...], timeout: float = 120) -> list[str]:
        """Waits until every Certificate of `namespaces` is Ready with its Secret holding the keys
        cert-manager writes; returns their namespace/names."""
        kube, pending = self.kube, []

        def issued():
            certs = [c for ns in namespaces for c in kube.list(CERT, "Certificate", ns)]
            pending[:] = [f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in certs if not _ready(c)]
            if pending or not certs:
                return None
            for c in certs:
                secret = kube.get("v1", "Secret", c["spec"]["secretName"], c["metadata"]["namespace"])
                missing = {"ca.crt", "tls.crt", "tls.key"} - set((secret or {}).get("data", {}))
                assert not missing, f"{c['metadata']['name']}'s Secret lacks {sorted(missing)}"
            return sorted(f"{c['metadata']['namespace']}/{c['metadata']['name']}" for c in certs)
        try:
            return wait_until(issued, timeout=timeout, interval=0.5, proc=self.controller,
                              what="cert-manager to issue the Certificates")
        except TimeoutError as e:
            raise TimeoutError(f"{e}\nnot Ready: {pending}") from None

    def wait_injected(self, api_version: str, kind: str, name: str, timeout: float = 60) -> None:
        """Waits until every webhook of `kind`/`name` trusts the CA of the Certificate its
        inject-ca-from annotation names (the cainjector's write)."""
        kube = self.kube

        def injected():
            obj = kube.get(api_version, kind, name)
            ns, cert_name = obj["metadata"]["annotations"][INJECT_FROM].split("/")
            secret_name = kube.get(CERT, "Certificate", cert_name, ns)["spec"]["secretName"]
            ca = base64.b64decode(kube.get("v1", "Secret", secret_name, ns)["data"]["ca.crt"])
            return all(base64.b64decode(w["clientConfig"].get("caBundle", "")) == ca for w in obj["webhooks"])
        wait_until(injected, timeout=timeout, interval=0.5, proc=self.cainjector,
                   what=f"the cainjector to write {kind} {name}'s CA bundle")
