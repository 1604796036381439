"""The one VictoriaMetrics launcher of every suite: a real VictoriaMetrics on loopback; start,
import Prometheus text, flush, poll until visible, count the queries it served."""
import os
import shutil
import time
from typing import Callable

import requests

import promtext
from testkit import Proc, free_port, wait_until

# (name, argv) -> a started Proc; e.g. the e2e rig's process group, which stops everything together.
Spawn = Callable[[str, list], Proc]


class VictoriaMetrics:
    def __init__(self, workdir, port: int | None = None, extra_args: tuple[str, ...] = (),
                 spawn: Spawn | None = None, host: str = "127.0.0.1"):
        self.extra_args = tuple(extra_args)  # e.g. -promscrape.config for a scraping instance
        os.makedirs(workdir, exist_ok=True)
        self.workdir = str(workdir)
        self.data = os.path.join(self.workdir, "vmdata")
        self.port = port or free_port()
        self.host = host  # a real node's address, for its pods (tests/node)
        self.url = f"http://{host}:{self.port}"
        self.spawn = spawn or (lambda name, argv: Proc(argv, os.path.join(self.workdir, f"{name}.log")))
        self.proc = None

    def start(self):
        """Starts (or restarts, on the same port and data) and waits for /health."""
        binary = shutil.which("victoria-metrics")
        if binary is None:
            raise RuntimeError("victoria-metrics not on PATH: run tests/lib/setup.sh")
        self.proc = self.spawn(
            "victoria-metrics",
            [
                binary,
                f"-httpListenAddr={self.host}:{self.port}",
                f"-storageDataPath={self.data}",
                "-retentionPeriod=100y",
                # Default 30s hides fresh samples from instant queries "now".
                "-search.latencyOffset=0s",
                "-loggerLevel=WARN",
                *self.extra_args,
            ],
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

    def delete_series(self, match: str):
        requests.post(f"{self.url}/api/v1/admin/tsdb/delete_series", data={"match[]": match},
                      timeout=5).raise_for_status()

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
        samples = promtext.scrape(f"{self.url}/metrics")
        return sum(promtext.total(samples, "vm_http_requests_total", path=path)
                   for path in ("/api/v1/query", "/api/v1/query_range"))
