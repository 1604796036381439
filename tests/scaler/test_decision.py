"""Exact answers for the base data set, read through KEDA's call pattern.

value = desired_total × target; desired = clamp(1 + ceil(read load / target), floor, max(max, floor))
with floor = max(minReplicas, maxSyncReplicas + 1, 2)."""
import math
import re

import grpc
import pytest

import scenarios
from keda import code_of, metadata


def value_of(resp):
    (mv,) = resp.metricValues
    return mv


@pytest.mark.parametrize("target,expected_desired", [
    ("5", 1 + math.ceil(13 / 5)),   # 4
    ("3", 1 + math.ceil(13 / 3)),   # 6
    ("2.5", 1 + math.ceil(13 / 2.5)),  # 7
])
def test_read_connections_counts_only_active_client_sessions_on_replicas(keda, target, expected_desired):
    ref = keda.ref("tenant-a", "so-pg", metadata(target=target, max_replicas="20"))
    specs, values, active = keda.scale_loop_poll(ref)
    (spec,) = specs
    assert spec.metricName == "cnpg-pg-readconnections"
    assert spec.targetSizeFloat == float(target)
    assert spec.targetSize in (math.floor(float(target)), math.ceil(float(target)))
    mv = value_of(values[0])
    assert mv.metricValueFloat == pytest.approx(expected_desired * float(target))
    # KEDA < 2.17 reads only the int pair: the HPA's ceil(metricValue / targetSize) must agree.
    assert math.ceil(mv.metricValue / spec.targetSize) == expected_desired
    assert active is True


def test_read_cpu_utilization_counts_postgres_container_on_replicas(keda):
    # 700 millicores on replicas; the primary's 2000m, pod-level cgroup and sidecars never count.
    ref = keda.ref("tenant-a", "so-pg", metadata(metric="ReadCPUUtilization", target="250", max_replicas="20"))
    specs, values, _ = keda.scale_loop_poll(ref)
    assert [s.metricName for s in specs] == ["cnpg-pg-readcpuutilization"]
    assert value_of(values[0]).metricValueFloat == pytest.approx((1 + math.ceil(700 / 250)) * 250)


def test_hpa_path_with_lowercased_name_and_3s_deadline(keda):
    ref = keda.ref("tenant-a", "so-pg", metadata(target="5"))
    specs, resp, active = keda.hpa_query(ref)
    assert value_of(resp).metricValueFloat == 4 * 5
    assert active is True


def test_metric_name_matches_case_insensitively(keda):
    ref = keda.ref("tenant-a", "so-pg", metadata(target="5"))
    assert value_of(keda.metrics(ref, "CNPG-PG-ReadConnections")).metricValueFloat == 20


def test_unknown_metric_name_is_an_error_not_a_value(keda):
    ref = keda.ref("tenant-a", "so-pg", metadata(target="5"))
    assert code_of(lambda: keda.metrics(ref, "cnpg-pg-archive-readconnections")) != grpc.StatusCode.OK


def test_cluster_defaults_to_the_scaled_object_name(keda):
    md = metadata(target="5")
    del md["cluster"]
    assert keda.desired(keda.ref("tenant-a", "pg", md), 5) == 4


def test_prefix_cluster_in_same_namespace_does_not_leak(keda):
    # pg-archive has 100 sessions: desired 21, clamped to max 10. pg stays at 4.
    assert keda.desired(keda.ref("tenant-a", "a", metadata("pg-archive", target="5")), 5) == 10
    assert keda.desired(keda.ref("tenant-a", "b", metadata("pg", target="5")), 5) == 4


def test_namespace_comes_from_the_request(keda):
    # target 1: tenant-a/pg -> 1 + 13 = 14; tenant-b/pg -> 1 + 2 = 3.
    assert keda.desired(keda.ref("tenant-a", "so", metadata(target="1", max_replicas="30")), 1) == 14
    assert keda.desired(keda.ref("tenant-b", "so", metadata(target="1", max_replicas="30")), 1) == 3
    # A "namespace" key in the metadata must never redirect the query to another tenant.
    sneaky = keda.ref("tenant-b", "so", metadata(target="1", max_replicas="30", namespace="tenant-a"))
    try:
        assert keda.desired(sneaky, 1) == 3
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_zero_load_gives_the_floor_of_two(keda):
    # No active client session: 1 + 0 = 1, floor 2.
    assert keda.desired(keda.ref("tenant-b", "so", metadata("quiet", target="5", minReplicas="1")), 5) == 2


def test_replicas_without_backend_rows_are_unavailable_not_zero_load(keda):
    # No backend rows at all (the exporter's own session is always one): the replica was not
    # scraped, or the backends query fails. Its sessions are unknown; before, this read as load 0
    # and the real node's count fell from 4 while a standby joined (docs/e2e.md).
    ref = keda.ref("tenant-b", "so", metadata("empty", target="5", minReplicas="1"))
    assert code_of(lambda: keda.desired(ref, 5)) == grpc.StatusCode.UNAVAILABLE


