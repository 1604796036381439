"""Fixtures: one real VictoriaMetrics with the base CNPG data set, one scaler in front of it,
and factories for extra scalers / VictoriaMetrics instances that a test may break on purpose."""
import pathlib
import sys
import time

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "lib"))  # testkit

import scenarios
from cnpg_series import render
from keda import Keda
from scaler_proc import Scaler
from vm import VictoriaMetrics


@pytest.fixture(scope="session")
def vm(tmp_path_factory):
    v = VictoriaMetrics(str(tmp_path_factory.mktemp("vm"))).start()
    v.import_and_wait(
        render(scenarios.BASE, time.time()),
        # The last cluster of the base set, so everything before it is searchable too.
        'count(cnpg_pg_replication_in_recovery{namespace="tenant-c",pod=~"busy-lag-[0-9]+"})',
        expect=lambda n: n == scenarios.LAG_CLUSTER_INSTANCES,
    )
    yield v
    v.stop()


@pytest.fixture(scope="session")
def scaler(vm, tmp_path_factory):
    s = Scaler(str(tmp_path_factory.mktemp("scaler")), vm.url).start()
    yield s
    s.stop()


@pytest.fixture(scope="session")
def keda(scaler):
    k = Keda(scaler.address)
    yield k
    k.close()


@pytest.fixture
def start_scaler(tmp_path):
    """Factory: start_scaler(prometheus_url, *extra_flags, tls=None) -> (Scaler, Keda); stopped afterwards."""
    started = []

    def start(prometheus_url, *extra, tls=None, **kw):
        s = Scaler(str(tmp_path), prometheus_url, *extra, tls=tls, **kw).start()
        k = Keda(s.address, tls)
        started.append((s, k))
        return s, k

    yield start
    for s, k in started:
        # Server first: grpcio's Channel.close() waits for every call on the channel to end, and
        # calls the server stopped answering (streams past its cap, resets it refused) end only
        # when the connection does.
        s.stop()
        k.close()


@pytest.fixture
def private_vm(tmp_path):
    """A VictoriaMetrics of the test's own, loaded with the base set, that it may stop."""
    v = VictoriaMetrics(str(tmp_path)).start()
    v.import_and_wait(render(scenarios.BASE, time.time()),
                      'count(cnpg_pg_replication_in_recovery{namespace="tenant-a",pod=~"pg-[0-9]+"})',
                      expect=lambda n: n == scenarios.TENANT_A_PG_INSTANCES)
    yield v
    v.stop()
