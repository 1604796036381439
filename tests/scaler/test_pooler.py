"""`engine: pgbouncer` (docs/pooler.md) on the real scaler and VictoriaMetrics: a CNPG Pooler's
clients from CNPG's pooler exporter series, its Cluster's connection budget from the primary's
settings and backends. Series are this module's own, in namespace tenant-pooler, shaped as CNPG
1.30's exporters name them (pkg/management/pgbouncer/metricsserver; the default monitoring
queries' pg_settings and backends)."""
import json
import subprocess
import time

import grpc
import requests

from keda import error_of
from scaler_proc import scaler_binary

NS = "tenant-pooler"
# A Pooler's pods are its Deployment's: <pooler>-<replica set hash>-<pod hash>.
RW_PODS = ["pg-pooler-rw-7d9f8b6c5-x2x4z", "pg-pooler-rw-7d9f8b6c5-b7k9q", "pg-pooler-rw-7d9f8b6c5-q5wzr"]
RO_PODS = ["pg-pooler-ro-5b8c4d7f9-h6mxt", "pg-pooler-ro-5b8c4d7f9-n2v8d"]


def series(now: float) -> str:
    lines = []

    def add(metric, value, **labels):
        text = ",".join(f'{k}="{v}"' for k, v in {"namespace": NS, **labels}.items())
        for t in range(int(now) - 60, int(now) + 600, 15):
            lines.append(f"{metric}{{{text}}} {value} {t * 1000}")

    def pools(pod, database, user, active, waiting=0, maxwait=0, maxwait_us=0, servers=0):
        p = {"pod": pod, "database": database, "user": user}
        for name, value in [("cl_active", active), ("cl_waiting", waiting), ("maxwait", maxwait),
                            ("maxwait_us", maxwait_us), ("sv_active", servers), ("sv_idle", 0),
                            ("sv_used", 0), ("sv_tested", 0), ("sv_login", 0)]:
            add(f"cnpg_pgbouncer_pools_{name}", value, **p)

    for i, pod in enumerate(RW_PODS):
        add("cnpg_pgbouncer_last_collection_error", 0, pod=pod)
        # The exporter's own admin-console connection: never load, never a server connection.
        pools(pod, "pgbouncer", "pgbouncer", active=1)
        # 3 x (50 served + 10 waiting) = 180 clients, 3 x 10 server connections; one pool's
        # oldest client has waited 2 s + 500000 us.
        pools(pod, "app", "app", active=50, waiting=10, maxwait=2 if i == 0 else 0,
              maxwait_us=500000 if i == 0 else 0, servers=10)
    for i, pod in enumerate(RO_PODS):
        add("cnpg_pgbouncer_last_collection_error", 0, pod=pod)
        if i == 0:  # the other pod's SHOW POOLS series are missing
            pools(pod, "app", "app", active=5)
    # The Cluster: primary pg-1, replica pg-2.
    for pod, recovery in [("pg-1", 0), ("pg-2", 1)]:
        add("cnpg_pg_replication_in_recovery", recovery, pod=pod)
        add("cnpg_pg_settings_setting", 200, pod=pod, name="max_connections")
        add("cnpg_pg_settings_setting", 3, pod=pod, name="superuser_reserved_connections")
    backend = {"datname": "app", "application_name": "", "state": "active"}
    # On the primary: the rw pooler's 30 server connections, 40 other clients, two WAL senders
    # (not in max_connections); the replica's 50 sessions are not the primary's.
    add("cnpg_backends_total", 30, pod="pg-1", usename="app", **{**backend, "application_name": "pgbouncer"})
    add("cnpg_backends_total", 40, pod="pg-1", usename="batch", **backend)
    add("cnpg_backends_total", 2, pod="pg-1", usename="streaming_replica", **{**backend, "datname": ""})
    add("cnpg_backends_total", 50, pod="pg-2", usename="app", **backend)
    return "\n".join(lines) + "\n"


def pooler_md(pooler, target="30", **extra):
    md = {"scalerAddress": "cnpg-scaler.cozy-keda.svc:6000", "engine": "pgbouncer", "pooler": pooler,
          "cluster": "pg", "target": target, "maxReplicas": "10"}
    md.update(extra)
    return md


def decision(scaler, name):
    r = requests.get(f"{scaler.admin}/decisions", params={"namespace": NS}, timeout=5)
    assert r.status_code == 200, r.text
    (entry,) = [e for e in r.json()["entries"] if e["scaledObject"] == name]
    return entry


