"""The base data set every decision test reads, with the load each cluster really carries.

Expected values are written out by hand next to the series that produce them, so a test failure
points at one guardrail. Ratios are chosen away from integers so float rounding cannot flip a ceil.
"""
from cnpg_series import Backend, Cluster, Pod, replicas, stalled_since

LAG_HIGH = 600.0  # seconds, far above the thresholds the tests use

# tenant-a/pg: read load on replicas = 7 (pg-2) + 5 + 1 (pg-3) = 13 active client sessions;
# replica CPU = 300m + 400m = 700m. Everything else below must not count.
TENANT_A_PG = Cluster("tenant-a", "pg", [
    Pod(1, primary=True, cpu_millicores=2000, wal_bytes_per_s=8000,
        backends=[Backend(40), Backend(9, state="idle")]),  # primary load: never counts
    Pod(2, cpu_millicores=300, backends=[
        Backend(7),
        Backend(3, state="idle"),
        Backend(2, state="idle in transaction"),
    ]),
    Pod(3, cpu_millicores=400, backends=[
        Backend(5),
        Backend(1, usename="reporting", datname="analytics", application_name="metabase"),
    ]),
])
TENANT_A_PG_LOAD = 13
TENANT_A_PG_CPU = 700
TENANT_A_PG_INSTANCES = 3

# Same namespace, name with pg as prefix: pg-archive-N pods must never count for "pg".
TENANT_A_ARCHIVE = replicas("tenant-a", "pg-archive", 50, cpu_millicores=3000)
TENANT_A_ARCHIVE_LOAD = 100
# A namespace whose name starts with tenant-a, same cluster name: never counts for tenant-a.
TENANT_A_DEV_PG = replicas("tenant-a-dev", "pg", 80, cpu_millicores=5000)

# Same cluster name in another namespace, light load.
TENANT_B_PG = replicas("tenant-b", "pg", 2, n_replicas=1, cpu_millicores=90)
TENANT_B_PG_LOAD = 2
TENANT_B_PG_INSTANCES = 2
# Only CNPG's own sessions and idle clients on the replicas: load 0.
TENANT_B_QUIET = Cluster("tenant-b", "quiet", [
    Pod(1, primary=True, backends=[Backend(30)]),
    Pod(2, backends=[Backend(6, state="idle")]),
    Pod(3, backends=[Backend(4, state="idle")]),
])
# Instances exist but no backend rows at all. Not a live state while the default queries run (the
# exporter's own session is always a row); it is what a scrape gap, `disableDefaultQueries` or a
# failing backends query looks like: the load is unknown (the scaler answers UNAVAILABLE).
TENANT_B_EMPTY = Cluster("tenant-b", "empty", [
    Pod(1, primary=True, internal=False), Pod(2, internal=False),
])

# Replicas' replay stalled LAG_HIGH s ago, after the primary's last commit; the primary has written
# nothing since (its WAL counter is flat for the whole brake window): the known false alarm. On real
# PostgreSQL this state exists only > 5 minutes after the last write (tests/livepg, finding L1).
TENANT_C_IDLE_LAG = replicas("tenant-c", "idle-lag", 6, lag=stalled_since(LAG_HIGH))
TENANT_C_IDLE_LAG.pods[0].wal_bytes_per_s = 50_000
TENANT_C_IDLE_LAG.pods[0].writes_stopped_ago = LAG_HIGH + 15
# Same stall, but the primary keeps writing WAL: a real lag, the brake must hold.
TENANT_C_BUSY_LAG = replicas("tenant-c", "busy-lag", 6, lag=stalled_since(LAG_HIGH))
TENANT_C_BUSY_LAG.pods[0].wal_bytes_per_s = 50_000
LAG_CLUSTER_LOAD = 12
LAG_CLUSTER_INSTANCES = 3

BASE = [
    TENANT_A_PG, TENANT_A_ARCHIVE, TENANT_A_DEV_PG,
    TENANT_B_PG, TENANT_B_QUIET, TENANT_B_EMPTY,
    TENANT_C_IDLE_LAG, TENANT_C_BUSY_LAG,
]
