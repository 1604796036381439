"""TLS on the gRPC port: ALPN h2, server-only TLS, mTLS, and certificate reload on file change.
Certificates come from the openssl command line, issued for the Service DNS name KEDA dials."""
import socket
import ssl
import time

import grpc
import pytest

from keda import Keda, code_of, metadata
from testkit import CA, wait_until

SERVER_NAME = "cnpg-scaler.cozy-keda.svc"


class Pki:
    """CAs and certificates in one directory; the scaler serves tls.crt/tls.key."""

    def __init__(self, d):
        self.d = d
        self.cas = {}

    def ca(self, name):
        self.cas[name] = CA(self.d, name)
        return self.cas[name]

    def serve(self, ca):
        """(Re)issues tls.crt/tls.key from a new CA `ca`, replaced by rename as a Secret volume update does."""
        self.tls = self.ca(ca).issue("tls", SERVER_NAME, hosts=(SERVER_NAME,))

    def client(self, name, ca):
        return self.ca(ca).issue(name, name, client=True)

    def flags(self):
        return "--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key)

    def creds(self, ca, client=None):
        kw = {"root_certificates": self.cas[ca].cert.read_bytes()}
        if client:
            kw.update(private_key=client.key.read_bytes(), certificate_chain=client.cert.read_bytes())
        return grpc.ssl_channel_credentials(**kw), SERVER_NAME


@pytest.fixture
def pki(tmp_path):
    p = Pki(tmp_path)
    p.serve("a")
    return p


def spec_code(keda):
    return code_of(lambda: keda.spec(keda.ref("tenant-a", "so-pg", metadata(target="5")), timeout=3))


def test_tls_serves_h2_and_refuses_plaintext(vm, pki, start_scaler):
    scaler, keda = start_scaler(vm.url, *pki.flags(), tls=pki.creds("a"))
    assert spec_code(keda) == grpc.StatusCode.OK
    assert keda.desired(keda.ref("tenant-a", "so-pg", metadata(target="5")), 5) == 4

    # grpc-go >= 1.67 (KEDA >= 2.16) refuses a server that does not select ALPN h2.
    ctx = ssl.create_default_context(cafile=pki.cas["a"].cert)
    ctx.set_alpn_protocols(["h2"])
    with socket.create_connection(("127.0.0.1", scaler.grpc_port), timeout=3) as raw:
        with ctx.wrap_socket(raw, server_hostname=SERVER_NAME) as tls:
            assert tls.selected_alpn_protocol() == "h2"
            assert tls.version() in ("TLSv1.2", "TLSv1.3")

    plain = Keda(scaler.address)
    try:
        assert spec_code(plain) == grpc.StatusCode.UNAVAILABLE
    finally:
        plain.close()


def test_mtls_requires_a_client_certificate_from_the_client_ca(vm, pki, start_scaler):
    clients = {"keda-operator": pki.client("keda-operator", "clients"), "intruder": pki.client("intruder", "rogue")}
    scaler, _ = start_scaler(vm.url, *pki.flags(), "--tls-client-ca", str(pki.cas["clients"].cert),
                             tls=pki.creds("a", clients["keda-operator"]))
    for client, expected in [("keda-operator", grpc.StatusCode.OK), (None, grpc.StatusCode.UNAVAILABLE),
                             ("intruder", grpc.StatusCode.UNAVAILABLE)]:
        k = Keda(scaler.address, pki.creds("a", clients.get(client)))
        try:
            assert spec_code(k) == expected, client
        finally:
            k.close()


def test_client_identity_narrows_the_client_ca(vm, pki, start_scaler):
    """--tls-client-identity: of two certificates from the same client CA, only the one naming an
    accepted identity (here its CN; a SAN counts too) gets in."""
    ca = pki.ca("clients")
    keda_client, other = ca.issue("keda", "keda-operator", client=True), ca.issue("app", "tenant-app", client=True)
    named = ca.issue("named", "someone", hosts=("keda.example",), client=True)
    scaler, _ = start_scaler(vm.url, *pki.flags(), "--tls-client-ca", str(ca.cert),
                             "--tls-client-identity", "keda-operator,keda.example",
                             tls=pki.creds("a", keda_client))
    for client, expected in [(keda_client, grpc.StatusCode.OK), (named, grpc.StatusCode.OK),
                             (other, grpc.StatusCode.UNAVAILABLE)]:
        k = Keda(scaler.address, pki.creds("a", client))
        try:
            assert spec_code(k) == expected, client.cert
        finally:
            k.close()


def test_certificate_reload_on_file_change(vm, pki, start_scaler):
    scaler, _ = start_scaler(vm.url, *pki.flags(), tls=pki.creds("a"))
    pki.serve("b")  # new key and certificate renamed in place, the way a Secret volume update does
    changed = time.monotonic()

    def trusts_b():
        k = Keda(scaler.address, pki.creds("b"))  # a new connection each time
        try:
            return spec_code(k) == grpc.StatusCode.OK
        finally:
            k.close()

    wait_until(trusts_b, 15, 0.5, "the scaler serving the new certificate")
    assert time.monotonic() - changed < 12
    old = Keda(scaler.address, pki.creds("a"))
    try:
        assert spec_code(old) == grpc.StatusCode.UNAVAILABLE  # new connections get the new cert only
    finally:
        old.close()


def test_broken_certificate_update_keeps_the_previous_one(vm, pki, start_scaler):
    scaler, _ = start_scaler(vm.url, *pki.flags(), tls=pki.creds("a"))
    with open(pki.tls.cert, "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    time.sleep(6.5)  # past the scaler's 5 s reload poll
    k = Keda(scaler.address, pki.creds("a"))
    try:
        assert spec_code(k) == grpc.StatusCode.OK
    finally:
        k.close()
    assert scaler.proc.alive()
