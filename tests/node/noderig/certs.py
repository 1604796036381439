"""A STAND-IN for cert-manager on the real node (docs/e2e.md, "Real node", says why the real one does
not run here): it issues every Certificate of the given namespaces once, as cert-manager's
controller does for the two issuer kinds the package uses, and injects CA bundles where
cert-manager's cainjector would.

- `selfSigned` issuer: the Certificate's own key signs it (the package's CA Certificates, isCA).
- `ca` issuer: the CA whose Secret the issuer names signs it (an Issuer's Secret in its namespace,
  a ClusterIssuer's in the cluster resource namespace).

Each Secret gets the keys cert-manager writes (ca.crt, tls.crt, tls.key), so the kubelet mounts
them into the pods and KEDA's TriggerAuthentication reads them as it would in a cluster."""

from __future__ import annotations

import base64
from pathlib import Path

from testkit import CA
from rig.kube import Kube

CERT = "cert-manager.io/v1"


class CertManagerStandIn:
    def __init__(self, kube: Kube, directory: Path, cluster_resource_namespace: str):
        self.kube, self.dir, self.cluster_ns = kube, directory, cluster_resource_namespace
        self.cas: dict[tuple[str, str], CA] = {}  # (namespace, Secret) -> the CA it holds

    def _store(self, namespace: str, name: str, ca: CA, cert: Path, key: Path) -> None:
        data = {"ca.crt": ca.cert, "tls.crt": cert, "tls.key": key}
        self.kube.apply({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                         "metadata": {"name": name, "namespace": namespace},
                         "data": {k: base64.b64encode(p.read_bytes()).decode() for k, p in data.items()}},
                        manager="cert-manager")

    def _signer(self, cert: dict) -> str | CA | None:
        """"self" for a selfSigned issuer, the CA of a `ca` issuer, None while that CA is not issued."""
        ref, ns = cert["spec"]["issuerRef"], cert["metadata"]["namespace"]
        kind = ref.get("kind", "Issuer")
        issuer = self.kube.get(CERT, kind, ref["name"], ns if kind == "Issuer" else None)
        assert issuer, f"Certificate {ns}/{cert['metadata']['name']} names a missing {kind} {ref['name']}"
        if "selfSigned" in issuer["spec"]:
            return "self"
        secret_ns = ns if kind == "Issuer" else self.cluster_ns
        return self.cas.get((secret_ns, issuer["spec"]["ca"]["secretName"]))

    def _issue(self, cert: dict, signer: str | CA) -> None:
        spec, ns, name = cert["spec"], cert["metadata"]["namespace"], cert["metadata"]["name"]
        if signer == "self":
            assert spec.get("isCA"), f"{ns}/{name}: a self-signed leaf is not what the package asks for"
            ca = CA(self.dir, f"{ns}-{name}")
            self.cas[(ns, spec["secretName"])] = ca
            self._store(ns, spec["secretName"], ca, ca.cert, ca.key)
            return
        usages = set(spec.get("usages", []))
        hosts = (*spec.get("dnsNames", []), *spec.get("ipAddresses", []))
        pair = signer.issue(f"{ns}-{name}", spec.get("commonName") or hosts[0], hosts=hosts,
                            client="server auth" not in usages and "client auth" in usages)
        self._store(ns, spec["secretName"], signer, pair.cert, pair.key)

    def issue_all(self, namespaces: tuple[str, ...]) -> list[str]:
        """Issues every Certificate of `namespaces` (CAs first); returns their namespace/names."""
        pending = [c for ns in namespaces for c in self.kube.list(CERT, "Certificate", ns)]
        issued = []
        while pending:
            ready = [(c, s) for c in pending if (s := self._signer(c)) is not None]
            assert ready, f"Certificates whose issuer's CA is never issued: {[c['metadata']['name'] for c in pending]}"
            for cert, signer in ready:
                self._issue(cert, signer)
                issued.append(f"{cert['metadata']['namespace']}/{cert['metadata']['name']}")
            pending = [c for c in pending if all(c is not r for r, _ in ready)]
        return issued

    def inject_ca_bundles(self, api_version: str, kind: str, name: str) -> None:
        """cainjector's part: every webhook of `kind`/`name` trusts the CA of the Certificate its
        `cert-manager.io/inject-ca-from` annotation names."""
        obj = self.kube.get(api_version, kind, name)
        ns, cert_name = obj["metadata"]["annotations"]["cert-manager.io/inject-ca-from"].split("/")
        secret = self.kube.get(CERT, "Certificate", cert_name, ns)["spec"]["secretName"]
        bundle = self.kube.get("v1", "Secret", secret, ns)["data"]["ca.crt"]
        webhooks = [{**w, "clientConfig": {**w["clientConfig"], "caBundle": bundle}} for w in obj["webhooks"]]
        self.kube.merge_patch(api_version, kind, name, {"webhooks": webhooks})
