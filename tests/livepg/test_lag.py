"""The lag brake on real replication: replay paused while the primary is idle (cluster `quiet`) and
while it writes (cluster `pg`). Two clusters because the brake looks back 5 minutes (max_over_time
of the lag, rate of the WAL counter): one case's lag must not decide the other's brake."""
import time

import pytest

from rig import NAMESPACE
from sessions import Sessions, Writer
from testkit import wait_until

THRESHOLD = "10"  # maxReplicationLagSeconds
LAG = f'cnpg_pg_replication_lag{{namespace="{NAMESPACE}"}}'


def brake_md():
    return {"maxReplicationLagSeconds": THRESHOLD}


class Paused:
    """pg_wal_replay_pause() on a replica for the duration of the block."""

    def __init__(self, replica):
        self.replica = replica

    def __enter__(self):
        self.replica.sql("SELECT pg_wal_replay_pause()")
        wait_until(lambda: self.replica.sql("SELECT pg_get_wal_replay_pause_state()")[0] == "paused", 10, 0.1,
                   f"{self.replica.name} replay paused")
        return self

    def __exit__(self, *exc):
        self.replica.sql("SELECT pg_wal_replay_resume()")

    def lsns(self) -> str:
        recv, replay, ts = self.replica.sql(
            "SELECT pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn(), pg_last_xact_replay_timestamp()")
        return f"receive {recv}, replay {replay}, last replayed commit {ts:%H:%M:%S}" if ts else \
            f"receive {recv}, replay {replay}, no replayed commit"


@pytest.fixture
def load(rig):
    """20 active client sessions on pg-2: the load alone asks for 5 instances (target 5)."""
    with Sessions(rig.instances["pg-2"], 20):
        rig.wait_desired(5)
        yield


@pytest.fixture(scope="module")
def quiet(rig):
    """A second cluster in the namespace, `quiet` (primary quiet-1, replica quiet-2, 20 active
    sessions on the replica), so its lag never mixes with pg's in the brake's 5-minute window."""
    primary = rig.new_instance(1, "quiet").init_primary()
    replica = rig.new_instance(2, "quiet").clone_from(primary)
    for inst in (primary, replica):
        rig.start_exporter(inst)
    with Sessions(replica, 20):
        rig.wait_desired(3, target="10", cluster="quiet")  # 1 + ceil(20 / 10)
        yield primary, replica


def backlog(rig, standby: str) -> float | None:
    """The primary's unreplayed bytes for `standby` (CNPG's pg_stat_replication query)."""
    values = rig.series(f'cnpg_pg_stat_replication_replay_diff_bytes{{namespace="{NAMESPACE}",'
                        f'application_name="{standby}"}}')
    return next(iter(values.values()), None)


def commit_and_replay(primary, replica) -> float:
    """One committed write on the primary, replayed by the replica (so it has a last replayed
    commit, as any replica of a used database has). Returns the commit's epoch seconds."""
    primary.sql("CREATE TABLE IF NOT EXISTS marks (at timestamptz DEFAULT now())", dbname="app")
    at, lsn = primary.sql("INSERT INTO marks DEFAULT VALUES RETURNING extract(epoch FROM at), pg_current_wal_lsn()",
                          dbname="app")
    wait_until(lambda: replica.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0], 10, 0.1,
               f"{replica.name} replayed {lsn}")
    return float(at)


@pytest.fixture(scope="module")
def idle_paused(rig, quiet):
    """quiet-2's replay paused after one commit, the primary idle afterwards but for one checkpoint
    (what checkpoint_timeout, or within 15 s the bgwriter's running-xacts snapshot, brings anyway;
    forced here so the timing is deterministic): CNPG's lag per second until it passes the threshold."""
    primary, replica = quiet
    committed = commit_and_replay(primary, replica)
    with Paused(replica) as paused:
        primary.sql("CHECKPOINT")
        seen = []
        for _ in range(30):
            time.sleep(1)
            seen.append(rig.series(LAG).get(replica.name))
            if seen[-1] > float(THRESHOLD) + 2:
                break
        return {"seen": seen, "since_commit": time.time() - committed, "lsns": paused.lsns(),
                "backlog": backlog(rig, replica.name),
                "report": rig.explain(target="10", lag=THRESHOLD, cluster="quiet")}


def test_idle_primary_paused_replay_reads_as_time_since_last_commit(idle_paused, record):
    """CNPG's formula is 0 while receive = replay; a non-transactional record from the idle primary
    makes them differ, and from then on it reports now() - last replayed commit: a lag that grows
    1 s/s although the replica misses no commit."""
    seen, since = idle_paused["seen"], idle_paused["since_commit"]
    assert seen[-1] > float(THRESHOLD), f"quiet-2's lag stayed under the threshold for 30 s: {seen}"
    assert abs(seen[-1] - since) < 3, f"lag {seen[-1]} is not the time since the commit ({since:.1f} s)"
    report = idle_paused["report"]
    record("cluster quiet: replay paused on quiet-2 after one commit, primary idle but for one CHECKPOINT, "
           "threshold 10 s, load asks for 3",
           "no brake (lag on an idle primary is the known false alarm), desired 3",
           f"CNPG lag on quiet-2 each second {seen}; {idle_paused['lsns']}; replay backlog "
           f"{idle_paused['backlog']:g} B; WAL rate over 5 m "
           f"{report['wal_bytes_per_second']:.1f} B/s; brake {report['decision']['brake']}, "
           f"desired {report['decision']['desired']}")


def test_idle_primary_paused_replay_does_not_brake(idle_paused):
    """The WAL rate over 5 minutes still holds the last commit, so it cannot filter this (finding
    L1); the replica's unreplayed bytes (a background record) can."""
    decision = idle_paused["report"]["decision"]
    assert decision["brake"] != "engaged" and decision["desired"] == 3, decision


def test_paused_replay_while_the_primary_writes_brakes(rig, load, record):
    pg1, pg2 = rig.instances["pg-1"], rig.instances["pg-2"]
    writer = Writer(pg1)
    try:
        with Paused(pg2) as paused:
            lag = rig.wait_scraped(LAG, lambda s: s.get("pg-2", 0) > float(THRESHOLD), 40, "pg-2 lag above 10 s")
            rig.wait_desired(3, **brake_md())  # held at the current count: 3 instance series
            report = rig.explain(lag=THRESHOLD)
            assert report["decision"]["brake"] == "engaged" and report["decision"]["reason"] == "brake", report
            assert report["decision"]["recommended"] == 5
            record("replay paused on pg-2, primary inserting every 50 ms, threshold 10 s",
                   "brake engaged: desired 3 (current), recommended 5",
                   f"CNPG lag {lag}; {paused.lsns()}; replay backlog {backlog(rig, 'pg-2'):g} B; "
                   f"WAL rate {report['wal_bytes_per_second']:.0f} B/s; "
                   f"brake {report['decision']['brake']}, desired {report['decision']['desired']}, "
                   f"recommended {report['decision']['recommended']}")
    finally:
        writer.stop()
    caught_up = rig.wait_scraped(LAG, lambda s: s.get("pg-2") == 0, 30, "pg-2 lag back to 0")
    report = rig.explain(lag=THRESHOLD)
    assert report["decision"]["brake"] == "engaged", "max_over_time keeps the lag for the 5 m window"
    record("replay resumed, writes stopped", "lag back to 0; brake held for the 5 m window",
           f"CNPG lag {caught_up}; brake {report['decision']['brake']} "
           f"(5 m max {report['observation']['max_lag_seconds']:.1f} s)")
