"""Connection floods before authentication (issue 23 item 1): while each flood runs, a new,
valid client (a fresh connection, as after a KEDA restart) is answered within KEDA's 3 s deadline,
and the flood's connections do not stay. Floods come from ten loopback source addresses
(floods.py), 1,100 connections against the default --max-connections 1024, bounded to seconds.
Each probe records its figures (testkit.record_figure) for docs/scaler-tests.md."""
import time

import grpc
import pytest
import requests

from floods import H2_PING, H2_PREFACE, Flood, client_hello
from keda import Keda, code_of, metadata
from test_tls import SERVER_NAME, Pki
from testkit import record_figure, socket_fds

CONNECTIONS = 1100
SOURCES = 10
KEDA_DEADLINE = 3.0
# --handshake-timeout (5 s) and the admin port's header deadline (5 s), plus slack.
GONE_WITHIN = 9.0


def timed_spec(keda) -> tuple[grpc.StatusCode, float]:
    t0 = time.monotonic()
    code = code_of(lambda: keda.spec(keda.ref("tenant-a", "so-pg", metadata()), timeout=KEDA_DEADLINE))
    return code, time.monotonic() - t0


def wait_gone(flood: Flood, keep_pinging: bool) -> int:
    deadline = time.monotonic() + GONE_WITHIN
    while (left := flood.open_count()) and time.monotonic() < deadline:
        if keep_pinging:
            flood.send(H2_PING)
        time.sleep(0.5)
    return left


@pytest.mark.parametrize("kind", ["silent TCP", "HTTP/2 PINGs only", "incomplete TLS handshakes"])
def test_a_new_client_is_answered_under_a_flood(vm, start_scaler, tmp_path, kind):
    flags, tls = (), None
    if kind == "incomplete TLS handshakes":
        pki = Pki(tmp_path)
        pki.serve("a")
        keda_cert = pki.client("keda-operator", "clients")
        flags = (*pki.flags(), "--tls-client-ca", str(pki.cas["clients"].cert))
        tls = pki.creds("a", keda_cert)
    scaler, _ = start_scaler(vm.url, *flags, tls=tls)
    opening = {"silent TCP": b"", "HTTP/2 PINGs only": H2_PREFACE + H2_PING,
               "incomplete TLS handshakes": client_hello(SERVER_NAME)}[kind]
    pinging = kind == "HTTP/2 PINGs only"
    flood = Flood(scaler.grpc_port, CONNECTIONS, SOURCES, opening)
    fresh = Keda(scaler.address, tls)
    try:
        for _ in range(2):
            time.sleep(0.5)
            if pinging:
                flood.send(H2_PING)
        code, took = timed_spec(fresh)
        left = wait_gone(flood, pinging)
        record_figure(f"{CONNECTIONS} connections of {kind} to gRPC, then a new client",
                      flood=len(flood.socks), code=code.name, seconds=round(took, 2), flood_left_after_9s=left)
        assert code == grpc.StatusCode.OK, f"{code.name} after {took:.2f}s"
        assert took < KEDA_DEADLINE
        assert left == 0, f"{left} flood connections still open"
    finally:
        flood.close()
        fresh.close()


def test_half_sent_requests_on_the_admin_port_leave_healthz_and_grpc_up(vm, start_scaler):
    scaler, _ = start_scaler(vm.url)
    base = socket_fds(scaler.proc.pid)
    flood = Flood(scaler.admin_port, 1000, SOURCES, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    fresh = Keda(scaler.address)
    try:
        time.sleep(1)
        held = socket_fds(scaler.proc.pid) - base
        t0 = time.monotonic()
        healthz = requests.get(scaler.admin + "/healthz", timeout=5).status_code
        healthz_took = time.monotonic() - t0
        code, took = timed_spec(fresh)
        left = wait_gone(flood, False)
        record_figure("1,000 half-sent HTTP requests to the admin port", held=held, healthz=healthz,
                      healthz_seconds=round(healthz_took, 2), grpc=code.name, flood_left_after_9s=left)
        assert healthz == 200 and healthz_took < 1
        assert code == grpc.StatusCode.OK and took < KEDA_DEADLINE
        assert held <= 64 + 4, f"the admin port holds {held} connections"
        assert left == 0, f"{left} half-sent requests still open"
    finally:
        flood.close()
        fresh.close()
