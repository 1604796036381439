"""CloudNativePG's own Pooler on the real node, autoscaled by client wait within the database's
connection budget (docs/pooler.md): the operator runs PgBouncer pods of an image built here from
Debian's pgbouncer with its own instance manager as their entrypoint and exporter; the Pooler, its
ScaleAdapter and its ScaledObject are what `chartgen app` makes of a chart with a Pooler
(tests/chartgen/fixtures/postgres-pooler), rendered with helm; KEDA and the HPA write the adapter's
/scale, the package's ScaleAdapter controller writes the Pooler's `spec.instances`, the operator
scales PgBouncer's Deployment. Real psql clients through the Pooler's Service make the wait."""

from __future__ import annotations

import re
import shutil
import subprocess
import time

import pytest
import requests

from helm import Helm
from scaledobject import FAST_BEHAVIOR
from testkit import REPO, TOOLS, cargo_bin, wait_until
from noderig import images
from noderig.cnpg import CLUSTER, CLUSTER_NAMESPACE as DB_NS, POOLER, sql
from noderig.loop import CNPG, Sessions
from noderig.package import adapter_scale, decisions, latest_decision, pod_ready

FIXTURE = REPO / "tests/chartgen/fixtures/postgres-pooler"
POOL = 3          # default_pool_size: server connections one PgBouncer opens for the app's pool
TARGET = 5        # clients one PgBouncer should hold
CLIENTS = 20      # ceil(20 / 5) = 4 instances; 10 clients per PgBouncer wait for 3 servers
FLOOR, MAX = 2, 4
# A pool the database cannot give every instance: each PgBouncer holds two pools (the app's and
# the one CNPG's auth_query logs in with), so 4 × 2 × 5 is above max_connections 40 less the 3
# reserved for superusers (test_2_cnpg.py's Cluster), whatever else is connected.
BIG_POOL = 5
PODS = f"cnpg.io/poolerName={POOLER}"


def render(node, chart, pool_size: int) -> dict[str, dict]:
    """The chart's Pooler, ScaleAdapter and ScaledObject for release `pg` (its Cluster is the
    suite's own, made by test_2_cnpg.py), with the pool size and the HPA behaviour of a test."""
    values = {"pooler": {"defaultPoolSize": pool_size, "reservePoolSize": 0},
              "autoscaling": {"pooler": {"enabled": True, "target": TARGET, "minReplicas": FLOOR,
                                         "maxReplicas": MAX, "behavior": FAST_BEHAVIOR}}}
    docs = Helm(node.dir / "helm", kubeconfig=node.cp.kubeconfig).render(
        chart, release=CLUSTER, namespace=DB_NS, values=values)
    found = {d["kind"]: d for d in docs if d["kind"] in ("Pooler", "ScaleAdapter", "ScaledObject")}
    assert sorted(found) == ["Pooler", "ScaleAdapter", "ScaledObject"], [d["kind"] for d in docs]
    for d in found.values():
        assert d["metadata"]["name"] == POOLER, d["metadata"]
        d["metadata"]["namespace"] = DB_NS
    return found


