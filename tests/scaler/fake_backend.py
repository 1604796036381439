"""A tiny HTTP server on loopback that plays a broken Prometheus: slow, garbage, a delaying
proxy in front of the real VictoriaMetrics, a fixed answer of any size ("answer"), or an endless
stream ("stream": `stream_mib` MiB of a JSON string, no Content-Length), or an error that quotes the
query back the way VictoriaMetrics does ("echo", HTTP `status`). It is a stand-in for a
hostile or broken backend, not a Prometheus. It counts the requests it receives."""
import json
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testkit import free_port

MODES = {
    # name: (http status, content type, body)
    "not-json": (200, "application/json", b"<html>oops, a login page</html>"),
    "http-500": (500, "text/plain", b"internal error"),
    "status-error": (200, "application/json",
                     json.dumps({"status": "error", "errorType": "bad_data", "error": "boom"}).encode()),
    "wrong-shape": (200, "application/json", json.dumps({"status": "success", "data": {"resultType": "matrix",
                    "result": "not-a-list"}}).encode()),
    "nan": (200, "application/json", json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"namespace": "tenant-a", "pod": "pg-2"}, "value": [time.time(), "NaN"]}]}}).encode()),
}


class FakePrometheus:
    def __init__(self, mode: str, delay: float = 0.0, upstream: str | None = None,
                 answer: bytes = b"", status: int = 200, stream_mib: int = 0):
        self.mode, self.delay, self.upstream = mode, delay, upstream
        self.answer, self.status, self.stream_mib = answer, status, stream_mib
        self.streamed = 0  # bytes of the last stream the client read before hanging up
        self.requests = 0
        self.queries = []  # what "echo" was asked
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                fake._serve(self, None)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fake._serve(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _serve(self, h, body):
        with self._lock:
            self.requests += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
            if self.mode == "proxy":
                req = urllib.request.Request(self.upstream + h.path, data=body, method=h.command)
                if body is not None:
                    req.add_header("Content-Type", h.headers.get("Content-Type", ""))
                with urllib.request.urlopen(req, timeout=10) as r:
                    status, ctype, payload = r.status, r.headers.get("Content-Type"), r.read()
            elif self.mode == "stream":
                self._stream(h)
                return
            elif self.mode == "echo":
                query = urllib.parse.parse_qs((body or b"").decode()).get("query", [""])[0]
                self.queries.append(query)
                status, ctype = self.status, "application/json"
                payload = json.dumps({"status": "error", "errorType": "422",
                                      "error": f"error when executing query={query!r}: cannot parse"}).encode()
            elif self.mode == "answer":
                status, ctype, payload = self.status, "application/json", self.answer
            elif self.mode == "hang":
                time.sleep(30)
                status, ctype, payload = MODES["status-error"]
            else:
                status, ctype, payload = MODES[self.mode]
            h.send_response(status)
            h.send_header("Content-Type", ctype)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            with self._lock:
                self.in_flight -= 1

    def _stream(self, h):
        h.send_response(200)
        h.send_header("Content-Type", "application/json")
        h.send_header("Connection", "close")
        h.end_headers()
        chunk = b"x" * (1 << 20)
        self.streamed = 0
        h.wfile.write(b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"part":"')
        for _ in range(self.stream_mib):
            h.wfile.write(chunk)
            self.streamed += len(chunk)
        h.wfile.write(b'"},"value":[1,"1"]}]}}')

    def close(self):
        self.server.shutdown()
        self.server.server_close()