def test_min_replicas_floor(keda):
    assert keda.desired(keda.ref("tenant-b", "so", metadata(target="5", minReplicas="3")), 5) == 3


def test_quorum_floor(keda):
    # maxSyncReplicas 3 needs 3 standbys + primary = 4, above the load's 2.
    assert keda.desired(keda.ref("tenant-b", "so", metadata(target="5", maxSyncReplicas="3")), 5) == 4


def test_quorum_beats_max_replicas(keda):
    ref = keda.ref("tenant-b", "so", metadata(target="5", minReplicas="2", max_replicas="3", maxSyncReplicas="4"))
    assert keda.desired(ref, 5) == 5


def test_max_replicas_clamps(keda):
    assert keda.desired(keda.ref("tenant-a", "so", metadata(target="1", max_replicas="6")), 1) == 6


def test_min_equal_max_pins_the_count(keda):
    assert keda.desired(keda.ref("tenant-a", "so", metadata(target="1", minReplicas="5", max_replicas="5")), 1) == 5


# Lag brake. Both lag clusters: 12 sessions, 3 instances, replicas 600 s behind.
LAG_TARGET = "2"  # 1 + ceil(12 / 2) = 7 without the brake


def test_lag_brake_holds_current_count_when_primary_writes(keda):
    ref = keda.ref("tenant-c", "so", metadata("busy-lag", target=LAG_TARGET, maxReplicationLagSeconds="30"))
    assert keda.desired(ref, 2) == scenarios.LAG_CLUSTER_INSTANCES


def test_lag_brake_also_blocks_scale_down(keda):
    # target 100: load wants 2, but the brake holds the current 3.
    ref = keda.ref("tenant-c", "so", metadata("busy-lag", target="100", maxReplicationLagSeconds="30"))
    assert keda.desired(ref, 100) == 3


def test_lag_brake_never_goes_below_the_floor(keda):
    ref = keda.ref("tenant-c", "so", metadata("busy-lag", target=LAG_TARGET, maxReplicationLagSeconds="30",
                                              maxSyncReplicas="3"))
    assert keda.desired(ref, 2) == 4


@pytest.mark.parametrize("threshold", ["0", "1000"])
def test_lag_brake_off_or_lag_below_threshold(keda, threshold):
    ref = keda.ref("tenant-c", "so", metadata("busy-lag", target=LAG_TARGET, maxReplicationLagSeconds=threshold))
    assert keda.desired(ref, 2) == 7


def test_idle_primary_lag_never_brakes(keda):
    ref = keda.ref("tenant-c", "so", metadata("idle-lag", target=LAG_TARGET, maxReplicationLagSeconds="30"))
    assert keda.desired(ref, 2) == 7


def test_dry_run_holds_current_count(keda):
    ref = keda.ref("tenant-a", "so-dry", metadata(target="5", dryRun="true"))
    assert keda.desired(ref, 5) == scenarios.TENANT_A_PG_INSTANCES  # recommendation 4, held at 3
    floor_ref = keda.ref("tenant-a", "so-dry", metadata(target="5", dryRun="true", minReplicas="5"))
    assert keda.desired(floor_ref, 5) == 5


def test_dry_run_false_acts(keda):
    assert keda.desired(keda.ref("tenant-a", "so", metadata(target="5", dryRun="false")), 5) == 4


def test_cluster_without_series_is_an_error_never_zero(keda):
    ref = keda.ref("tenant-a", "ghost", metadata("ghost", target="5"))
    code = code_of(lambda: keda.metrics(ref, "cnpg-ghost-readconnections"))
    assert code not in (grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT), code
    # IsActive must not claim a cluster that does not exist.
    try:
        assert keda.is_active(ref) is False
    except grpc.RpcError as e:
        assert e.code() != grpc.StatusCode.OK


def test_other_namespace_cluster_is_not_found_here(keda):
    # busy-lag exists only in tenant-c.
    ref = keda.ref("tenant-a", "so", metadata("busy-lag", target="5"))
    assert code_of(lambda: keda.metrics(ref, "cnpg-busy-lag-readconnections")) != grpc.StatusCode.OK


