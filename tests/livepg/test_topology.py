"""Instances coming and going: a stopped replica, a switchover, a new replica catching up.
The scaler runs with --topology metrics, so its current count is the number of instance series."""
import time

import grpc

from rig import NAMESPACE
from sessions import Sessions, Writer
from testkit import wait_until

PG = f'namespace="{NAMESPACE}",pod=~"pg-[0-9]+"'
IN_RECOVERY = f"cnpg_pg_replication_in_recovery{{{PG}}}"


def instances(rig) -> int:
    return rig.explain()["instance_series"]


def test_stopped_replica_leaves_the_count(rig, record):
    pg2, pg3 = rig.instances["pg-2"], rig.instances["pg-3"]
    with Sessions(pg2, 6), Sessions(pg3, 6):
        rig.wait_desired(4)  # 1 + ceil(12 / 5)
        assert instances(rig) == 3
        # PostgreSQL stops, the pod (and its exporter) stays: CNPG's queries fail, their series go.
        t0 = time.monotonic()
        pg3.stop()
        rig.wait_scraped(IN_RECOVERY, lambda s: set(s) == {"pg-1", "pg-2"}, what="pg-3 gone from in_recovery")
        gone_after = time.monotonic() - t0
        rig.wait_desired(3)  # 1 + ceil(6 / 5): pg-3's sessions died with it
        up = rig.wait_scraped(f'cnpg_collector_up{{{PG}}}', lambda s: s.get("pg-3") == 0)
        assert instances(rig) == 2
        wal = rig.series(f'cnpg_collector_wal_bytes{{namespace="{NAMESPACE}",pod="pg-3"}}')
        record("PostgreSQL on replica pg-3 stopped, its exporter still up; 6 + 6 active sessions",
               "instances 3 -> 2, desired 4 -> 3",
               f"in_recovery series of pg-3 gone {gone_after:.1f} s after the stop; cnpg_collector_up {up}; "
               f"instances 2, desired 3; pg-3's wal_bytes series still exported ({len(wal)}: CNPG never "
               "resets that gauge vector)")
    pg3.start()
    rig.wait_scraped(IN_RECOVERY, lambda s: s.get("pg-3") == 1, what="pg-3 back")
    # The pod goes away: exporter and PostgreSQL stop, the scrape target disappears.
    rig.stop_pod(pg3)
    t0 = time.monotonic()
    rig.wait_scraped(IN_RECOVERY, lambda s: set(s) == {"pg-1", "pg-2"}, what="pg-3's target gone")
    record("replica pod pg-3 removed (PostgreSQL and exporter stop, target leaves the scrape config)",
           "instances 3 -> 2", f"every pg-3 series gone after {time.monotonic() - t0:.1f} s (staleness "
           f"markers); instances {instances(rig)}")
    assert instances(rig) == 2
    pg3.start()
    rig.start_exporter(pg3)
    rig.wait_scraped(IN_RECOVERY, lambda s: len(s) == 3, what="pg-3 back")


def test_a_missed_collection_never_lowers_the_count(rig, record):
    """One collection of a serving replica returns none of CNPG's query series while the pod stays
    scraped: every series of it goes stale at once (seen on the real node while standbys joined,
    docs/e2e.md). The replica stays an instance (bridged) and its sessions are unknown: every
    answer is the count or UNAVAILABLE (the HPA holds), never fewer."""
    pg2, pg3 = rig.instances["pg-2"], rig.instances["pg-3"]

    def answer():
        try:
            return rig.desired()
        except grpc.RpcError as e:
            return e.code().name
    with Sessions(pg2, 6), Sessions(pg3, 6):
        rig.wait_desired(4)  # 1 + ceil(12 / 5)
        rig.fail_queries(pg3, 4)
        t0 = time.monotonic()
        seen_gap, answers = False, []
        while time.monotonic() - t0 < 8:
            seen_gap |= "pg-3" not in rig.series(IN_RECOVERY)
            answers.append(answer())
            time.sleep(0.2)
        rig.wait_scraped(IN_RECOVERY, lambda s: s.get("pg-3") == 1, what="pg-3's series back")
        assert seen_gap, "pg-3's series never went stale: the fault did not happen"
        assert set(answers) <= {4, "UNAVAILABLE"} and answers[-1] == 4, f"answers over the gap: {answers}"
        record("replica pg-3 (6 of 12 sessions) misses its collections for 4 s, still scraped (up 1)",
               "pg-3 stays an instance, its sessions unknown: 4 or UNAVAILABLE, never fewer",
               f"gap seen in the instant series: {seen_gap}; {len(answers)} answers over 8 s: "
               f"{answers.count(4)} × 4, {answers.count('UNAVAILABLE')} × UNAVAILABLE")


