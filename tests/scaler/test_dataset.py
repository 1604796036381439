"""Sanity of the synthetic data itself, checked with the reference PromQL (docs/scaler.md, The query),
so that a scaler test failure cannot be blamed on the fixture."""
import pytest

import scenarios

INTERNAL = 'usename!~"cnpg_metrics_exporter|postgres|streaming_replica"'


def replicas(ns, cluster):
    return f'(cnpg_pg_replication_in_recovery{{namespace="{ns}",pod=~"{cluster}-([1-9][0-9]*)"}} == 1)'


def read_load(ns, cluster):
    return (f'sum(cnpg_backends_total{{namespace="{ns}",state="active",{INTERNAL}}} '
            f'and on(namespace,pod) {replicas(ns, cluster)}) or vector(0)')


@pytest.mark.parametrize("ns,cluster,load", [
    ("tenant-a", "pg", scenarios.TENANT_A_PG_LOAD),
    ("tenant-a", "pg-archive", scenarios.TENANT_A_ARCHIVE_LOAD),
    ("tenant-b", "pg", scenarios.TENANT_B_PG_LOAD),
    ("tenant-b", "quiet", 0),
    ("tenant-b", "empty", 0),
    ("tenant-c", "busy-lag", scenarios.LAG_CLUSTER_LOAD),
])
def test_reference_read_load(vm, ns, cluster, load):
    assert vm.scalar(read_load(ns, cluster)) == load


def test_reference_cpu_and_write_rate(vm):
    cpu = vm.scalar('sum(rate(container_cpu_usage_seconds_total{namespace="tenant-a",pod=~"pg-([1-9][0-9]*)",'
                    f'container="postgres"}}[5m]) and on(namespace,pod) {replicas("tenant-a", "pg")}) * 1000')
    assert cpu == pytest.approx(scenarios.TENANT_A_PG_CPU, rel=1e-6)
    wal = 'sum(rate(cnpg_collector_wal_bytes{{namespace="tenant-c",pod=~"{c}-[0-9]+"}}[5m]))'
    assert vm.scalar(wal.format(c="busy-lag")) > 0
    assert vm.scalar(wal.format(c="idle-lag")) == 0
