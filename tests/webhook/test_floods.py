"""Connection floods before authentication (issue 23 item 1): while each flood runs, a new
connection from the API server gets its review answered within the admission deadline (3 s, the
default --admission-deadline, well inside the API server's 5 s webhook timeout), /healthz stays
up, and the flood's connections do not stay. Floods come from eight loopback source addresses
(floods.py): 600 connections against the default --max-connections 256 (what a listen backlog
holds beyond the cap, so every one connects), 1,000 against the admin port; bounded to seconds.
Each probe records its figures (testkit.record_figure) for docs/scaler-tests.md."""
import time

import pytest
import requests

from floods import Flood, client_hello
from testkit import record_figure, socket_fds
from webhook_harness import SHARD_KEY, hr, patch_of, review

CONNECTIONS = 600
SOURCES = 8
ADMISSION_DEADLINE = 3.0
# --handshake-timeout (5 s) and the admin port's header deadline (5 s), plus slack.
GONE_WITHIN = 9.0
TENANT = "tenant-t0"


@pytest.fixture
def hook(emulator, start_webhook):
    emulator.namespace(TENANT, "shard0")
    return start_webhook(emulator, shards=3, extra=["--assume-shards-ready"])


def wait_gone(flood: Flood) -> int:
    deadline = time.monotonic() + GONE_WITHIN
    while (left := flood.open_count()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.parametrize("kind", ["silent TCP", "incomplete TLS handshakes"])
def test_a_review_is_answered_under_a_flood(hook, kind):
    opening = client_hello("localhost") if kind == "incomplete TLS handshakes" else b""
    flood = Flood(hook.port, CONNECTIONS, SOURCES, opening)
    try:
        time.sleep(1)
        body = review("CREATE", TENANT, hr(TENANT, "app", {SHARD_KEY: "tenants"}))
        t0 = time.monotonic()
        try:
            response, error = hook.review(body), None
        except requests.RequestException as e:
            response, error = None, e
        took = time.monotonic() - t0
        healthz = requests.get(hook.admin + "/healthz", timeout=5).status_code
        left = wait_gone(flood)
        record_figure(f"{CONNECTIONS} connections of {kind} to the webhook, then a review",
                      flood=len(flood.socks), seconds=round(took, 2), error=type(error).__name__ if error else None,
                      flood_left_after_9s=left)
        assert error is None, f"{error!r} after {took:.2f}s"
        assert patch_of(response) is not None and took < ADMISSION_DEADLINE, f"answered after {took:.2f}s"
        assert healthz == 200
        assert left == 0, f"{left} flood connections still open"
    finally:
        flood.close()


def test_half_sent_requests_on_the_admin_port_leave_healthz_up(hook):
    base = socket_fds(hook.proc.pid)
    flood = Flood(hook.admin_port, 1000, SOURCES, b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    try:
        time.sleep(1)
        held = socket_fds(hook.proc.pid) - base
        t0 = time.monotonic()
        healthz = requests.get(hook.admin + "/healthz", timeout=5).status_code
        took = time.monotonic() - t0
        left = wait_gone(flood)
        record_figure("1,000 half-sent HTTP requests to the webhook's admin port", held=held, healthz=healthz,
                      healthz_seconds=round(took, 2), flood_left_after_9s=left)
        assert healthz == 200 and took < 1
        assert held <= 64 + 4, f"the admin port holds {held} connections"
        assert left == 0, f"{left} half-sent requests still open"
    finally:
        flood.close()