def test_a_pooler_scales_on_its_clients_and_the_budget_caps_it(vm, scaler, keda):
    vm.import_and_wait(series(time.time()), f'count(cnpg_pgbouncer_last_collection_error{{namespace="{NS}"}})',
                       expect=lambda n: n == len(RW_PODS) + len(RO_PODS))
    # 180 clients / 30 = 6; 200 − 3 reserved − 40 others = 157 leaves room for 7 pools of 20.
    ref = keda.ref(NS, "so-rw", pooler_md("pg-pooler-rw"))
    (spec,) = keda.spec(ref).metricSpecs
    assert spec.metricName == "pgbouncer-pg-pooler-rw-clientconnections"
    assert keda.desired(ref, 30) == 6
    e = decision(scaler, "so-rw")
    assert (e["current"], e["desired"], e["reason"]) == (3, 6, "load"), e
    # /decisions names the Pooler and says it is one.
    assert (e["cluster"], e["engine"]) == ("pg-pooler-rw", "pgbouncer"), e
    # 25 + 5 per instance: 157 / 30 fits 5, and the reason names the numbers.
    ref = keda.ref(NS, "so-rw-big", pooler_md("pg-pooler-rw", defaultPoolSize="25", reservePoolSize="5"))
    assert keda.desired(ref, 30) == 5
    e = decision(scaler, "so-rw-big")
    assert (e["desired"], e["reason"]) == (5, "connection-budget"), e
    for number in ["max_connections 200", "reserved 3", "other clients 40", "room for 5 instances of 30"]:
        assert number in e["summary"], e["summary"]
    # Few clients but one waited 2.5 s > 1 s: one more than the 3 there are.
    ref = keda.ref(NS, "so-rw-wait", pooler_md("pg-pooler-rw", target="1000"))
    assert keda.desired(ref, 1000) == 4
    e = decision(scaler, "so-rw-wait")
    assert e["reason"] == "client-wait" and "2.5s > maxClientWaitSeconds 1s" in e["summary"], e


def test_a_pod_without_pool_series_is_unavailable_never_zero(vm, keda):
    vm.import_and_wait(series(time.time()), f'count(cnpg_pgbouncer_last_collection_error{{namespace="{NS}"}})',
                       expect=lambda n: n == len(RW_PODS) + len(RO_PODS))
    ref = keda.ref(NS, "so-ro", pooler_md("pg-pooler-ro"))
    err = error_of(lambda: keda.metrics(ref, "pgbouncer-pg-pooler-ro-clientconnections"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert "1 of the 2 pods" in err.details() and "SHOW POOLS" in err.details(), err.details()
    # Pooler pg-pooler has no pods: pg-pooler-rw's are never its (the hashes have no '-').
    ref = keda.ref(NS, "so-prefix", pooler_md("pg-pooler"))
    err = error_of(lambda: keda.metrics(ref, "pgbouncer-pg-pooler-clientconnections"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE and "no pooler series" in err.details(), err.details()
    # A Cluster that is not scraped: the budget is unknown, an error too.
    ref = keda.ref(NS, "so-rw-ghost", {**pooler_md("pg-pooler-rw"), "cluster": "ghost"})
    err = error_of(lambda: keda.metrics(ref, "pgbouncer-pg-pooler-rw-clientconnections"))
    assert err.code() == grpc.StatusCode.UNAVAILABLE
    assert "connection budget" in err.details() and "ghost" in err.details(), err.details()


def explain(vm, *flags, output="json"):
    r = subprocess.run([scaler_binary(), "explain", "--prometheus-url", vm.url, "--namespace", NS,
                        "--topology", "metrics", "--output", output, *flags],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout) if output == "json" else r.stdout


def test_explain_speaks_pooler_from_flags(vm):
    """`scaler explain --engine pgbouncer --pooler NAME --cluster DB` (no ScaledObject): serve's
    decision for so-rw-big above, the budget's numbers and both queries."""
    vm.import_and_wait(series(time.time()), f'count(cnpg_pgbouncer_last_collection_error{{namespace="{NS}"}})',
                       expect=lambda n: n == len(RW_PODS) + len(RO_PODS))
    flags = ["--engine", "pgbouncer", "--pooler", "pg-pooler-rw", "--cluster", "pg", "--target", "30",
             "--max-replicas", "10", "--default-pool-size", "25", "--reserve-pool-size", "5"]
    e = explain(vm, *flags)
    assert (e["cluster"], e["decision"]["desired"], e["decision"]["reason"]) == ("pg-pooler-rw", 5,
                                                                                "connection-budget"), e
    assert e["observation"]["current"] == 3, e["observation"]
    assert "room for 5 instances of 30" in e["summary"], e["summary"]
    assert e["metric_name"] == "pgbouncer-pg-pooler-rw-clientconnections"
    assert "cnpg_pgbouncer_pools_cl_waiting" in e["query"] and "the connection budget" in e["query"], e["query"]
    text = explain(vm, *flags, output="text")
    assert text.startswith(f"CNPG Pooler {NS}/pg-pooler-rw (ClientConnections, target 30 per pooler instance)"), text
    assert "pods pg-pooler-rw-<hash>-<hash> reporting cnpg_pgbouncer_last_collection_error" in text, text
    assert "connection budget     max_connections 200" in text, text
    # Without the pool sizes the default pools (20 + 0) fit 7: the load's 6 stands.
    e = explain(vm, *flags[:10])
    assert (e["decision"]["desired"], e["decision"]["reason"]) == (6, "load"), e["decision"]