@pytest.fixture(scope="module")
def pooler(node, cnpg, package, keda_running, tmp_path_factory):
    kube, t = node.kube, time.monotonic()
    chart = tmp_path_factory.mktemp("pooler") / FIXTURE.name
    shutil.copytree(FIXTURE, chart)
    made = subprocess.run([cargo_bin("chartgen"), "app", "--chart", chart], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    # As CNPG's own: PgBouncer with CNPG's manager as the entrypoint (copied in by the operator's
    # init container), run as uid 998.
    image = node.node.add_image("pgbouncer", images.Image(
        "cozy.local/pgbouncer", rootfs_tar=TOOLS / "node/rootfs/pgbouncer.tar", user="998"))
    objs = render(node, chart, POOL)
    # The operator's default PgBouncer image would be pulled: the one built here instead.
    objs["Pooler"]["spec"]["template"] = {"spec": {"containers": [
        {"name": "pgbouncer", "image": image, "imagePullPolicy": "Never"}]}}
    kube.apply(objs["Pooler"])
    wait_serving(node, FLOOR, 240, f"the Pooler's {FLOOR} PgBouncer pods ready")
    node.timings["Pooler: 2 PgBouncer pods ready"] = time.monotonic() - t
    kube.apply(objs["ScaleAdapter"])
    kube.apply(objs["ScaledObject"])
    state = {"chart": chart, "image": image, "objects": objs, "sessions": Sessions(kube, service_ip(kube))}
    yield state
    state["sessions"].close(kube)
    # Its PgBouncer pods go with it: nothing of the module outlives it on the shared node.
    kube.delete(CNPG, "Pooler", POOLER, DB_NS)


def service_ip(kube) -> str:
    return kube.get("v1", "Service", POOLER, DB_NS)["spec"]["clusterIP"]


def ready_pods(kube) -> list[dict]:
    return [p for p in kube.list("v1", "Pod", DB_NS, selector=PODS) if pod_ready(p)]


def serving(kube, instances: int) -> bool:
    spec = kube.get(CNPG, "Pooler", POOLER, DB_NS)["spec"]["instances"]
    return spec == instances and len(ready_pods(kube)) == instances


def wait_serving(node, instances: int, timeout: float, what: str) -> None:
    kube = node.kube
    try:
        wait_until(lambda: serving(kube, instances), timeout=timeout, interval=1, what=what)
    except TimeoutError as e:
        pods = {p["metadata"]["name"]: p["status"].get("phase") for p in kube.list("v1", "Pod", DB_NS, selector=PODS)}
        spec = kube.get(CNPG, "Pooler", POOLER, DB_NS)["spec"]["instances"]
        try:
            d = decision(kube)
        except Exception as err:  # noqa: BLE001 - no decision yet is part of the report
            d = repr(err)
        raise TimeoutError(f"{e}; spec.instances {spec}; pods {pods}; decision {d}") from None


def decision(kube) -> dict:
    return latest_decision(kube, DB_NS, POOLER)


def pooler_series(metrics, name: str) -> dict[str, float]:
    return {r["metric"]["pod"]: float(r["value"][1]) for r in metrics.query(
        f'sum by (pod) ({name}{{namespace="{DB_NS}",database!="pgbouncer"}})')}


def test_cnpg_runs_pgbouncer_pods_of_the_image_built_here_and_the_adapter_selects_exactly_them(node, pooler, metrics):
    kube = node.kube
    pods = ready_pods(kube)
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {pooler["image"]}
    assert {p["spec"]["securityContext"]["runAsUser"] for p in pods} == {998}
    # The adapter's /scale, which the HPA reads: CNPG's pods of this Pooler, by the label the adapter
    # knows for the kind (no selector in the adapter).
    scale = adapter_scale(kube, DB_NS, POOLER)
    assert scale == {"replicas": FLOOR, "selector": PODS}, scale
    selected = {p["metadata"]["name"] for p in kube.list("v1", "Pod", DB_NS, selector=scale["selector"])}
    assert selected == {p["metadata"]["name"] for p in pods}
    # CNPG's pooler exporter, scraped with the PodMonitor's job: every pod's last collection
    # reached PgBouncer. CNPG 1.30 sets a cnpg_pgbouncer_up gauge but never exports it, which is
    # why the scaler counts a Pooler's pods by this series (docs/pooler.md).
    def collected():
        found = {r["metric"]["pod"]: r["value"][1] for r in metrics.query(
            f'cnpg_pgbouncer_last_collection_error{{namespace="{DB_NS}"}}')}
        return len(found) == FLOOR and found
    try:
        collected = wait_until(collected, timeout=60, interval=2, what="the pooler exporter of both PgBouncer pods")
    except TimeoutError as e:
        targets = requests.get(f"{metrics.url}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
        mine = [(t["labels"], t["health"], t.get("lastError")) for t in targets if POOLER in t["scrapePool"]]
        raise TimeoutError(f"{e}; the Pooler's scrape targets: {mine}") from None
    assert set(collected) == selected and set(collected.values()) == {"0"}, collected
    assert not metrics.query(f'cnpg_pgbouncer_up{{namespace="{DB_NS}"}}'), \
        "CNPG exports cnpg_pgbouncer_up now: docs/pooler.md's finding is out of date"
    entry = wait_until(lambda: decision(kube).get("lastSuccess") and decision(kube), timeout=90, interval=2,
                       what="a decision for the Pooler in the scaler's /decisions")
    assert (entry["engine"], entry["desired"]) == ("pgbouncer", FLOOR), entry


def test_clients_waiting_for_servers_scale_the_pooler_out(node, pooler, metrics):
    """20 clients through the Pooler's Service, 10 on each PgBouncer with 3 servers each: the
    clients wait, the load asks for 4, and the operator runs 4 PgBouncer pods."""
    kube, t = node.kube, time.monotonic()
    pooler["sessions"].open(CLIENTS)
    waiting = wait_until(lambda: sum(pooler_series(metrics, "cnpg_pgbouncer_pools_cl_waiting").values()),
                         timeout=60, interval=1, what="clients waiting in SHOW POOLS")
    assert waiting > 0
    wait_serving(node, MAX, 240, f"{MAX} PgBouncer pods ready")
    node.timings["Pooler: clients waiting -> 4 pods ready"] = time.monotonic() - t
    d = decision(kube)
    assert d["desired"] == MAX and d["reason"] in ("load", "client-wait", "max"), d
    # The clients PgBouncer holds, as the decision read them: every client counted.
    assert f"ClientConnections {CLIENTS}" in d["summary"], d


def test_clients_gone_the_pooler_returns_to_the_floor_one_instance_at_a_time(node, pooler):
    kube = node.kube
    pooler["sessions"].close(kube)
    t = time.monotonic()
    counts = []

    def back():
        counts.append(kube.get(CNPG, "Pooler", POOLER, DB_NS)["spec"]["instances"])
        return serving(kube, FLOOR)
    wait_until(back, timeout=240, interval=1, what=f"the Pooler back at {FLOOR} PgBouncer pods")
    node.timings["Pooler: clients gone -> 2 pods"] = time.monotonic() - t
    # Paced: one instance fewer per decision, so the count passed through 3.
    assert 3 in counts, counts
    assert min(counts) == FLOOR, counts


BUDGET = re.compile(r"max_connections (\d+) − reserved (\d+) − other clients (\d+) leaves room for (\d+) "
                    r"instances? of (\d+) server connections")


def test_a_pool_size_the_database_cannot_take_is_capped_at_what_fits(node, pooler, metrics):
    """The chart's pool size raised to 5 (the Pooler's parameter and the trigger's key, as one
    values change renders both): the same 20 clients ask for 4 PgBouncers, the database's
    max_connections fits fewer, and the Pooler runs what fits."""
    kube = node.kube
    objs = render(node, pooler["chart"], BIG_POOL)
    params = objs["Pooler"]["spec"]["pgbouncer"]["parameters"]
    assert params["default_pool_size"] == str(BIG_POOL)
    kube.merge_patch(CNPG, "Pooler", POOLER, {"spec": {"pgbouncer": {"parameters": params}}}, DB_NS)
    before = len(decisions(kube, DB_NS, POOLER))
    kube.apply(objs["ScaledObject"])
    # Clients only once KEDA asks with the new metadata: asked with the old one (a smaller pool
    # that fits 4) the HPA would go to 4 and then back to the budget's 3, and the PgBouncer the
    # operator removes takes its clients with it (seen in a CI run: 14 of 20 left).
    wait_until(lambda: len(decisions(kube, DB_NS, POOLER)) > before, timeout=90, interval=2,
               what="the scaler asked with the ScaledObject's new metadata")
    pooler["sessions"].open(CLIENTS)

    # The entry of the new metadata (the scaler keeps refreshing the old one until it ages out).
    def capped():
        return next((d for d in decisions(kube, DB_NS, POOLER) if d.get("reason") == "connection-budget"
                     and f"ClientConnections {CLIENTS}" in d["summary"]), None)
    try:
        d = wait_until(capped, timeout=120, interval=2, what="the connection budget capping the decision")
    except TimeoutError as e:
        raise TimeoutError(f"{e}; entries {decisions(kube, DB_NS, POOLER)}") from None
    [numbers] = BUDGET.findall(d["summary"]) or [None]
    assert numbers, d
    max_connections, reserved, other, fits, per_instance = map(int, numbers)
    # The decision's numbers are the database's: its settings as PostgreSQL reports them.
    [[setting, superuser]] = sql(kube, "rw", "select current_setting('max_connections'), "
                                             "current_setting('superuser_reserved_connections')")
    assert (max_connections, reserved) == (int(setting), int(superuser)), d
    # Two pools per PgBouncer: the app's and CNPG's auth pool (auth_user in auth_dbname), which
    # SHOW POOLS lists like any other and which may open as many servers.
    assert per_instance == 2 * BIG_POOL, d["summary"]
    assert fits == (max_connections - reserved - other) // per_instance < MAX, d["summary"]
    # The load alone asks for MAX; the budget's count is what the HPA is given.
    assert f"needs {MAX} instances" in d["summary"] and d["desired"] == max(fits, 1), d["summary"]
    node.timings["Pooler: the budget's decision"] = d["summary"]
    wait_serving(node, d["desired"], 120, f"the Pooler at the budget's {d['desired']}")
    # No assertion on the ConnectionBudgetEngaged Event here: the scaler rate-limits Events per
    # ScaledObject, and this one's earlier phases (scale-in holds) may have spent its budget (seen
    # in a CI-mode run: "event rate limited"); the e2e and scaler suites assert the Events.
