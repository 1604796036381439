"""Fixtures: one live rig per engine (Redis, then Valkey: a RedisFailover's spec.engine), each for
every scenario (master rfr-cache-0, replicas rfr-cache-1 and rfr-cache-2, three sentinels, an
exporter each, VictoriaMetrics, `scaler serve`), and a record of what each scenario observed,
printed at the end as the table docs/redis.md keeps."""
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[0] / "scaler")]  # keda.py, scaler_proc.py

from liverig import ScenarioTable  # noqa: E402
from rig import ENGINES, NAMESPACE, SENTINELS, Rig  # noqa: E402

TABLE = ScenarioTable("live Redis")


@pytest.fixture(scope="session", params=list(ENGINES), ids=str.lower)
def rig(request):
    """Session-scoped and parametrized: pytest runs every scenario on one engine's rig, in file
    order (the idle master first, on a fresh VictoriaMetrics), stops it, then the next engine's."""
    r = Rig(ENGINES[request.param]())
    try:
        r.start()
        r.wait_scraped(f'redis_instance_info{{namespace="{NAMESPACE}"}}', lambda s: len(s) == 3,
                       what="three instances scraped")
        # Every sentinel holds two connections to each instance once it has discovered it (client
        # list entries are new series at every scrape: counted by name over a few seconds).
        r.wait_scraped(f'count by (pod) (count by (pod,name) (last_over_time(redis_connected_clients_details'
                       f'{{namespace="{NAMESPACE}",name=~"sentinel-.*"}}[5s])))',
                       lambda s: len(s) == 3 and all(v >= 2 * SENTINELS for v in s.values()),
                       timeout=60, what="every sentinel connected to every instance")
        yield r
    finally:
        r.stop()


@pytest.fixture
def record(rig):
    """record(scenario, expected, observed): one row of the closing table, named by engine."""
    return lambda scenario, expected, observed: TABLE.record(f"{rig.engine.name}: {scenario}", expected,
                                                             observed)


def pytest_terminal_summary(terminalreporter):
    TABLE.print(terminalreporter)
