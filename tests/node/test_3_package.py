"""The package as an operator installs it, on the real node, closing the loop on the real Cluster:
`charts/cozy-autoscaling` installed with helm (noderig/package.py), the scaler, webhook, shard
controller and ScaleAdapter controller running as pods of the project's own image (`./run.sh image`,
imported into containerd) in a namespace that enforces restricted PodSecurity, their certificates
issued by cert-manager's controller and cainjector (built from its Go module, noderig/certmanager.py);
KEDA's operator and metrics apiserver as processes beside the node,
resolving the scaler's Service through CoreDNS and dialling it over mutual TLS; the HPA of
kube-controller-manager writing the real CloudNativePG Cluster's /scale; the scaler reading only
what vmagent scraped from the instances. Real read sessions through the `-ro` Service drive it."""

from __future__ import annotations

import math
import threading
import time

import pytest
import requests

from scaledobject import FAST_BEHAVIOR, cluster_and_scaledobject
from testkit import wait_until
from noderig.cnpg import CLUSTER as NAME, CLUSTER_NAMESPACE as DB_NS, sql
from noderig.loop import CNPG, ClusterWatch, Sessions, Writer, instance_ips, read_sessions_on_replicas
from noderig.package import NS, SCALER_ADDRESS, decisions, latest_decision, scaler_admin, scaler_cli
from noderig.package import scaler_events as events_of

HPA = "autoscaling/v2"
TARGET = 10  # active read sessions per replica (the example chart's value in scaledobject.py)
SESSIONS = 25  # on one replica: ceil(25 / 10) = 3 replicas, 4 instances
FLOOR, MAX = 2, 4
BRAKE_WINDOW = 30  # brakeWindowSeconds of the suite's ScaledObject (the least it takes)


