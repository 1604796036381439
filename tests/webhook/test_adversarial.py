"""`scaler webhook` against hostile clients (issue 10): each test reproduces one finding of the
adversarial run over real HTTPS or raw sockets on loopback, bounded in time, against the
in-memory API (emulator.py), and would fail on the binary before the fix. Each probe records its
figures (testkit.record_figure, $TEST_FIGURES) for the tables in docs/scaler-tests.md."""
import json
import socket
import ssl
import time

import pytest
import requests

from testkit import CA, record_figure, socket_fds, wait_until
from webhook_harness import SHARD_KEY, hr, make_certs, patch_of, review

READY = ["--assume-shards-ready"]
TENANTS = [f"tenant-t{i}" for i in range(8)]


@pytest.fixture
def hook(emulator, start_webhook):
    for ns in TENANTS:
        emulator.namespace(ns, "shard0")
    return start_webhook(emulator, shards=3, extra=[*READY, "--header-read-timeout", "2s",
                                                    "--body-read-timeout", "2s", "--idle-timeout", "30s",
                                                    "--max-connections", "32"])


def tls_context(hook) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(hook.certs["ca"]))
    ctx.check_hostname = False
    return ctx


def tls_socket(hook, ctx) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", hook.port), timeout=5)
    return ctx.wrap_socket(raw, server_hostname="localhost")


def closed_within(sock, seconds: float) -> float | None:
    """Seconds until the server closes `sock` (reading what it sends), None if it stays open."""
    start = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - start < seconds:
        try:
            if not sock.recv(65536):
                return time.monotonic() - start
            return time.monotonic() - start  # an error reply (408) also ends the request
        except (socket.timeout, ssl.SSLWantReadError):
            continue
        except OSError:
            return time.monotonic() - start
    return None


def test_slowloris_headers_are_cut_at_the_header_read_timeout(hook):
    ctx = tls_context(hook)
    socks = []
    for _ in range(30):
        s = tls_socket(hook, ctx)
        s.sendall(b"POST /mutate-helmrelease-shard HTTP/1.1\r\nHost: x\r\n")
        socks.append(s)
    try:
        for _ in range(3):  # one more header byte a second: never a complete head
            time.sleep(1)
            for s in socks:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass
        held = [closed_within(s, 0.5) is None for s in socks]
        record_figure("30 slowloris HTTPS connections (--header-read-timeout 2s)",
                      still_open_after_3s=sum(held))
        assert not any(held), f"{sum(held)} slowloris connections still open after 3 s"
    finally:
        for s in socks:
            s.close()


def test_a_body_that_never_comes_gets_408(hook):
    s = tls_socket(hook, tls_context(hook))
    try:
        s.sendall(b"POST /mutate-helmrelease-shard HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 10000000\r\n\r\n{")
        s.settimeout(6)
        start = time.monotonic()
        try:
            reply = s.recv(4096)
        except socket.timeout:
            reply = b""
        took = time.monotonic() - start
        record_figure("10 MB Content-Length, then silence (--body-read-timeout 2s)",
                      status=reply.split(b"\r\n", 1)[0].decode(errors="replace") or "none", seconds=round(took, 1))
        assert reply.startswith(b"HTTP/1.1 408"), reply[:100]
        assert took < 4
    finally:
        s.close()


def test_connections_are_capped(hook):
    base = socket_fds(hook.proc.pid)
    socks = [socket.create_connection(("127.0.0.1", hook.port), timeout=5) for _ in range(150)]
    try:
        time.sleep(1)
        held = socket_fds(hook.proc.pid) - base
        record_figure("150 silent TCP connections to the webhook (--max-connections 32)", held=held)
        assert held <= 32, f"{held} connections held"
    finally:
        for s in socks:
            s.close()
    # Slots come back: a real review still gets through.
    wait_until(lambda: hook.review(review("CREATE", TENANTS[0], hr(TENANTS[0], "after", None))), 20,
               what="a review after the flood", retry=(requests.RequestException,))


@pytest.mark.parametrize("depth", [200, 5000])
def test_a_deeply_nested_helmrelease_is_allowed_and_stamped(hook, depth):
    obj = hr(TENANTS[0], "deep", {SHARD_KEY: "tenants"})
    obj["spec"]["values"] = "DEEP"
    # Python's json encoder recurses too: write the deep part as text.
    deep = '{"x": ' * depth + '"leaf"' + "}" * depth
    text = json.dumps(review("CREATE", TENANTS[0], obj)).replace('"DEEP"', deep)
    r = hook.post(text)
    record_figure(f"HelmRelease nested {depth} levels", status=r.status_code)
    assert r.status_code == 200, r.text[:200]
    response = r.json()["response"]
    assert response["allowed"] and patch_of(response) is not None


@pytest.mark.parametrize("namespace,name", [("tenant-x/../../../api/v1/secrets", "pg"),
                                            ("tenant-x?labelSelector=a&watch=true", "pg"),
                                            ("tenant-t0", "pg/../../x"), ("tenant-X", "pg"),
                                            ("tenant-t0", "pg\nforged")])
def test_names_that_are_not_names_are_allowed_unchanged_without_an_api_call(hook, namespace, name):
    before = hook.metrics().get('cozy_flux_shard_admissions_total{reason="invalid_name"}', 0)
    response = hook.review(review("CREATE", namespace, hr(namespace, name, {SHARD_KEY: "tenants"})))
    after = hook.metrics().get('cozy_flux_shard_admissions_total{reason="invalid_name"}', 0)
    record_figure(f"review for {namespace}/{name}", patched=patch_of(response) is not None,
                  counted_invalid=after - before)
    assert patch_of(response) is None
    assert after == before + 1


def test_forged_reviews_do_not_weigh_on_placement(hook):
    def tenants():
        return hook.metrics()["cozy_flux_shard_tenants"]

    wait_until(lambda: tenants() == len(TENANTS), what="8 tenants known")
    for i in range(500):
        ns = f"tenant-forged{i}"
        hook.review(review("CREATE", ns, hr(ns, "app", {SHARD_KEY: "tenants"})))
    time.sleep(1.5)  # gauges refresh every second
    record_figure("500 forged CREATE reviews for namespaces that do not exist",
                  tenants_before=len(TENANTS), tenants_after=tenants())
    assert tenants() == len(TENANTS)


def test_client_ca_requires_the_api_servers_certificate(tmp_path, emulator, start_webhook):
    certs = make_certs(tmp_path / "certs")
    clients = CA(tmp_path / "clients", "apiserver-clients")
    hook = start_webhook(emulator, extra=[*READY, "--client-ca", str(clients.cert)], certs=certs)
    body = review("CREATE", "tenant-x", hr("tenant-x", "app", None))
    with pytest.raises(requests.exceptions.ConnectionError):  # SSLError or a reset
        hook.post(body)
    pair = clients.issue("apiserver", "kube-apiserver", client=True)
    hook.session.cert = (str(pair.cert), str(pair.key))
    assert hook.review(body)["allowed"]
    stranger = CA(tmp_path / "strangers", "stranger").issue("stranger", "stranger", client=True)
    hook.session.cert = (str(stranger.cert), str(stranger.key))
    with pytest.raises(requests.exceptions.ConnectionError):
        hook.post(body)
