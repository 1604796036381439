"""What SHOW POOLS, and so CNPG's pooler exporter series, mean (docs/pooler.md): Debian's PgBouncer
in transaction mode in front of a real PostgreSQL, real clients that open more connections than its
pool serves. Each assert is a claim the pooler decision relies on; the figures go to the closing
table. Loopback only; the instance and PgBouncer are this module's own (not the session rig)."""
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from pg import Instance
from pgbouncer import Clients, PgBouncer
from testkit import wait_until


@pytest.fixture(scope="module")
def primary():
    base = Path(tempfile.mkdtemp(prefix="livepg-pgbouncer-"))
    base.chmod(0o755)
    inst = Instance(base, "pgb", 1).init_primary()
    try:
        yield inst
    finally:
        inst.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def bouncer(primary, request):
    b = PgBouncer(Path(primary.dir), primary, **request.param).start()
    try:
        yield b
    finally:
        b.stop()


def server_backends(primary) -> int:
    """The app user's client backends on PostgreSQL: PgBouncer's server connections."""
    return primary.sql("SELECT count(*) FROM pg_stat_activity "
                       "WHERE usename = 'app' AND backend_type = 'client backend'")[0]


def wait_seconds(pool: dict) -> float:
    return pool["maxwait"] + pool["maxwait_us"] / 1e6


@pytest.mark.parametrize("bouncer", [dict(pool_mode="transaction", default_pool_size=2, reserve_pool_size=1,
                                          reserve_pool_timeout=1)], indirect=True)
def test_clients_beyond_the_pool_wait_and_the_wait_grows_until_they_leave(primary, bouncer, record):
    # Three clients connected and idle: in transaction mode they hold no server connection, yet
    # SHOW POOLS counts them in cl_active (clients, not busy clients).
    idle = [bouncer.connect() for _ in range(3)]
    try:
        pool = wait_until(lambda: (p := bouncer.pool()) and p["cl_active"] == 3 and p, 10, 0.1, "3 idle clients")
        assert pool["cl_waiting"] == 0 and pool["sv_active"] == 0
        # Five clients each run a 4 s query: two get the pool's two servers, three wait.
        busy = Clients(bouncer, 5, "SELECT pg_sleep(4)")
        try:
            # PgBouncer logs in one server connection at a time and the five clients connect one
            # after another, so "three waiting" can be seen before the second server serves one:
            # wait for the settled state, both servers busy.
            first = wait_until(lambda: (p := bouncer.pool()) and p["cl_waiting"] == 3 and p["sv_active"] == 2 and p,
                               5, 0.05, "three waiting clients beside two busy servers")
            assert first["cl_active"] == 3 + 2, first
            assert server_backends(primary) == 2
            # maxwait is whole seconds; the fraction is in maxwait_us (a second column).
            time.sleep(0.6)
            before = bouncer.pool()
            time.sleep(0.8)
            after = bouncer.pool()
            assert after["cl_waiting"] >= 1, after
            assert wait_seconds(after) >= wait_seconds(before) + 0.7, (before, after)
            assert after["maxwait_us"] < 1_000_000 and before["maxwait_us"] < 1_000_000
            # Past reserve_pool_timeout (1 s) one reserve server joins: the pool opens up to
            # default_pool_size + reserve_pool_size server connections, never more.
            assert wait_until(lambda: server_backends(primary) == 3, 5, 0.1, "a reserve server")
            samples = []
            for _ in range(10):
                samples.append(server_backends(primary))
                time.sleep(0.1)
            peak_servers = max(samples)
            assert peak_servers == 3, samples
            record("pgbouncer: clients waiting beyond pool 2 + reserve 1",
                   "cl_waiting > 0, maxwait grows, servers ≤ 3",
                   f"cl_waiting {first['cl_waiting']}, wait {wait_seconds(before):.2f}s → "
                   f"{wait_seconds(after):.2f}s (maxwait {after['maxwait']} + maxwait_us {after['maxwait_us']}), "
                   f"servers {peak_servers}")
        finally:
            busy.close()
        assert not busy.errors, busy.errors
        # Every client served and gone: no wait left; the servers stay open (idle) for the next.
        done = wait_until(lambda: (p := bouncer.pool()) and p["cl_active"] == 3 and p, 10, 0.1, "busy clients gone")
        assert (done["cl_waiting"], done["maxwait"], done["maxwait_us"]) == (0, 0, 0), done
        assert done["sv_idle"] == 3 and server_backends(primary) == 3, done
        record("pgbouncer: after the clients left", "cl_waiting 0, maxwait 0; servers held",
               f"cl_waiting {done['cl_waiting']}, maxwait {done['maxwait']}, sv_idle {done['sv_idle']}")
    finally:
        for c in idle:
            c.close()


@pytest.mark.parametrize("bouncer", [dict(pool_mode="session", default_pool_size=3, reserve_pool_size=2,
                                          reserve_pool_timeout=0.2, max_db_connections=2)], indirect=True)
def test_max_db_connections_caps_the_servers_a_pool_opens(primary, bouncer, record):
    # Session mode: each client keeps its server until it leaves. Pool 3 + reserve 2 would allow
    # 5 servers; max_db_connections 2 allows 2, whatever waits.
    busy = Clients(bouncer, 5, "SELECT pg_sleep(2)")
    try:
        pool = wait_until(lambda: (p := bouncer.pool()) and p["cl_waiting"] == 3 and p, 5, 0.05,
                          "three waiting clients")
        time.sleep(0.5)  # past reserve_pool_timeout: the reserve does not lift the cap
        assert server_backends(primary) == 2
        assert bouncer.pool()["sv_active"] == 2
        record("pgbouncer: max_db_connections 2 under pool 3 + reserve 2", "servers 2",
               f"servers {server_backends(primary)}, cl_waiting {pool['cl_waiting']}")
    finally:
        busy.close()
    assert not busy.errors, busy.errors
