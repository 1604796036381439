"""Invalid trigger metadata is INVALID_ARGUMENT from every rpc, naming the key at fault."""
import grpc
import pytest

from keda import error_of, metadata

INVALID = [
    # (id, metadata overrides (None deletes the key), key the message must name)
    ("target-not-a-number", {"target": "five"}, "target"),
    ("target-zero", {"target": "0"}, "target"),
    ("target-negative", {"target": "-3"}, "target"),
    ("target-missing", {"target": None}, "target"),
    ("min-not-a-number", {"minReplicas": "two"}, "minReplicas"),
    ("max-not-a-number", {"maxReplicas": "lots"}, "maxReplicas"),
    ("max-missing", {"maxReplicas": None}, "maxReplicas"),
    ("min-above-max", {"minReplicas": "6", "maxReplicas": "4"}, "minReplicas"),
    ("unknown-metric", {"metric": "WriteIOPS"}, "metric"),
    ("sync-not-a-number", {"maxSyncReplicas": "quorum"}, "maxSyncReplicas"),
    ("sync-negative", {"maxSyncReplicas": "-1"}, "maxSyncReplicas"),
    ("lag-not-a-number", {"maxReplicationLagSeconds": "1m"}, "maxReplicationLagSeconds"),
    ("lag-negative", {"maxReplicationLagSeconds": "-5"}, "maxReplicationLagSeconds"),
    ("dryrun-not-a-bool", {"dryRun": "maybe"}, "dryRun"),
    ("scalein-unknown", {"scaleIn": "off"}, "scaleIn"),
    ("signals-no-target", {"signals": "ReadCPUUtilization"}, "signals"),
    ("signals-unknown-metric", {"signals": "WriteIOPS=5"}, "signals"),
    ("signals-repeat-metric", {"signals": "ReadConnections=5"}, "signals"),
    ("signals-three", {"signals": "ReadCPUUtilization=5,ReadConnectionUsage=5,ReadConnections=1"}, "signals"),
    ("schedule-no-duration", {"schedules": "0 8 * * 1-5 floor 4"}, "schedules"),
    ("schedule-bad-cron", {"schedules": "0 25 * * * for 1h floor 4"}, "schedules"),
    ("schedule-six-fields", {"schedules": "0 0 8 * * * for 1h floor 4"}, "schedules"),
    ("schedule-never", {"schedules": "0 0 31 2 * for 1h floor 4"}, "schedules"),
    ("schedule-bad-zone", {"schedules": "0 8 * * * for 1h floor 4 in Europe/Atlantis"}, "schedules"),
    ("schedule-floor-above-max", {"schedules": "0 8 * * * for 1h floor 11"}, "schedules"),
    ("schedule-does-nothing", {"schedules": "0 8 * * * for 1h"}, "schedules"),
    ("engine-unknown", {"engine": "mysql"}, "engine"),
    ("redis-seconds-lag", {"engine": "redis", "maxReplicationLagSeconds": "10"}, "maxReplicationLagSeconds"),
    ("redis-cnpg-metric", {"engine": "redis", "metric": "ReadCPUUtilization"}, "metric"),
    ("redis-lag-not-bytes", {"engine": "redis", "maxReplicationLagBytes": "1MiB"}, "maxReplicationLagBytes"),
    ("cnpg-bytes-lag", {"maxReplicationLagBytes": "1048576"}, "maxReplicationLagBytes"),
    ("schedule-second-window", {"schedules": "0 8 * * * for 1h floor 3; 0 9 * * * for 99d floor 3"}, "window 2"),
]


def bad_metadata(overrides):
    md = metadata(target="5")
    for k, v in overrides.items():
        if v is None:
            md.pop(k, None)
        else:
            md[k] = v
    return md


def rpcs(keda, ref):
    """Every rpc KEDA may call with this ref; streams fail on their first read."""
    return {
        "GetMetricSpec": lambda: keda.spec(ref),
        "GetMetrics": lambda: keda.metrics(ref, "cnpg-pg-readconnections"),
        "IsActive": lambda: keda.is_active(ref),
        "StreamIsActive": lambda: next(keda.stub.StreamIsActive(ref, timeout=5)),
    }


@pytest.mark.parametrize("case,overrides,key", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_metadata_is_invalid_argument_naming_the_key(keda, case, overrides, key):
    ref = keda.ref("tenant-a", "so-pg", bad_metadata(overrides))
    for rpc, call in rpcs(keda, ref).items():
        err = error_of(call)
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{rpc}: {err.code()} {err.details()}"
        assert key in err.details(), f"{rpc}: message {err.details()!r} does not name {key!r}"


def test_missing_scaled_object_ref_is_invalid_argument(keda):
    req = keda.pb2.GetMetricsRequest(metricName="cnpg-pg-readconnections")
    err = error_of(lambda: keda.stub.GetMetrics(req, timeout=5))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "scaledObjectRef" in err.details()


@pytest.mark.parametrize("namespace,name", [("", "pg"), ("tenant-a", "")])
def test_ref_without_namespace_or_name_is_invalid_argument(keda, namespace, name):
    ref = keda.ref(namespace, name, metadata(target="5"))
    for rpc, call in rpcs(keda, ref).items():
        assert error_of(call).code() == grpc.StatusCode.INVALID_ARGUMENT, rpc


def test_keda_own_keys_are_accepted(keda):
    md = metadata(target="5", enableTLS="false", unsafeSsl="true")
    assert keda.desired(keda.ref("tenant-a", "so-pg", md), 5) == 4


def test_get_metric_spec_works_without_any_backend(start_scaler):
    # Nothing listens on port 1: GetMetricSpec must not care.
    _, keda = start_scaler("http://127.0.0.1:1")
    ref = keda.ref("tenant-a", "so-pg", metadata(target="7.5", metric="ReadCPUUtilization"))
    (spec,) = keda.spec(ref, timeout=1).metricSpecs
    assert spec.metricName == "cnpg-pg-readcpuutilization"
    assert spec.targetSizeFloat == 7.5
    assert spec.targetSize in (7, 8)
