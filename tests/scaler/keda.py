"""An independent gRPC client of the scaler, generated from proto/externalscaler.proto with
grpc_tools at test time, that calls the server the way KEDA does (docs/scaler.md, How it works)."""
import importlib
import os
import sys
import tempfile
import threading
import time

import grpc
from grpc_tools import protoc

from testkit import REPO

# Seconds a channel close may wait for its calls to wind down.
CLOSE_TIMEOUT = 5

_pb = None


def stubs():
    """(externalscaler_pb2, externalscaler_pb2_grpc), compiled once per process into a temp dir."""
    global _pb
    if _pb is None:
        out = tempfile.mkdtemp(prefix="scaler-stubs-")
        proto_dir = str(REPO / "proto")
        rc = protoc.main([
            "grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={out}", f"--grpc_python_out={out}",
            os.path.join(proto_dir, "externalscaler.proto"),
        ])
        if rc != 0:
            raise RuntimeError(f"protoc failed on externalscaler.proto (rc={rc})")
        sys.path.insert(0, out)
        _pb = (importlib.import_module("externalscaler_pb2"), importlib.import_module("externalscaler_pb2_grpc"))
    return _pb


def metadata(cluster="pg", target="5", max_replicas="10", **extra) -> dict:
    """Trigger metadata as KEDA forwards it: every value a string, KEDA's own keys included."""
    md = {"scalerAddress": "cnpg-scaler.cozy-keda.svc:6000", "cluster": cluster, "metric": "ReadConnections",
          "target": target, "maxReplicas": max_replicas}
    md.update({k: v for k, v in extra.items() if v is not None})
    return md


def channel(address: str, tls=None):
    """Plaintext h2c like KEDA without enableTLS, or TLS: `tls` = (credentials, server name)."""
    if tls is None:
        return grpc.insecure_channel(address)
    creds, server_name = tls
    return grpc.secure_channel(address, creds, options=[("grpc.ssl_target_name_override", server_name)])


class Keda:
    """One shared channel, like KEDA's connection pool keyed by scalerAddress."""

    def __init__(self, address: str, tls=None):
        pb2, pb2_grpc = stubs()
        self.pb2 = pb2
        self.channel = channel(address, tls)
        self.stub = pb2_grpc.ExternalScalerStub(self.channel)

    def close(self):
        # grpcio's Channel.close() waits for every call to wind down; streams that were queued
        # behind the server's per-connection stream cap and then cancelled can keep it waiting
        # for ever (seen about one run in four). Bound the wait; the process exit reaps the rest.
        closer = threading.Thread(target=self.channel.close, daemon=True)
        closer.start()
        closer.join(CLOSE_TIMEOUT)

    def ref(self, namespace: str, name: str, md: dict):
        return self.pb2.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=md)

    def spec(self, ref, timeout=5.0):
        return self.stub.GetMetricSpec(ref, timeout=timeout)

    def metrics_request(self, ref, metric_name):
        return self.pb2.GetMetricsRequest(scaledObjectRef=ref, metricName=metric_name)

    def metrics(self, ref, metric_name, timeout=5.0):
        return self.stub.GetMetrics(self.metrics_request(ref, metric_name), timeout=timeout)

    def is_active(self, ref, timeout=5.0):
        return self.stub.IsActive(ref, timeout=timeout).result

    def scale_loop_poll(self, ref, timeout=5.0):
        """Scale loop: GetMetricSpec, then per spec GetMetrics(spec name) + IsActive."""
        specs = self.spec(ref, timeout).metricSpecs
        values = []
        for s in specs:
            values.append(self.metrics(ref, s.metricName, timeout))
            active = self.is_active(ref, timeout)
        return specs, values, active

    def hpa_query(self, ref, deadline=3.0):
        """HPA path: the metrics-apiserver's 3 s deadline covers all three calls, and
        client-go lowercases the metric name."""
        end = time.monotonic() + deadline
        specs = self.spec(ref, end - time.monotonic()).metricSpecs
        value = self.metrics(ref, specs[0].metricName.lower(), end - time.monotonic())
        active = self.is_active(ref, end - time.monotonic())
        return specs, value, active

    def desired(self, ref, target: float) -> int:
        """What the HPA would compute from one KEDA poll: ceil(value / target)."""
        _, values, _ = self.scale_loop_poll(ref)
        (resp,) = values
        (mv,) = resp.metricValues
        ratio = mv.metricValueFloat / target
        assert abs(ratio - round(ratio)) < 1e-9, f"value {mv.metricValueFloat} is not a multiple of {target}"
        return round(ratio)


def code_of(call) -> grpc.StatusCode:
    """Runs `call()` and returns its gRPC status code (OK when it succeeds)."""
    try:
        call()
    except grpc.RpcError as e:
        return e.code()
    return grpc.StatusCode.OK


def error_of(call) -> grpc.RpcError:
    try:
        call()
    except grpc.RpcError as e:
        return e
    raise AssertionError("call succeeded, an error was expected")