def test_the_package_runs_as_pods_of_its_image_under_restricted_pod_security(node, package):
    kube = node.kube
    pods = kube.list("v1", "Pod", NS)
    components = sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods)
    assert components == ["scale-adapter", "scaler", "shard-controller", "webhook"], components
    for p in pods:
        assert p["status"]["phase"] == "Running", (p["metadata"]["name"], p["status"])
        [c] = p["spec"]["containers"]
        assert c["image"] == package["image"]
        assert p["spec"]["securityContext"]["runAsNonRoot"] is True
    # Admitted by the namespace's restricted PodSecurity, then served by the scaler from its image.
    assert kube.get("v1", "Namespace", NS)["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert requests.get(f"{scaler_admin(kube)}/readyz", timeout=5).ok
    # Issued by cert-manager itself: each Secret carries what only its issuing controller writes.
    assert f"{NS}/{NS}-webhook" in package["issued"] and f"{NS}/{NS}-scaler" in package["issued"], package["issued"]
    for ref in package["issued"]:
        ns, name = ref.split("/")
        cert = kube.get("cert-manager.io/v1", "Certificate", name, ns)
        secret = kube.get("v1", "Secret", cert["spec"]["secretName"], ns)
        assert secret["metadata"]["annotations"]["cert-manager.io/certificate-name"] == name, secret["metadata"]


@pytest.fixture(scope="module")
def loop(node, package, keda_running, redis_started_if_run):
    kube = node.kube
    t = time.monotonic()
    watch = ClusterWatch(kube, decide=lambda: decision(kube))
    threading.Thread(target=watch.run, daemon=True).start()
    # The ScaledObject the example app chart renders (its default scalerAddress is the package's
    # Service name), for the real Cluster the suite made.
    rig = type("HelmRig", (), {"dir": node.dir, "cp": node.cp})
    [so] = [d for d in cluster_and_scaledobject(rig, SCALER_ADDRESS,
                                                DB_NS, NAME, minReplicas=FLOOR, maxReplicas=MAX, target=TARGET,
                                                behavior=FAST_BEHAVIOR)
            if d["kind"] == "ScaledObject"]
    assert so["spec"]["scaleTargetRef"]["name"] == NAME
    # A 30 s brake window (the default is five minutes) lets the suite see the brake let go in
    # half a minute; the same query, window and all (docs/scaler.md).
    so["spec"]["triggers"][0]["metadata"]["brakeWindowSeconds"] = str(BRAKE_WINDOW)
    kube.apply(so)
    sessions = Sessions(kube)
    state = {"watch": watch, "sessions": sessions, "started": t}
    yield state
    if "paused" in state:
        sql(kube, state.pop("paused")[1], "select pg_wal_replay_resume()")
    if "writer" in state:
        state["writer"].stop()
    sessions.close(kube)
    watch.stop.set()


def hpa_active(kube) -> bool:
    hpa = kube.get(HPA, "HorizontalPodAutoscaler", f"keda-hpa-{NAME}", DB_NS) or {}
    return any(c["type"] == "ScalingActive" and c["status"] == "True"
               for c in hpa.get("status", {}).get("conditions", []))


def scraped(metrics) -> dict:
    """What the scaler reads: each instance's recovery flag and its scrape's `up`, by pod."""
    return {"in_recovery": {r["metric"]["pod"]: r["value"][1] for r in metrics.query(
                f'cnpg_pg_replication_in_recovery{{namespace="{DB_NS}"}}')},
            "up": {r["metric"]["pod"]: r["value"][1] for r in metrics.query(f'up{{job="{DB_NS}/{NAME}"}}')}}


def wait_ready(node, metrics, instances: int, timeout: float, what: str) -> None:
    try:
        wait_until(lambda: ready(node.kube, instances), timeout=timeout, interval=2, what=what)
    except TimeoutError as e:
        pods = {p["metadata"]["name"]: p["status"].get("phase") for p in node.kube.list("v1", "Pod", DB_NS)}
        raise TimeoutError(f"{e}; pods {pods}; scraped {scraped(metrics)}; decision {decision(node.kube)}") from None


def ready(kube, instances: int) -> bool:
    c = kube.get(CNPG, "Cluster", NAME, DB_NS)
    s = c.get("status", {})
    return (c["spec"]["instances"] == instances and s.get("readyInstances") == instances
            and s.get("phase") == "Cluster in healthy state")


def claims(kube) -> list[str]:
    return sorted(claim_uids(kube))


def claim_uids(kube) -> dict[str, str]:
    return {c["metadata"]["name"]: c["metadata"]["uid"] for c in kube.list("v1", "PersistentVolumeClaim", DB_NS)}


def entries(kube) -> list[dict]:
    return decisions(kube, DB_NS, NAME)


def decision(kube) -> dict:
    """The scaler's latest decision for the Cluster."""
    return latest_decision(kube, DB_NS, NAME)


def test_keda_reads_the_scaler_pod_by_its_service_name_over_mtls(node, loop):
    wait_until(lambda: hpa_active(node.kube), timeout=120, interval=1,
               what="the HPA reading the scaler's metric through KEDA")
    entry = wait_until(lambda: decision(node.kube).get("lastSuccess") and decision(node.kube), timeout=30,
                       interval=1, what="a decision for db/pg in the scaler pod's /decisions")
    assert entry["cluster"] == NAME and entry["desired"] >= FLOOR


def test_an_idle_cluster_goes_to_the_floor_and_the_operator_deletes_the_standby_and_its_volume(node, loop, metrics):
    kube = node.kube
    loop["removed"] = claim_uids(kube)[f"{NAME}-3"]
    t = time.monotonic()
    wait_ready(node, metrics, FLOOR, 300, f"Cluster at the floor {FLOOR}")
    node.timings["idle: 3 -> 2 ready"] = time.monotonic() - t
    assert decision(kube)["desired"] == FLOOR
    wait_until(lambda: claims(kube) == [f"{NAME}-1", f"{NAME}-2"], timeout=60, interval=1,
               what="pg-3's PVC deleted with its instance")
    assert min(s.instances for s in loop["watch"].since(loop["started"])) == FLOOR


def replica_in_recovery(kube) -> tuple[str, str]:
    """The one standby at the floor: its pod and address."""
    [pod] = read_sessions_on_replicas(kube, "app")
    return pod, instance_ips(kube)[pod]


def test_a_standby_whose_replay_stops_while_the_primary_writes_holds_the_count(node, loop, metrics):
    """A real replay lag on a serving standby: its WAL replay paused while the application writes
    on the primary. The brake engages, and the read load that asks for 4 instances then is held at
    the floor: no clone is started while a standby falls behind a writing primary. The replay stays
    paused for the tests that read the brake; test_the_brake_released… resumes it."""
    kube, watch = node.kube, loop["watch"]
    loop["writer"] = Writer(kube).start()
    pod, ip = replica_in_recovery(kube)
    sql(kube, ip, "select pg_wal_replay_pause()")
    loop["paused"] = (pod, ip)
    t = time.monotonic()
    wait_until(lambda: decision(kube).get("reason") == "brake", timeout=120, interval=2,
               what=f"the brake engaging on {pod}'s replay lag while the primary writes")
    node.timings["replay paused under writes -> brake"] = time.monotonic() - t
    loop["sessions"].open(SESSIONS)
    held = wait_until(lambda: decision(kube)["recommended"] == MAX and decision(kube), timeout=90, interval=1,
                      what=f"the read load asking for {MAX} instances")
    assert (held["desired"], held["reason"]) == (FLOOR, "brake"), held
    asked = time.monotonic()
    time.sleep(10)  # several HPA syncs: the count stays
    assert {s.instances for s in watch.since(asked)} == {FLOOR}
    assert decision(kube)["reason"] == "brake"


def test_status_explain_and_events_speak_for_the_real_cluster(node, loop, metrics):
    """While the brake still holds: status, /decisions and explain tell the same decision."""
    kube = node.kube
    served = decision(kube)
    assert served["reason"] == "brake", served
    report = scaler_cli(node, "status", "-n", DB_NS, "-o", "json", "--decisions-url",
                        f"{scaler_admin(kube)}/decisions")
    [row] = report["items"]
    assert row["name"] == NAME and row["desired"] == FLOOR, row
    explained = scaler_cli(node, "explain", "--prometheus-url", metrics.url, "--scaled-object", f"{DB_NS}/{NAME}",
                           "--topology", "kube", "--output", "json")
    assert (explained["decision"]["desired"], explained["decision"]["reason"]) == (FLOOR, "brake"), explained
    assert "LagBrakeEngaged" in scaler_events(kube)


def explain(node, metrics, *args) -> dict:
    return scaler_cli(node, "explain", "--prometheus-url", metrics.url, "--topology", "kube", "--output", "json",
                      *args)


def test_the_cpu_signal_is_the_real_cadvisor_series_of_the_serving_standbys(node, loop, metrics):
    """`signals: ReadCPUUtilization=1` (a target every standby's CPU passes, so the signal decides):
    its load is the postgres containers' CPU of the standbys that serve, as the kubelet's cAdvisor
    reports it, in millicores."""
    e = explain(node, metrics, "--scaled-object", f"{DB_NS}/{NAME}", "--signals", "ReadCPUUtilization=1")
    cpu = e["observation"]["extra_loads"][0]
    serving = (f'cnpg_pg_replication_in_recovery{{namespace="{DB_NS}"}} == 1 unless on(namespace,pod) '
               f'(min_over_time(cnpg_pg_replication_is_wal_receiver_up{{namespace="{DB_NS}"}}[5m]) == 0)')
    [r] = metrics.query(f'sum(max by (namespace,pod) (rate(container_cpu_usage_seconds_total{{namespace="{DB_NS}",'
                        f'container="postgres"}}[5m])) and on(namespace,pod) ({serving})) * 1000')
    seen = float(r["value"][1])
    assert cpu > 0 and abs(cpu - seen) <= max(0.3 * seen, 20), (cpu, seen)
    assert e["decision"]["signal"] == "ReadCPUUtilization" and e["decision"]["raw"] == 1 + math.ceil(cpu), e["decision"]
    assert e["warming_replicas"] == 0, e
    node.timings["standbys' CPU (millicores, cAdvisor)"] = int(cpu)


def test_the_brake_released_the_load_clones_two_standbys_under_writes_without_a_flap(node, loop, metrics):
    """The paused replay resumes. The brake reads the largest lag of its window (BRAKE_WINDOW): it
    lets go about that long after, whatever the peak was; then the read load clones two standbys
    under writes."""
    kube, watch = node.kube, loop["watch"]
    sql(kube, loop.pop("paused")[1], "select pg_wal_replay_resume()")
    t = time.monotonic()
    try:
        wait_until(lambda: kube.get(CNPG, "Cluster", NAME, DB_NS)["spec"]["instances"] == MAX,
                   timeout=BRAKE_WINDOW + 120 - (time.monotonic() - t), interval=1,
                   what=f"the HPA writing {MAX} instances once the standby caught up")
    except TimeoutError as e:
        raise TimeoutError(f"{e}; decision {decision(kube)}; scraped {scraped(metrics)}") from None
    decided = time.monotonic()
    node.timings["replay resumed -> HPA writes 4 (brake window)"] = decided - t
    assert decision(kube)["desired"] == MAX
    assert "LagBrakeReleased" in scaler_events(kube)
    wait_ready(node, metrics, MAX, 600, f"{MAX} ready instances")
    node.timings["HPA writes 4 -> 4 ready (2 clones, writes on)"] = time.monotonic() - decided
    # The operator reuses the freed serial: a new pg-3 on a new volume (the old one went with the
    # scale-down), cloned again with pg_basebackup, and pg-4.
    uids = claim_uids(kube)
    assert sorted(uids) == [f"{NAME}-1", f"{NAME}-2", f"{NAME}-3", f"{NAME}-4"]
    assert uids[f"{NAME}-3"] != loop["removed"]
    # The clones' catch-up under writes never lowered the count under the floor, and it settles at
    # 4. A step back is an open finding (docs/e2e.md, the scale-out step back): counted and printed
    # with the decision before it, and the count must come back to 4 ready instances.
    time.sleep(15)
    steps_back = watch.steps_back(decided)
    # A failed scrape of an instance is an error (docs/scaler.md, the query), never the floor.
    node.timings["answers unknown for a failed scrape (scale-out)"] = sum(
        "failed (up == 0)" in ((d.get("lastError") or {}).get("message") or "")
        for at, d in watch.decisions if at >= decided)
    node.timings["count steps back during the scale-out"] = len(steps_back)
    for i, step in enumerate(steps_back[:8]):
        node.timings[f"step back {i + 1}"] = step
    if steps_back:
        wait_ready(node, metrics, MAX, 600, f"{MAX} ready instances again after a step back")
    counts = [s.instances for s in watch.since(decided)]
    assert min(counts) >= FLOOR and counts[-1] == MAX and ready(kube, MAX), counts


def test_the_primary_deleted_while_autoscaling_keeps_the_floor_and_the_reading_follows(node, loop, metrics):
    """The primary's pod removed at once, as a crashed node would lose it, with reads on the
    standbys and the application writing: CNPG promotes a standby and brings the old primary back
    as one. The count never goes under the floor, and the scaler counts the sessions of the pods
    in recovery now, as each says over SQL: never the new primary's."""
    kube, watch = node.kube, loop["watch"]
    old = kube.get(CNPG, "Cluster", NAME, DB_NS)["status"]["currentPrimary"]
    t = time.monotonic()
    kube.request("DELETE", kube.path("v1", "Pod", DB_NS, old),
                 {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0})

    def promoted():
        s = kube.get(CNPG, "Cluster", NAME, DB_NS)["status"]
        return s.get("currentPrimary") not in ("", old) and s.get("currentPrimary") == s.get("targetPrimary") and s
    new = wait_until(promoted, timeout=180, interval=1, what=f"a standby promoted after {old} was deleted")
    node.timings["primary deleted -> standby promoted"] = time.monotonic() - t
    user = loop["sessions"].user

    def follows():
        on_replicas = read_sessions_on_replicas(kube, user)
        load = explain(node, metrics, "--scaled-object", f"{DB_NS}/{NAME}")["observation"]["load"]
        return new["currentPrimary"] not in on_replicas and load == sum(on_replicas.values()) and (load, on_replicas)
    load, on_replicas = wait_until(follows, timeout=120, interval=3,
                                   what=f"the scaler's load counting the standbys of {new['currentPrimary']}")
    node.timings["primary deleted -> reading follows"] = time.monotonic() - t
    wait_until(lambda: (lambda c: c["status"].get("readyInstances") == c["spec"]["instances"])(
        kube.get(CNPG, "Cluster", NAME, DB_NS)), timeout=300, interval=2, what=f"{old} back as a standby")
    node.timings["primary deleted -> all instances ready"] = time.monotonic() - t
    samples = watch.since(t)
    assert min(s.instances for s in samples) >= FLOOR, [s.instances for s in samples]
    # Ready is the operator's word; that the old primary replays now is its own, asked over SQL once
    # its pod serves (the Cluster's status can count it ready a moment before its address answers).
    wait_until(lambda: old in read_sessions_on_replicas(kube, user), timeout=60, interval=2,
               what=f"{old} in recovery")


def test_load_gone_the_cluster_returns_to_the_floor(node, loop, metrics):
    kube = node.kube
    loop.pop("writer").stop()
    loop["sessions"].close(kube)
    t = time.monotonic()
    wait_ready(node, metrics, FLOOR, 300, f"Cluster back at the floor {FLOOR}")
    node.timings["load gone: 4 -> 2 ready"] = time.monotonic() - t
    # The operator removed the highest-serial standbys with their volumes: what is left is the
    # instances that run (which ones depends on the failover's choice of primary).
    wait_until(lambda: claims(kube) == sorted(instance_ips(kube)) and len(claims(kube)) == FLOOR, timeout=60,
               interval=1, what="the removed standbys' PVCs deleted")


def scaler_events(kube) -> set[str]:
    return events_of(kube, DB_NS, NAME)


def test_dry_run_set_on_the_live_scaled_object_is_told_on_it_and_holds_the_count(node, loop):
    """An SRE turns dry-run on: KEDA passes the new metadata, the scaler holds the count and says
    so with an Event on the ScaledObject (the pod's own RBAC writes it)."""
    kube = node.kube
    so = kube.get("keda.sh/v1alpha1", "ScaledObject", NAME, DB_NS)
    triggers = so["spec"]["triggers"]
    triggers[0]["metadata"]["dryRun"] = "true"
    kube.merge_patch("keda.sh/v1alpha1", "ScaledObject", NAME, {"spec": {"triggers": triggers}}, DB_NS)
    wait_until(lambda: "DryRunEngaged" in scaler_events(kube), timeout=90, interval=2,
               what="the scaler's DryRunEngaged Event on the ScaledObject")
    # The entry of the new metadata; the earlier one stays in the cache until it ages out.
    assert "dry-run" in {e["reason"] for e in entries(kube)}
    assert kube.get(CNPG, "Cluster", NAME, DB_NS)["spec"]["instances"] == FLOOR


def test_the_operator_refused_nothing_and_reverted_nothing_during_the_loop(node, loop):
    samples = loop["watch"].since(loop["started"])
    assert len(samples) > 30
    assert min(s.instances for s in samples) >= FLOOR
    assert not [s for s in samples if s.phase == "Invalid cluster definition"]
    reasons = {e["reason"] for e in node.kube.list("v1", "Event", DB_NS)}
    assert not reasons & {"NoScaleDown"}, reasons