def test_lag_brake_looks_at_the_last_five_minutes(vm, keda):
    """A lag spike 2-3 minutes ago still brakes; one 7-8 minutes ago does not. Imported now,
    with the sample ages relative to this moment."""
    import time

    from cnpg_series import render, replicas

    recent = replicas("tenant-e", "recent-spike", 6, lag=lambda age: 600.0 if 120 <= age <= 180 else 0.0)
    old = replicas("tenant-e", "old-spike", 6, lag=lambda age: 600.0 if 420 <= age <= 480 else 0.0)
    for c in (recent, old):
        c.pods[0].wal_bytes_per_s = 50_000
    vm.import_and_wait(render([recent, old], time.time()),
                       'count(cnpg_pg_replication_in_recovery{namespace="tenant-e"})', lambda n: n == 6)
    md = dict(target=LAG_TARGET, maxReplicationLagSeconds="30")
    assert keda.desired(keda.ref("tenant-e", "so", metadata("recent-spike", **md)), 2) == 3
    assert keda.desired(keda.ref("tenant-e", "so", metadata("old-spike", **md)), 2) == 7


def test_unknown_write_activity_or_lag_holds_a_lagging_cluster(vm, keda):
    """Issue 43, on real VictoriaMetrics. `young`: one scrape so far, replicas 600 s behind a
    writing primary: `rate()` of the WAL counter has nothing yet, so write activity is unknown and
    holds (it counted as idle and served the load's 7). `nolag`: writing for ten minutes, one replica
    without a lag series: its lag is unknown and holds. `quiet`: the same but the primary idle for
    the whole window: released (only a primary known to be idle releases)."""
    import time

    from cnpg_series import render, render_at, replicas, Counters, WAL_ORIGIN

    now = time.time()
    young = replicas("tenant-g", "young", 6, lag=lambda age: 600.0)
    young.pods[0].wal_bytes_per_s = 50_000
    one_scrape = render_at([young], now, {("tenant-g", young.pod_name(p)): Counters(WAL_ORIGIN, 1.0, 60.0)
                                          for p in young.pods})
    nolag = replicas("tenant-g", "nolag", 6)
    nolag.pods[0].wal_bytes_per_s = 50_000
    quiet = replicas("tenant-g", "quiet", 6)
    text = render([nolag, quiet], now)
    # Replica -3 of both exports no lag series (a custom monitoring configuration, say).
    text = "\n".join(line for line in text.splitlines()
                      if not (line.startswith("cnpg_pg_replication_lag{") and '-3"' in line)) + "\n"
    vm.import_and_wait(one_scrape + text, 'count(cnpg_pg_replication_in_recovery{namespace="tenant-g"})',
                       lambda n: n == 9)
    md = dict(target=LAG_TARGET, maxReplicationLagSeconds="30")
    assert keda.desired(keda.ref("tenant-g", "so", metadata("young", **md)), 2) == 3
    assert keda.desired(keda.ref("tenant-g", "so", metadata("nolag", **md)), 2) == 3
    assert keda.desired(keda.ref("tenant-g", "so", metadata("quiet", **md)), 2) == 7


@pytest.fixture(scope="module")
def odd_clusters(vm):
    """tenant-x/dup: every series scraped twice (operator PodMonitor + a manual one): 4 + 4
    sessions, 300m + 300m CPU. tenant-x/nocpu: CNPG series but no cAdvisor series at all."""
    import time

    from cnpg_series import render, replicas

    now = time.time()
    dup = render([replicas("tenant-x", "dup", 4, cpu_millicores=300)], now)
    nocpu = [line for line in render([replicas("tenant-x", "nocpu", 4)], now).splitlines()
             if not line.startswith("container_cpu_usage_seconds_total")]
    manual = re.sub(r'job="([^"]*)"', r'job="\1-manual"', dup)  # every series, CNPG's and cAdvisor's
    vm.import_and_wait(dup + manual + "\n".join(nocpu) + "\n",
                       'count(cnpg_pg_replication_in_recovery{namespace="tenant-x"})', lambda n: n == 9)


@pytest.mark.parametrize("metric,target,desired", [
    ("ReadConnections", "5", 1 + math.ceil(8 / 5)),
    ("ReadCPUUtilization", "250", 1 + math.ceil(600 / 250)),
])
def test_duplicate_scrapes_do_not_double_the_load(keda, odd_clusters, metric, target, desired):
    ref = keda.ref("tenant-x", "so", metadata("dup", target=target, metric=metric, max_replicas="20"))
    assert keda.desired(ref, float(target)) == desired


def test_missing_cpu_series_is_an_error_not_zero_load(keda, odd_clusters):
    # cAdvisor always exports a running container's counter: its absence is unknown, not idle.
    ref = keda.ref("tenant-x", "so", metadata("nocpu", target="250", metric="ReadCPUUtilization"))
    assert code_of(lambda: keda.metrics(ref, "cnpg-nocpu-readcpuutilization")) == grpc.StatusCode.UNAVAILABLE
    # ReadConnections on the same cluster is fine: CNPG omits zero rows, so no rows = no load.
    ok = keda.ref("tenant-x", "so", metadata("nocpu", target="5"))
    assert keda.desired(ok, 5) == 1 + math.ceil(8 / 5)
