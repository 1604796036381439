"""A real VictoriaMetrics on loopback: start, import Prometheus text, flush, poll until visible."""
import os
import shutil
import time

import requests

from testkit import Proc, free_port, wait_until


class VictoriaMetrics:
    def __init__(self, workdir: str, port: int | None = None, extra_args: tuple[str, ...] = ()):
        self.extra_args = tuple(extra_args)  # e.g. -promscrape.config for a scraping instance
        os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self.data = os.path.join(workdir, "vmdata")
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        binary = shutil.which("victoria-metrics")
        if binary is None:
            raise RuntimeError("victoria-metrics not on PATH: run tests/lib/setup.sh")
        self.proc = Proc(
            [
                binary,
                f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.data}",
                "-retentionPeriod=100y",
                # Default 30s hides fresh samples from instant queries "now".
                "-search.latencyOffset=0s",
                "-loggerLevel=WARN",
                *self.extra_args,
            ],
            os.path.join(self.workdir, "vm.log"),
        )
        wait_until(self._healthy, 15, what="VictoriaMetrics /health")
        return self

    def _healthy(self) -> bool:
        if not self.proc.alive():
            raise RuntimeError(f"victoria-metrics exited:\n{self.proc.tail()}")
        return requests.get(f"{self.url}/health", timeout=1).text.strip() == "OK"

    def stop(self):
        if self.proc is not None:
            self.proc.stop()

    def import_prom(self, text: str):
        r = requests.post(f"{self.url}/api/v1/import/prometheus", data=text.encode(), timeout=30)
        r.raise_for_status()
        requests.get(f"{self.url}/internal/force_flush", timeout=10).raise_for_status()

    def query(self, promql: str) -> list:
        r = requests.get(f"{self.url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        return r.json()["data"]["result"]

    def scalar(self, promql: str) -> float | None:
        result = self.query(promql)
        return float(result[0]["value"][1]) if result else None

    def import_and_wait(self, text: str, probe: str, expect=lambda v: v is not None, timeout=20):
        """Imports, flushes, then polls `probe` (an instant query) until `expect(value)`."""
        self.import_prom(text)
        return wait_until(lambda: expect(self.scalar(probe)), timeout, 0.2, f"VM shows {probe}")

    def query_requests(self) -> float:
        """Instant and range queries served so far, from VictoriaMetrics' own /metrics.
        VictoriaMetrics refreshes that page about once a second: wait so the count is complete."""
        time.sleep(1.1)
        total = 0.0
        for line in requests.get(f"{self.url}/metrics", timeout=5).text.splitlines():
            if line.startswith("vm_http_requests_total{") and (
                'path="/api/v1/query"' in line or 'path="/api/v1/query_range"' in line
            ):
                total += float(line.rsplit(" ", 1)[1])
        return total
