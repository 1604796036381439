"""The test kit's synthetic series (tests/lib/cnpg_series.py) against the live ones: same label names per
metric, same CNPG-internal sessions on the same pods, one pg_stat_wal `stats_reset` per instance.
A change on either side that makes them drift apart fails here."""
import time

from cnpg_series import Backend, Cluster, Pod, render
from promtext import parse
from rig import NAMESPACE
from sessions import Sessions

PG = f'namespace="{NAMESPACE}",pod=~"pg-[0-9]+"'
METRICS = ("cnpg_pg_replication_in_recovery", "cnpg_pg_replication_lag", "cnpg_collector_wal_bytes",
           "cnpg_backends_total", "cnpg_pg_stat_replication_replay_diff_bytes")
# The instance manager's pool is in the synthetic set (from CNPG's source) but not live: no instance
# manager runs here.
NOT_LIVE = {("postgres", "cnpg-instance-manager")}


def synthetic(cluster: Cluster) -> list[tuple[str, dict, float]]:
    """One sample per synthetic series, at "now"."""
    lines = render([cluster], time.time(), back=0, ahead=0).splitlines()
    return parse("\n".join(line.rsplit(" ", 1)[0] for line in lines))  # drop the timestamps


def live(rig, metric: str) -> list[tuple[str, dict, float]]:
    return [(metric, {k: v for k, v in s.items() if k not in ("__name__", "__value__")}, float(s["__value__"]))
            for s in rig.raw_series(metric) if s["pod"].startswith("pg-")]


def sessions_of(samples) -> set:
    return {(s["pod"], s["usename"], s.get("datname", ""), s["application_name"], s["state"], v)
            for _, s, v in samples if (s["usename"], s["application_name"]) not in NOT_LIVE}


def test_synthetic_series_have_the_live_shape(rig, record):
    assert {n: i.cluster for n, i in rig.instances.items() if n.startswith("pg-")} == \
        {"pg-1": "pg", "pg-2": "pg", "pg-3": "pg"}, "runs before the topology tests change the cluster"
    model = Cluster(NAMESPACE, "pg", [Pod(1, primary=True),
                                      Pod(2, backends=[Backend(3), Backend(2, state="idle")]), Pod(3)])
    fake = synthetic(model)
    with Sessions(rig.instances["pg-2"], 3), Sessions(rig.instances["pg-2"], 2, "idle"):
        rig.wait_scraped(f'sum by (pod) (cnpg_backends_total{{{PG},usename="app"}})', lambda s: s == {"pg-2": 5},
                         what="app sessions scraped")
        real = {m: live(rig, m) for m in METRICS}
    differences = []
    for m in METRICS:
        real_keys = {frozenset(labels) for _, labels, _ in real[m]}
        fake_keys = {frozenset(labels) for n, labels, _ in fake if n == m}
        if real_keys != fake_keys:
            differences.append(f"{m} label names: live {sorted(map(sorted, real_keys))}, "
                               f"synthetic {sorted(map(sorted, fake_keys))}")
    real_sessions = sessions_of(real["cnpg_backends_total"])
    fake_sessions = sessions_of([s for s in fake if s[0] == "cnpg_backends_total"])
    if real_sessions != fake_sessions:
        differences.append(f"sessions only live {sorted(real_sessions - fake_sessions)}, "
                           f"only synthetic {sorted(fake_sessions - real_sessions)}")
    for name, series in (("live", real["cnpg_collector_wal_bytes"]),
                         ("synthetic", [s for s in fake if s[0] == "cnpg_collector_wal_bytes"])):
        resets = {labels["pod"]: labels["stats_reset"] for _, labels, _ in series}
        if len(set(resets.values())) != 3:
            differences.append(f"{name}: stats_reset is not one per instance: {resets}")
    assert not differences, "\n".join(differences)
    record("synthetic (tests/lib/cnpg_series.py) vs live series, 3 active + 2 idle app sessions on pg-2",
           "same label names, same CNPG sessions per pod, one stats_reset per instance",
           f"equal: {len(real_sessions)} session rows, label names of {len(METRICS)} metrics")
