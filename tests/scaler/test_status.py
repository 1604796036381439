"""Issue 43, `scaler status` against a hostile or broken API server and decision source: a
stand-in Kubernetes API server (a tiny HTTP server, named as such, loopback only) answers the
lists `status` reads, and the real binary runs under a Python parent that reports its peak RSS.
Each test fails on the binary before the fix; figures go to $TEST_FIGURES."""
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from scaler_proc import scaler_binary
from testkit import record_figure

ESC = "\x1b]0;pwned\x07\x1b[2J\u009b31m\u202e"


def scaled_object(i: int, address: str = "cozy-autoscaling-scaler:6000") -> dict:
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
            "metadata": {"name": f"so-{i}", "namespace": "t"},
            "spec": {"triggers": [{"type": "external", "metadata": {
                "scalerAddress": address, "target": "10", "maxReplicas": "5"}}]}}


class FakeApiServer:
    """A stand-in for the Kubernetes API server: `lists(path, query)` answers every GET; it
    returns (status, body bytes) or a generator of chunks (the body, streamed until the client
    goes away)."""

    def __init__(self, lists):
        self.requests = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                outer.requests += 1
                url = urlparse(self.path)
                answer = lists(url.path, parse_qs(url.query))
                try:
                    if isinstance(answer, tuple):
                        status, body = answer
                        self.send_response(status)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        self.wfile.write(body)
                    else:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.end_headers()  # HTTP/1.0: the body ends when the connection does
                        for chunk in answer:
                            self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def api_server(tmp_path):
    servers = []

    def start(lists):
        server = FakeApiServer(lists)
        servers.append(server)
        (tmp_path / "kubeconfig").write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": server.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": "t"}}]}))
        return server
    yield start
    for server in servers:
        server.close()


def status(tmp_path, server, *args, timeout=60):
    """Runs `scaler status` against `server` under a Python parent: (returncode, stdout, stderr,
    seconds, peak RSS in KiB)."""
    probe = ("import json, resource, subprocess, sys, time; t = time.monotonic(); "
             "r = subprocess.run(sys.argv[1:], capture_output=True); "
             "print(json.dumps([r.returncode, r.stdout.decode('utf-8', 'replace'), r.stderr.decode('utf-8', 'replace'), "
             "time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    argv = [scaler_binary(), "status", "--decisions-url", server.url + "/decisions", *args]
    env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "HOME": str(tmp_path),
           "KUBERNETES_SERVICE_HOST": "", "RUST_BACKTRACE": "0", "RUST_LIB_BACKTRACE": "0"}
    out = subprocess.run([sys.executable, "-c", probe, *argv], capture_output=True, text=True,
                         timeout=timeout, env=env, check=True)
    return tuple(json.loads(out.stdout))


def empty(kind):
    return 200, json.dumps({"kind": kind, "metadata": {}, "items": []}).encode()


def test_an_endless_list_body_stops_at_the_page_cap(tmp_path, api_server):
    """Before: read whole until --timeout, 0.7–1.3 GB."""
    item = (json.dumps(scaled_object(0)) + ",").encode() * 2000

    def lists(path, query):
        if path.endswith("/scaledobjects"):
            return (b'{"kind":"ScaledObjectList","metadata":{},"items":[' if i == 0 else item
                    for i in range(10 ** 9))
        return empty("List")
    server = api_server(lists)
    code, out, err, seconds, peak_kib = status(tmp_path, server, "-A", "--timeout", "8s")
    record_figure("status: an endless list body", seconds=seconds, peak_rss_mib=peak_kib / 1024)
    assert code == 0, err
    assert "ScaledObjects: cannot list them (a page of the list is larger than 16777216 bytes " \
           "(--max-page-bytes" in err, err
    assert seconds < 8 and peak_kib < 128 << 10, (seconds, peak_kib)


