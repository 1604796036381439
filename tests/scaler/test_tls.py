"""TLS on the gRPC port: ALPN h2, server-only TLS, mTLS, and certificate reload on file change.
Certificates come from the openssl command line, issued for the Service DNS name KEDA dials."""
import os
import shutil
import socket
import ssl
import subprocess
import time

import grpc
import pytest

from keda import Keda, code_of, metadata
from procs import wait_until

SERVER_NAME = "cnpg-scaler.cozy-keda.svc"


class Pki:
    def __init__(self, d):
        self.d = d

    def path(self, name):
        return os.path.join(self.d, name)

    def _run(self, *args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)

    def ca(self, name):
        self._run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", self.path(f"{name}.key"), "-out", self.path(f"{name}.crt"), "-days", "2",
                  "-subj", f"/CN={name}")
        return name

    def leaf(self, name, ca, ext):
        ext_file = self.path(f"{name}.ext")
        with open(ext_file, "w") as f:
            f.write(ext)
        self._run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                  "-keyout", self.path(f"{name}.key"), "-out", self.path(f"{name}.csr"), "-subj", f"/CN={name}")
        self._run("x509", "-req", "-in", self.path(f"{name}.csr"), "-CA", self.path(f"{ca}.crt"),
                  "-CAkey", self.path(f"{ca}.key"), "-CAcreateserial", "-days", "2",
                  "-out", self.path(f"{name}.crt"), "-extfile", ext_file)
        return name

    def server(self, name, ca):
        return self.leaf(name, ca, f"subjectAltName=DNS:{SERVER_NAME}\nextendedKeyUsage=serverAuth\n")

    def client(self, name, ca):
        return self.leaf(name, ca, "extendedKeyUsage=clientAuth\n")

    def read(self, name, ext):
        with open(self.path(f"{name}.{ext}"), "rb") as f:
            return f.read()

    def creds(self, ca, client=None):
        kw = {"root_certificates": self.read(ca, "crt")}
        if client:
            kw.update(private_key=self.read(client, "key"), certificate_chain=self.read(client, "crt"))
        return grpc.ssl_channel_credentials(**kw), SERVER_NAME


@pytest.fixture
def pki(tmp_path):
    p = Pki(str(tmp_path))
    p.ca("ca-a")
    p.server("server-a", "ca-a")
    shutil.copy(p.path("server-a.crt"), p.path("tls.crt"))
    shutil.copy(p.path("server-a.key"), p.path("tls.key"))
    return p


def spec_code(keda):
    return code_of(lambda: keda.spec(keda.ref("tenant-a", "so-pg", metadata(target="5")), timeout=3))


def test_tls_serves_h2_and_refuses_plaintext(vm, pki, start_scaler):
    scaler, keda = start_scaler(vm.url, "--tls-cert", pki.path("tls.crt"), "--tls-key", pki.path("tls.key"),
                                tls=pki.creds("ca-a"))
    assert spec_code(keda) == grpc.StatusCode.OK
    assert keda.desired(keda.ref("tenant-a", "so-pg", metadata(target="5")), 5) == 4

    # grpc-go >= 1.67 (KEDA >= 2.16) refuses a server that does not select ALPN h2.
    ctx = ssl.create_default_context(cafile=pki.path("ca-a.crt"))
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
    pki.ca("clients")
    pki.client("keda-operator", "clients")
    pki.ca("rogue")
    pki.client("intruder", "rogue")
    scaler, _ = start_scaler(vm.url, "--tls-cert", pki.path("tls.crt"), "--tls-key", pki.path("tls.key"),
                             "--tls-client-ca", pki.path("clients.crt"), tls=pki.creds("ca-a", "keda-operator"))
    for client, expected in [("keda-operator", grpc.StatusCode.OK), (None, grpc.StatusCode.UNAVAILABLE),
                             ("intruder", grpc.StatusCode.UNAVAILABLE)]:
        k = Keda(scaler.address, pki.creds("ca-a", client))
        try:
            assert spec_code(k) == expected, client
        finally:
            k.close()


def test_certificate_reload_on_file_change(vm, pki, start_scaler):
    scaler, _ = start_scaler(vm.url, "--tls-cert", pki.path("tls.crt"), "--tls-key", pki.path("tls.key"),
                             tls=pki.creds("ca-a"))
    pki.ca("ca-b")
    pki.server("server-b", "ca-b")
    # Replace key and certificate the way a Secret volume update does: new files renamed in place.
    for ext in ("key", "crt"):
        shutil.copy(pki.path(f"server-b.{ext}"), pki.path(f"tls.{ext}.new"))
        os.replace(pki.path(f"tls.{ext}.new"), pki.path(f"tls.{ext}"))
    changed = time.monotonic()

    def trusts_b():
        k = Keda(scaler.address, pki.creds("ca-b"))  # a new connection each time
        try:
            return spec_code(k) == grpc.StatusCode.OK
        finally:
            k.close()

    wait_until(trusts_b, 15, 0.5, "the scaler serving the new certificate")
    assert time.monotonic() - changed < 12
    old = Keda(scaler.address, pki.creds("ca-a"))
    try:
        assert spec_code(old) == grpc.StatusCode.UNAVAILABLE  # new connections get the new cert only
    finally:
        old.close()


def test_broken_certificate_update_keeps_the_previous_one(vm, pki, start_scaler):
    scaler, _ = start_scaler(vm.url, "--tls-cert", pki.path("tls.crt"), "--tls-key", pki.path("tls.key"),
                             tls=pki.creds("ca-a"))
    with open(pki.path("tls.crt"), "w") as f:
        f.write("-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n")
    time.sleep(6.5)  # past the scaler's 5 s reload poll
    k = Keda(scaler.address, pki.creds("ca-a"))
    try:
        assert spec_code(k) == grpc.StatusCode.OK
    finally:
        k.close()
    assert scaler.proc.alive()
