"""Starts `scaler serve` on loopback ports and waits for gRPC health SERVING."""
import os
import re

from grpc_health.v1 import health_pb2, health_pb2_grpc

from keda import channel
from testkit import REPO, Proc, cargo_bin, free_port, wait_until


def package_env() -> dict[str, str]:
    """The allocator settings the package chart gives the scaler, read from its template so a bench
    or smoke test runs what the chart ships (a Helm template, not YAML: its literal env entries)."""
    template = (REPO / "charts/cozy-autoscaling/templates/scaler.yaml").read_text()
    found = dict(re.findall(r'- name: (MIMALLOC_\w+)\n\s+value: "([^"]*)"', template))
    if not found:
        raise RuntimeError("charts/cozy-autoscaling/templates/scaler.yaml sets no MIMALLOC_* variable")
    return found


PACKAGE_ENV = package_env()


def scaler_binary() -> str:
    return str(cargo_bin("scaler"))


class Scaler:
    def __init__(self, workdir: str, prometheus_url: str, *extra: str, refresh="1s", tls=None,
                 topology="metrics", env=None):
        self.env = env or {}
        self.tls = tls  # (grpc credentials, server name) the health probe connects with
        self.workdir = workdir
        self.flags = ["--prometheus-url", prometheus_url, "--topology", topology, "--refresh-interval", refresh,
                      *extra]
        self._pick_ports()
        self.proc = None

    def _pick_ports(self) -> None:
        self.grpc_port, self.admin_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.grpc_port}"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self.argv = [scaler_binary(), "serve", "--listen", self.address,
                     "--admin-listen", f"127.0.0.1:{self.admin_port}", *self.flags]
        self.log = os.path.join(self.workdir, f"scaler-{self.grpc_port}.log")

    def start(self, timeout=30):
        # A free port is free only when it is picked: with other suites beside this one, an
        # outgoing connection can take it before the scaler binds it. Then new ports, up to 3 times.
        for attempt in range(3):
            self.proc = Proc(self.argv, self.log, env=self.env)
            try:
                wait_until(self.serving, timeout, 0.1, f"scaler gRPC health SERVING on {self.address}",
                           proc=self.proc)
                return self
            except (TimeoutError, RuntimeError):
                self.proc.stop()
                log = self.proc.log.read_text(errors="replace") if self.proc.log.exists() else ""
                if "Address already in use" in log and attempt < 2:
                    self._pick_ports()
                    continue
                # The error is the log's first lines; a backtrace follows it.
                head = "\n".join(log.splitlines()[:5])
                raise RuntimeError(f"scaler did not become SERVING; log head:\n{head}\nlog tail:\n"
                                   f"{self.proc.tail()}") from None
        raise AssertionError("unreachable")

    def health(self, service="") -> int:
        with channel(self.address, self.tls) as ch:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
            return resp.status

    def serving(self) -> bool:
        return self.health() == health_pb2.HealthCheckResponse.SERVING

    def stop(self) -> int:
        return self.proc.stop() if self.proc else 0