def test_an_endless_run_of_pages_stops_at_the_item_cap(tmp_path, api_server):
    """Every page full and pointing at another: the item cap ends it, naming the flag."""
    def lists(path, query):
        if path.endswith("/scaledobjects"):
            limit = int(query["limit"][0])
            page = int(query.get("continue", ["0"])[0])
            return 200, json.dumps({"kind": "ScaledObjectList", "metadata": {"continue": str(page + 1)},
                                    "items": [scaled_object(page * limit + i) for i in range(limit)]}).encode()
        return empty("List")
    server = api_server(lists)
    code, out, err, seconds, peak_kib = status(tmp_path, server, "-A", "--max-items", "3000", "--timeout", "20s")
    assert code == 0, err
    assert "the list holds more than 3000 items (--max-items): narrow it with -n or -l, or raise --max-items" \
        in err, err
    # Pages of 500, stopped at the seventh: never past the cap.
    assert server.requests <= 7 + 3, server.requests
    record_figure("status: endless pages", seconds=seconds, peak_rss_mib=peak_kib / 1024)


def test_the_rows_keep_no_metadata(tmp_path, api_server):
    """320 ScaledObjects of a tenant, each with 1 MiB of trigger metadata, in pages of 8: the rows
    keep the parse's outcome, not the metadata. Before: every map kept, peak RSS 481 MiB."""
    pages = 40
    items = []
    for i in range(8):
        so = scaled_object(i)
        so["spec"]["triggers"][0]["metadata"]["note"] = "n" * (1 << 20)
        items.append(so)

    def lists(path, query):
        if path.endswith("/scaledobjects"):
            page = int(query.get("continue", ["0"])[0])
            more = str(page + 1) if page + 1 < pages else ""
            return 200, json.dumps({"kind": "ScaledObjectList", "metadata": {"continue": more},
                                    "items": items}).encode()
        return empty("List")
    server = api_server(lists)
    code, out, err, seconds, peak_kib = status(tmp_path, server, "-A", "-o", "json", "--timeout", "60s")
    record_figure("status: 320 MiB of metadata", seconds=seconds, peak_rss_mib=peak_kib / 1024)
    assert code == 0, err
    rows = json.loads(out)["items"]
    assert len(rows) == 320 and all(r["reason"] == "invalid-metadata" for r in rows), rows[:2]
    assert 'unknown metadata key "note"' in rows[0]["lastError"], rows[0]
    assert peak_kib < 224 << 10, peak_kib


def test_the_whole_read_honours_the_timeout(tmp_path, api_server):
    """Slow pages that never end: each page is quick enough for a per-call timeout, the whole
    read is not. Before: no paging; a 300 MB list overran --timeout."""
    def lists(path, query):
        time.sleep(0.5)
        page = int(query.get("continue", ["0"])[0])
        return 200, json.dumps({"kind": "List", "metadata": {"continue": str(page + 1)},
                                "items": []}).encode()
    server = api_server(lists)
    code, out, err, seconds, _ = status(tmp_path, server, "-A", "--timeout", "2s")
    record_figure("status: slow endless pages", seconds=seconds)
    assert code == 0, err
    for source in ("ScaledObjects", "Clusters", "HPAs"):
        assert f"{source}: cannot list them (timed out after 2s (--timeout))" in err, err
    assert seconds < 4, seconds


def test_hostile_text_from_the_api_and_the_decisions_never_reaches_the_terminal(tmp_path, api_server):
    """The tenant's scalerAddress, an API error and a /decisions error, each with escape
    sequences and far too long: escaped and cut in every output."""
    long = "z" * 100_000

    def lists(path, query):
        if path == "/decisions":
            return 500, (ESC + long).encode()
        if path.endswith("/scaledobjects"):
            return 200, json.dumps({"kind": "ScaledObjectList", "metadata": {}, "items": [
                scaled_object(1, f"cozy-autoscaling-scaler.{ESC}{long}:6000")]}).encode()
        if path.endswith("/horizontalpodautoscalers"):
            return 403, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                    "message": ESC + long, "reason": "Forbidden", "code": 403}).encode()
        return empty("List")
    server = api_server(lists)
    for output in ("text", "wide", "json", "yaml"):
        code, out, err, _, _ = status(tmp_path, server, "-o", output)
        assert code == 0, err
        printed = out + err
        assert "so-1" in out, out
        steering = [c for c in printed if (ord(c) < 0x20 and c != "\n") or 0x7f <= ord(c) <= 0x9f]
        assert not steering, (output, printed[:2000])
        assert len(printed) < 16 << 10, (output, len(printed))
        assert "HPAs: cannot list them (HTTP 403: " in printed and "u{1b}]0;pwned" in printed, printed[:2000]
