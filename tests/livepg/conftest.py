"""Fixtures: one live rig for the whole session (a primary pg-1 and streaming replicas pg-2, pg-3,
scraped by VictoriaMetrics, read by `scaler serve`), and a record of what each scenario observed,
printed at the end as the table docs/livepg.md keeps."""
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[0] / "scaler")]  # keda.py, scaler_proc.py

from liverig import ScenarioTable  # noqa: E402
from rig import Rig  # noqa: E402

TABLE = ScenarioTable("live PostgreSQL")


@pytest.fixture(scope="session")
def rig():
    r = Rig()
    try:
        r.start()
        primary = r.new_instance(1).init_primary()
        r.start_exporter(primary)
        for n in (2, 3):
            r.start_exporter(r.new_instance(n).clone_from(primary))
        r.wait_scraped(f'cnpg_pg_replication_in_recovery{{namespace="tenant-live"}}', lambda s: len(s) == 3,
                       what="three instances scraped")
        yield r
    finally:
        r.stop()


@pytest.fixture
def record():
    """record(scenario, expected, observed): one row of the closing table."""
    return TABLE.record


def pytest_terminal_summary(terminalreporter):
    TABLE.print(terminalreporter)
