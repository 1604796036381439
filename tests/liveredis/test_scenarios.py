"""The scenarios of docs/redis.md, in order, once per engine (conftest.py): what the exporter reads
of the engine, then the idle master (the write gate's 5-minute rate window must not have seen the
writer yet), read load, writes without lag, a link down and a full sync under writes. The scaler
runs with --topology metrics: its current count is the number of instance series, 3. Target 5
clients per replica, maxReplicas 6."""
import json
import time

from resp import Writer
from rig import NAMESPACE, Clients, Instance
from testkit import wait_until

PODS = f'namespace="{NAMESPACE}",pod=~"rfr-cache-[0-9]+"'
# The write gate's threshold (scaler-core/src/promql_redis.rs, BACKGROUND_REPL_BYTES_PER_SECOND).
BACKGROUND = 1024
LAG_THRESHOLD = "1048576"


def repl_rate(rig) -> float:
    return rig.series(f'rate(redis_master_repl_offset{{namespace="{NAMESPACE}",pod="rfr-cache-0"}}[5m])')[
        "rfr-cache-0"]


def link_up(rig, pod: str) -> float | None:
    return rig.series(f'redis_master_link_up{{namespace="{NAMESPACE}",pod="{pod}"}}').get(pod)


def cut_link(replica) -> None:
    """The replica's link to the master goes down and stays down: it re-authenticates with a
    password the master does not have (the sentinels leave it alone: it still names the master)."""
    replica.call("CONFIG", "SET", "masterauth", "not-the-password")
    replica.call("CLIENT", "KILL", "TYPE", "master")


def mend_link(replica) -> None:
    replica.call("CONFIG", "SET", "masterauth", "")


def test_the_exporter_reads_the_engine(rig, record):
    """The series the query selects on exist for the engine, with the same role names; what the
    exporter's info labels say of the engine is recorded (docs/redis.md lists the differences)."""
    info = {r["metric"]["pod"]: r["metric"] for r in rig.vm.query(f"redis_instance_info{{{PODS}}}")}
    roles = {pod: m["role"] for pod, m in sorted(info.items())}
    assert roles == {"rfr-cache-0": "master", "rfr-cache-1": "slave", "rfr-cache-2": "slave"}, info
    server = rig.instances["rfr-cache-0"].info("server")
    assert (server.get("server_name") == "valkey") == (rig.engine.name == "Valkey"), server
    # Less the scrape's labels and what changes with every process (pid, run id, port, build).
    labels = {k: v for k, v in info["rfr-cache-0"].items()
              if k not in ("__name__", "namespace", "pod", "container", "endpoint", "job", "instance", "os",
                           "process_id", "run_id", "tcp_port", "redis_build_id")}
    for series in ("redis_master_link_up", "redis_master_sync_in_progress", "redis_master_repl_offset",
                   "redis_connected_slave_offset_bytes", "redis_connected_clients_details"):
        # The info series came from a scrape; a series new to VictoriaMetrics can show a moment
        # after others of the same scrape.
        wait_until(lambda: rig.series(f"{series}{{{PODS}}}"), timeout=30, interval=0.5,
                   what=f"{series} for {rig.engine.name}")
    record("what the exporter reads", "roles master/slave; every series the query reads",
           f"redis_instance_info of the master {json.dumps(labels, sort_keys=True)}; INFO server: "
           f"server_name {server.get('server_name', '(none)')}, redis_version {server.get('redis_version')}, "
           f"valkey_version {server.get('valkey_version', '(none)')}; replicas' role \"slave\"")


def test_idle_master(rig, record):
    r1, r2 = rig.instances["rfr-cache-1"], rig.instances["rfr-cache-2"]
    clients = rig.series(f"redis_connected_clients{{{PODS}}}")
    rig.wait_desired(2)
    rate = repl_rate(rig)
    # Sentinel hellos and pings move the offset of a master nobody writes to.
    assert 0 < rate < BACKGROUND, rate
    cut_link(r2)
    rig.wait_scraped(f'redis_master_link_up{{namespace="{NAMESPACE}",pod="rfr-cache-2"}}',
                     lambda s: s.get("rfr-cache-2") == 0, what="rfr-cache-2 link down")
    # A down link while the master is idle: the brake would hold 3; the floor 2 is asked.
    held = rig.hold(2, 4, maxReplicationLagBytes=LAG_THRESHOLD)
    mend_link(r2)
    rig.wait_scraped(f'redis_master_link_up{{namespace="{NAMESPACE}",pod="rfr-cache-2"}}',
                     lambda s: s.get("rfr-cache-2") == 1, what="rfr-cache-2 link up")
    record("idle master (no client writes), 3 sentinels; then replica rfr-cache-2's link down",
           "desired 2 (floor); link down with an idle master does not brake",
           f"redis_connected_clients {dict(sorted(clients.items()))} with no client connected "
           f"(sentinels, exporter, master link), desired 2; master offset rate {rate:.0f} B/s "
           f"(< {BACKGROUND}: idle); link down: desired {held[-1]} over {len(held)} polls")
    assert r1.info("replication")["master_link_status"] == "up"