def test_switchover_roles_follow_in_recovery(rig, record):
    pg1, pg2, pg3 = (rig.instances[f"pg-{n}"] for n in (1, 2, 3))
    with Sessions(pg2, 12):
        rig.wait_desired(4)  # pg-2 is a replica: 1 + ceil(12 / 5)
        # Switchover to pg-2, as CNPG does it: fast shutdown of the primary (its WAL reaches the
        # standbys), promote pg-2, point pg-3 at it, restart pg-1 as a standby of pg-2.
        pg1.stop()
        pg2.promote()
        pg3.follow(pg2)
        pg1.follow(pg2, reload=False)
        pg1.start()
        roles = rig.wait_scraped(IN_RECOVERY, lambda s: s == {"pg-1": 1, "pg-2": 0, "pg-3": 1},
                                 what="roles after the switchover")
        streaming = wait_until(lambda: pg2.sql(
            "SELECT array_agg(application_name ORDER BY application_name) FROM pg_stat_replication WHERE state = 'streaming'"
        )[0] == ["pg-1", "pg-3"], 30, 0.5, "pg-1 and pg-3 streaming from pg-2")
        with Sessions(pg1, 6):
            # pg-2's 12 sessions survived the promotion but are on the primary now; pg-1's 6 count.
            rig.wait_desired(3)
            # Until a scrape of pg-1 holds its new sessions the load reads 0: after its restart
            # its exporter can fail a collection (cnpg_collector_up 0: pg-1 is no instance for
            # that scrape), and a CI run also read (0 sessions, 3 instances) twice right after the
            # desired count moved (not explained yet: docs/livepg.md). pg-2's 12 sessions, on the
            # primary now, must never count.
            seen = []

            def reads_pg1():
                report = rig.explain_when_scraped()
                seen.append((report["observation"]["load"], report["instance_series"]))
                return report if seen[-1] == (6, 3) else None
            report = wait_until(reads_pg1, 20, 0.5, "explain reading pg-1's 6 sessions")
            assert all(load in (0, 6) for load, _ in seen), f"(load, instances) read: {seen}"
            record("switchover pg-1 -> pg-2 with 12 active sessions on pg-2; then 6 on pg-1",
                   "in_recovery pg-1 1, pg-2 0, pg-3 1; desired 4 -> 3 (pg-2's sessions stop counting)",
                   f"in_recovery {roles}; pg-1 and pg-3 streaming from pg-2: {bool(streaming)}; load "
                   f"{report['observation']['load']:g}, desired {report['decision']['desired']}")


def test_new_replica_catches_up(rig, record):
    primary = rig.instances["pg-2"]  # after the switchover
    writer = Writer(primary)
    try:
        primary.sql("CREATE TABLE IF NOT EXISTS bulk AS SELECT g, repeat('x', 200) AS pad "
                    "FROM generate_series(1, 50000) g", dbname="app")
        t0 = time.monotonic()
        pg4 = rig.new_instance(4).clone_from(primary)
        rig.start_exporter(pg4)
        seen = rig.wait_scraped(IN_RECOVERY, lambda s: s.get("pg-4") == 1, what="pg-4 scraped as a replica")
        visible = time.monotonic() - t0
        lags = []
        for _ in range(5):
            time.sleep(1)
            lags.append(rig.series(f'cnpg_pg_replication_lag{{namespace="{NAMESPACE}",pod="pg-4"}}').get("pg-4"))
    finally:
        writer.stop()
    lsn = primary.sql("SELECT pg_current_wal_lsn()")[0]
    wait_until(lambda: pg4.sql("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0], 30, 0.2,
               f"pg-4 replayed {lsn}")
    with Sessions(pg4, 6):
        rig.wait_desired(3)  # 1 + ceil(6 / 5): pg-4's sessions count like any replica's
        n = instances(rig)
    assert n == 4 and seen == {"pg-1": 1, "pg-2": 0, "pg-3": 1, "pg-4": 1}
    record("new replica pg-4 cloned from pg-2 while it writes (pg_basebackup -X stream), 6 sessions on it",
           "instances 4, pg-4 a replica, its sessions count",
           f"pg-4 scraped as in_recovery=1 {visible:.1f} s after the clone started; CNPG lag on pg-4 each "
           f"second while the primary writes {lags}; caught up; instances {n}, desired 3")
