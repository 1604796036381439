"""Behaviour the scaler gets wrong today (see FINDINGS.md). Each test states the right answer and
is marked xfail until the scaler is fixed; an XPASS means the marker can go."""
import math
import time

import grpc
import pytest

from cnpg_series import render, replicas
from keda import metadata


@pytest.mark.xfail(reason="FINDINGS.md F1: int fields encode ceil(desired x target), wrong for KEDA < 2.17",
                   strict=False)
def test_int_fields_alone_give_the_desired_count_for_a_fractional_target(keda):
    """KEDA < 2.17 ignores the float fields: the HPA then computes ceil(metricValue / targetSize)."""
    ref = keda.ref("tenant-a", "so-pg", metadata(target="2.5", max_replicas="20"))
    (spec,) = keda.spec(ref).metricSpecs
    (mv,) = keda.metrics(ref, spec.metricName).metricValues
    desired = round(mv.metricValueFloat / 2.5)  # 7 = 1 + ceil(13 / 2.5)
    assert desired == 7
    assert math.ceil(mv.metricValue / spec.targetSize) == desired


@pytest.fixture(scope="module")
def odd_clusters(vm):
    now = time.time()
    # tenant-x/dup: every series scraped twice (operator PodMonitor + a manual one): 4 + 4 sessions,
    # 300m + 300m CPU. tenant-x/nocpu: CNPG series but no cAdvisor series at all.
    dup = render([replicas("tenant-x", "dup", 4, cpu_millicores=300)], now)
    nocpu = [line for line in render([replicas("tenant-x", "nocpu", 4)], now).splitlines()
             if not line.startswith("container_cpu_usage_seconds_total")]
    vm.import_and_wait(dup + dup.replace('job="cnpg"', 'job="cnpg-manual"') + "\n".join(nocpu) + "\n",
                       'count(cnpg_pg_replication_in_recovery{namespace="tenant-x"})', lambda n: n == 9)


@pytest.mark.xfail(reason="FINDINGS.md F2: duplicate scrapes of one pod are summed twice", strict=False)
@pytest.mark.parametrize("metric,target,desired", [
    ("ReadConnections", "5", 1 + math.ceil(8 / 5)),
    ("ReadCPUUtilization", "250", 1 + math.ceil(600 / 250)),
])
def test_duplicate_scrapes_do_not_double_the_load(keda, odd_clusters, metric, target, desired):
    ref = keda.ref("tenant-x", "so", metadata("dup", target=target, metric=metric, max_replicas="20"))
    assert keda.desired(ref, float(target)) == desired


@pytest.mark.xfail(reason="FINDINGS.md F3: missing CPU series read as 0 load", strict=False)
def test_missing_cpu_series_is_an_error_not_zero_load(keda, odd_clusters):
    ref = keda.ref("tenant-x", "so", metadata("nocpu", target="250", metric="ReadCPUUtilization"))
    try:
        value = keda.metrics(ref, "cnpg-nocpu-readcpuutilization").metricValues[0].metricValueFloat
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.UNAVAILABLE
        return
    pytest.fail(f"answered {value} (the floor) although no CPU series exists for the replicas")