def test_read_load_up_and_down(rig, record):
    r1, r2 = rig.instances["rfr-cache-1"], rig.instances["rfr-cache-2"]
    t0 = time.monotonic()
    with Clients(r1, 11), Clients(r2, 11):
        rig.wait_desired(6)  # 1 + ceil(22 / 5)
        up = time.monotonic() - t0
        with Clients(r1, 0):
            pass
    t1 = time.monotonic()
    rig.wait_desired(2)
    down = time.monotonic() - t1
    with Clients(r1, 7):
        rig.wait_desired(3)  # 1 + ceil(7 / 5)
    rig.wait_desired(2)
    # The master's clients are not read load.
    with Clients(rig.instances["rfr-cache-0"], 30):
        rig.wait_scraped(f'redis_connected_clients{{namespace="{NAMESPACE}",pod="rfr-cache-0"}}',
                         lambda s: s.get("rfr-cache-0", 0) >= 30, what="30 clients on the master scraped")
        rig.hold(2, 3)
    record("read load: 11 + 11 client connections on the replicas, closed; 7; 30 on the master",
           "desired 6, then 2; 3; master clients ignored (2)",
           f"desired 6 after {up:.1f} s, 2 after {down:.1f} s; 3 with 7; 2 with 30 on the master")


def test_writes_without_lag(rig, record):
    r1 = rig.instances["rfr-cache-1"]
    master = rig.instances["rfr-cache-0"]
    with Writer(master.port, 2000) as w, Clients(r1, 12):
        wait_until(lambda: repl_rate(rig) > BACKGROUND, 30, 0.5, "master writing")
        rig.wait_desired(4, maxReplicationLagBytes=LAG_THRESHOLD)  # 1 + ceil(12 / 5)
        lags = []
        for _ in range(6):
            info = master.info("replication")
            offset = int(info["master_repl_offset"])
            for k in ("slave0", "slave1"):
                fields = dict(kv.split("=") for kv in info[k].split(","))
                lags.append(offset - int(fields["offset"]))
            time.sleep(0.5)
        rate = repl_rate(rig)
        held = rig.hold(4, 4, maxReplicationLagBytes=LAG_THRESHOLD)
    rig.wait_desired(2, maxReplicationLagBytes=LAG_THRESHOLD)
    assert w.written > 1000
    # A byte lag compared with a seconds threshold (say 10) would have frozen this count.
    assert max(lags) > 10, lags
    record("writes without lag: 2000 SET/s on the master, 12 clients on rfr-cache-1, "
           f"maxReplicationLagBytes {LAG_THRESHOLD}",
           "desired 4 while writing, 2 after; brake clear",
           f"master offset rate {rate:.0f} B/s; replica offset lag up to {max(lags)} B "
           f"(> 10: a seconds threshold read as bytes would freeze); desired 4 over {len(held)} polls, "
           "then 2")


def test_link_down_under_writes(rig, record):
    r1, r2 = rig.instances["rfr-cache-1"], rig.instances["rfr-cache-2"]
    master = rig.instances["rfr-cache-0"]
    with Writer(master.port, 2000), Clients(r1, 22):
        rig.wait_desired(6)
        cut_link(r2)
        rig.wait_scraped(f'redis_master_link_up{{namespace="{NAMESPACE}",pod="rfr-cache-2"}}',
                         lambda s: s.get("rfr-cache-2") == 0, what="rfr-cache-2 link down")
        rig.wait_desired(3)
        held = rig.hold(3, 4)
        t0 = time.monotonic()
        mend_link(r2)
        rig.wait_desired(6)
        released = time.monotonic() - t0
    record("link down under writes: rfr-cache-2 re-authenticates with a wrong password; "
           "2000 SET/s, 22 clients on rfr-cache-1",
           "desired held at the current 3 (load asks 6), released when the link is back",
           f"desired 3 over {len(held)} polls; 6 again {released:.1f} s after the link was mended")


