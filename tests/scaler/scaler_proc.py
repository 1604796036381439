"""Starts `scaler serve` on loopback ports and waits for gRPC health SERVING."""
import os

from grpc_health.v1 import health_pb2, health_pb2_grpc

from keda import channel
from testkit import Proc, cargo_bin, free_port, wait_until


def scaler_binary() -> str:
    return str(cargo_bin("scaler"))


class Scaler:
    def __init__(self, workdir: str, prometheus_url: str, *extra: str, refresh="1s", tls=None,
                 topology="metrics", env=None):
        self.env = env or {}
        self.tls = tls  # (grpc credentials, server name) the health probe connects with
        self.grpc_port, self.admin_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.grpc_port}"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        self.argv = [
            scaler_binary(), "serve",
            "--listen", self.address,
            "--admin-listen", f"127.0.0.1:{self.admin_port}",
            "--prometheus-url", prometheus_url,
            "--topology", topology,
            "--refresh-interval", refresh,
            *extra,
        ]
        self.log = os.path.join(workdir, f"scaler-{self.grpc_port}.log")
        self.proc = None

    def start(self, timeout=30):
        self.proc = Proc(self.argv, self.log, env=self.env)
        try:
            wait_until(self.serving, timeout, 0.1, f"scaler gRPC health SERVING on {self.address}")
        except TimeoutError:
            self.proc.stop()
            raise RuntimeError(f"scaler did not become SERVING; log tail:\n{self.proc.tail()}")
        return self

    def health(self, service="") -> int:
        with channel(self.address, self.tls) as ch:
            resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=service), timeout=1)
            return resp.status

    def serving(self) -> bool:
        if not self.proc.alive():
            raise RuntimeError(f"scaler exited early:\n{self.proc.tail()}")
        return self.health() == health_pb2.HealthCheckResponse.SERVING

    def stop(self) -> int:
        return self.proc.stop() if self.proc else 0
