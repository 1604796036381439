"""Read load from real sessions: only active client sessions on replicas count."""
from rig import NAMESPACE
from sessions import Sessions

PG = f'namespace="{NAMESPACE}",pod=~"pg-[0-9]+"'
APP_ACTIVE = f'cnpg_backends_total{{{PG},usename="app",state="active"}}'


def test_active_replica_sessions_drive_the_count_and_nothing_else(rig, record):
    pg1, pg2, pg3 = (rig.instances[f"pg-{n}"] for n in (1, 2, 3))
    with Sessions(pg2, 12), Sessions(pg3, 8, application_name="reports"), \
            Sessions(pg2, 5, "idle"), Sessions(pg3, 3, "idle in transaction"), \
            Sessions(pg1, 30), Sessions(pg2, 4, user="postgres", application_name="psql"):
        # 12 + 8 active client sessions on replicas, target 5: 1 primary + 4 replicas.
        rig.wait_desired(5)
        active = rig.wait_scraped(APP_ACTIVE, lambda s: s == {"pg-1": 30, "pg-2": 12, "pg-3": 8})
        exporter = rig.raw_series("cnpg_backends_total")
        own = sorted((s["pod"], s.get("datname", ""), s["state"], s["__value__"])
                     for s in exporter if s["usename"] == "cnpg_metrics_exporter" and s["pod"].startswith("pg-"))
        # The exporter's own sessions on every instance: one active (running the backends query in
        # the application database), one idle (pg_stat_wal, in database postgres).
        assert own == [(p, db, st, "1") for p in ("pg-1", "pg-2", "pg-3")
                       for db, st in (("app", "active"), ("postgres", "idle"))]
        idle = rig.series(f'cnpg_backends_total{{{PG},usename="app",state=~"idle.*"}}')
        record("active sessions: 12 on pg-2, 8 on pg-3; plus 5 idle, 3 idle-in-tx, 4 superuser on "
               "replicas, 30 active on the primary; target 5",
               "desired 5 (1 + ceil(20/5))",
               f"desired 5; app active series {active}; idle series {idle}; exporter's own "
               f"sessions active+idle on every pod")
    # Every client session gone: CNPG emits no row for state=active, user app (zero rows omitted).
    rig.wait_scraped(APP_ACTIVE, lambda s: s == {})
    rig.wait_desired(2)
    record("all client sessions closed", "no app series, desired 2 (floor)", "no app series, desired 2")


def test_explain_prints_the_getmetrics_decision(rig, record):
    pg2, pg3 = rig.instances["pg-2"], rig.instances["pg-3"]
    with Sessions(pg2, 4), Sessions(pg3, 3):
        rig.wait_desired(3)  # 1 + ceil(7 / 5)
        report = rig.explain()
        (value,) = rig.keda.metrics(rig.ref(target="5"), "cnpg-pg-readconnections").metricValues
        assert report["decision"]["desired"] == 3
        assert report["observation"]["load"] == 7
        assert report["metric_value"] == value.metricValueFloat == 15
        record("`scaler explain` vs GetMetrics, 7 active replica sessions",
               "same decision", f"explain desired {report['decision']['desired']} "
               f"({report['decision']['reason']}), value {report['metric_value']}; GetMetrics "
               f"{value.metricValueFloat}")