def test_full_sync_under_writes(rig, record):
    r1, r2 = rig.instances["rfr-cache-1"], rig.instances["rfr-cache-2"]
    master = rig.instances["rfr-cache-0"]
    # A disk-based full sync is in progress on the replica while the master's BGSAVE runs; the
    # server's rdb-key-save-delay (microseconds per key) makes it last (10000 keys: about 25 s).
    # At 1 ms a key (10 s) a busy machine once took that long to see the sync scraped and the
    # brake engaged: the sync was over before the first poll.
    master.call("CONFIG", "SET", "repl-diskless-sync", "no")
    master.call("CONFIG", "SET", "rdb-key-save-delay", "2500")
    with Writer(master.port, 2000), Clients(r1, 22):
        wait_until(lambda: int(master.info("keyspace").get("db0", "keys=0").split(",")[0][5:]) >= 10000, 30, 0.2,
                   "10000 keys")
        rig.wait_desired(6)
        # The pod restarts empty (no persistence): it needs a full sync.
        r2.stop()
        (r2.dir / "dump.rdb").unlink(missing_ok=True)
        r2.start()
        syncing = rig.wait_scraped(f'redis_master_sync_in_progress{{namespace="{NAMESPACE}",pod="rfr-cache-2"}}',
                                   lambda s: s.get("rfr-cache-2") == 1, what="rfr-cache-2 in a full sync")
        rig.wait_desired(3)
        seen, dips = [3], 0
        assert "master_sync_in_progress" in r2.info("replication"), "the sync is read from this field"
        while r2.info("replication").get("master_sync_in_progress") == "1":
            desired = rig.desired()
            # One entry per metadata the ScaledObject was asked with: the earlier scenarios' keys
            # are still held and refreshed, and each decides this RedisFailover, in its sync.
            decisions = rig.decisions()
            if r2.info("replication").get("master_sync_in_progress") != "1":
                break  # the sync ended between the readings
            seen.append(desired)
            context = json.dumps({"seen": seen, "replication": r2.info("replication"), "decisions": decisions})
            # The brake holds the current count. Without a topology that is the number of
            # redis_instance_info series, and the restarted pod's has new run_id and process_id
            # labels: a new series, which VictoriaMetrics can make searchable a few seconds after
            # the old one went stale (docs/redis.md). Then the count read is 2, and so is the hold.
            assert decisions and all(d["reason"] == "brake" and d["desired"] == d["current"] for d in decisions), context
            assert desired in (2, 3), context
            dips += desired == 2
            time.sleep(0.5)
        # How long the count read is 2 is VictoriaMetrics' time to make the new series searchable:
        # 0 to 12 of about 20 readings measured (docs/redis.md). Both counts are held as braked;
        # the sync must have been seen held at 3 at least once, before or after that gap.
        assert 3 in seen[1:], f"the hold was never 3 during the sync: {seen}"
        rig.wait_desired(6, timeout=30)
    master.call("CONFIG", "SET", "rdb-key-save-delay", "0")
    record("full sync under writes: rfr-cache-2 restarts empty, disk-based sync of 10000 keys "
           "(rdb-key-save-delay 2.5 ms/key); 2000 SET/s, 22 clients on rfr-cache-1",
           "desired held at the current count while master_sync_in_progress is 1 (3, or 2 while the "
           "restarted pod's new instance series is not yet searchable), then 6",
           f"redis_master_sync_in_progress {syncing}; desired 3 over {len(seen)} polls during the "
           f"sync ({dips} of them 2: the brake holding a count of 2 while the restarted pod's new "
           "instance series was not yet searchable), then 6")


def test_a_new_replica_the_scrape_has_not_found_holds_the_brake_by_the_masters_word(rig, record):
    """A new replica's own series appear only once the scrape discovers its pod (vmagent: up to
    30 s), while its full sync starts at once. The master lists it at once, in a state other than
    `online`: that alone holds the brake (the count stays 3, the instance series'), and the
    brake lets go once the master lists it online."""
    master, r1 = rig.instances["rfr-cache-0"], rig.instances["rfr-cache-1"]
    master.call("CONFIG", "SET", "repl-diskless-sync", "no")
    master.call("CONFIG", "SET", "rdb-key-save-delay", "1000")
    new = Instance(rig.engine, rig.base, 3)  # no exporter: not discovered
    try:
        with Writer(master.port, 2000), Clients(r1, 22):
            wait_until(lambda: int(master.info("keyspace").get("db0", "keys=0").split(",")[0][5:]) >= 10000, 30,
                       0.2, "10000 keys")
            rig.wait_desired(6)
            new.start(master)
            listing = (f'redis_connected_slave_offset_bytes{{namespace="{NAMESPACE}",pod="rfr-cache-0",'
                       f'slave_port="{new.port}",slave_state!="online"}}')
            rig.wait_scraped(listing, lambda s: "rfr-cache-0" in s, what="the master listing the new replica, not online")
            listed = rig.vm.query(listing)[0]["metric"]["slave_state"]
            assert not rig.series(f'redis_instance_info{{namespace="{NAMESPACE}",pod="{new.name}"}}'), \
                "the new replica must stay unscraped"
            rig.wait_desired(3)
            seen = [3]
            while new.info("replication").get("master_link_status") != "up":
                seen.append(rig.desired())
                assert seen[-1] == 3, seen
                time.sleep(0.5)
            t0 = time.monotonic()
            rig.wait_desired(6, timeout=30)
            released = time.monotonic() - t0
    finally:
        master.call("CONFIG", "SET", "rdb-key-save-delay", "0")
        new.stop()
    record("a new replica, unscraped (no exporter), full sync of 10000 keys under 2000 SET/s; 22 clients "
           "on rfr-cache-1",
           "desired held at 3 while only the master lists it (not online), then 6",
           f"master listed it as {listed}; desired 3 over {len(seen)} polls during the sync, then 6 "
           f"{released:.1f} s after its link was up")
