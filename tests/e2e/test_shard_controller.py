"""The shard placement controller (`scaler shard-controller`) on a real kube-apiserver with real
helm-controller shards (processes started with the args `chartgen shards` renders).

Stand-in, named: no kubelet runs, so a shard's Deployment is an API object whose status this test
writes (readyReplicas 1 while its helm-controller process runs, 0 once it is stopped), and a
"package upgrade from 3 to 2 shards" is what that upgrade changes: the shard2 Deployment is
deleted, its controller stops, and the shard controller restarts with --shards 2.

Figures (time from a shard's removal or failure to every tenant reconciled by its new shard) are
printed as `FIGURE ...` lines (run with -s to see them)."""

import re
import signal
import subprocess
import time
from collections import Counter, defaultdict

import pytest
import requests
import yaml

import promtext
from chartsource import ChartServer
from rig import POLL, binary
from rig.flux import container_args, start_controller
from testkit import FLUX_AIO_FIXTURE, cargo_bin, free_port, wait_until

FLUX_NS = "cozy-fluxcd"
HR = "helm.toolkit.fluxcd.io/v2"
KEY = "sharding.fluxcd.io/key"
NS_LABEL = "internal.cozystack.io/flux-shard"
GRACE = 6  # seconds, --grace of the controller under test
SYNC = "1s"
MOVES_PER_SYNC = 5


def render_shards(count: int) -> dict[str, dict]:
    out = subprocess.run(
        [cargo_bin("chartgen"), "shards", "--flux-deployment", FLUX_AIO_FIXTURE, "--count", str(count)],
        capture_output=True, text=True, check=True).stdout
    return {d["metadata"]["name"]: d for d in yaml.safe_load_all(out) if d and d.get("kind") == "Deployment"}


def set_ready(rig, shard: int, ready: bool) -> None:
    n = 1 if ready else 0
    rig.kube.merge_patch("apps/v1", "Deployment", f"helm-controller-shard{shard}",
                         {"status": {"replicas": 1, "readyReplicas": n, "availableReplicas": n}},
                         namespace=FLUX_NS, sub="status")


# Tenant namespaces this module created, retired at teardown.
CREATED: list[str] = []


def tenant(rig, name: str, shard: str, *, server: ChartServer | None, releases: int = 1) -> list[str]:
    """A tenant namespace on `shard` with `releases` HelmReleases (suspended without a chart server)."""
    CREATED.append(name)
    rig.kube.ensure_namespace(name, {NS_LABEL: shard})
    if server:
        server.publish(rig.kube, name, "marker")
    names = [f"{name}-app{i}" for i in range(releases)]
    for hr in names:
        rig.kube.apply({"apiVersion": HR, "kind": "HelmRelease",
                        "metadata": {"name": hr, "namespace": name, "labels": {KEY: shard}},
                        "spec": {"interval": "1m", "suspend": server is None,
                                 "chartRef": {"kind": "OCIRepository", "name": "marker"}}})
    return names


def hr_ready(rig, ns: str, name: str) -> bool:
    hr = rig.kube.get(HR, "HelmRelease", name, ns) or {}
    return any(c["type"] == "Ready" and c["status"] == "True" for c in hr.get("status", {}).get("conditions", []))


def shard_of(rig, ns: str) -> tuple[str | None, set[str]]:
    """(namespace label, set of the tenant's HelmRelease keys)."""
    label = ((rig.kube.get("v1", "Namespace", ns) or {}).get("metadata", {}).get("labels") or {}).get(NS_LABEL)
    keys = {hr["metadata"]["labels"].get(KEY) for hr in rig.kube.list(HR, "HelmRelease", ns)}
    return label, keys


def helm_secrets(rig, ns: str, name: str) -> dict[str, str]:
    """Release storage: secret name -> uid. An uninstall deletes them, a reinstall recreates v1."""
    return {s["metadata"]["name"]: s["metadata"]["uid"]
            for s in rig.kube.list("v1", "Secret", ns, selector=f"owner=helm,name={name}")}


def reconciled_by(proc, ns: str, name: str, since: int) -> bool:
    """The shard's log (after byte offset `since`) shows it reconciling the release."""
    with open(proc.log, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    return f'"namespace":"{ns}"' in text and f'"name":"{name}"' in text


def log_size(proc) -> int:
    return proc.log.stat().st_size


def move_events(rig) -> list[dict]:
    events = rig.kube.list("events.k8s.io/v1", "Event", "default")
    return [e for e in events if e.get("reason") == "ShardMoved"
            and e.get("reportingController") == "cozy-flux-shard-controller"]


def sync_of(event: dict) -> int:
    return int(re.search(r"sync (\d+)", event["note"]).group(1))


class ShardController:
    # Every controller this module starts, stopped at module teardown: a controller left running
    # would relabel the releases of later tests (it heals any tenant-* namespace).
    started: list["ShardController"] = []

    def __init__(self, rig, name: str, shards: int, *extra: str):
        ShardController.started.append(self)
        self.admin = free_port()
        self.identity = name
        self.proc = rig.group.start(name, [
            rig.scaler_bin, "shard-controller", "--shards", str(shards), "--flux-namespace", FLUX_NS,
            "--admin-listen", f"127.0.0.1:{self.admin}", "--sync-interval", SYNC, "--grace", f"{GRACE}s",
            "--moves-per-sync", str(MOVES_PER_SYNC), "--rebalance-threshold", "0",
            "--lease-namespace", FLUX_NS, "--identity", name, "--lease-duration", "4s",
            "--renew-deadline", "3s", "--retry-period", "1s", "--log-level", "info", *extra],
            env={"KUBECONFIG": str(rig.cp.kubeconfig)})
        wait_until(lambda: requests.get(f"http://127.0.0.1:{self.admin}/readyz", timeout=1).ok,
                   timeout=60, interval=POLL, what=f"{name} /readyz", proc=self.proc)

    def metric(self, name: str) -> float:
        return promtext.total(promtext.scrape(f"http://127.0.0.1:{self.admin}/metrics", timeout=2), name)

    def stop(self, sig=signal.SIGTERM):
        if sig == signal.SIGTERM:
            self.proc.stop()
        else:
            self.proc.signal(sig)
            self.proc.popen.wait(10)


@pytest.fixture(scope="module")
def shards(rig):
    """Shards 0..2 as Deployments (status written by the test) and helm-controller processes."""
    deployments = render_shards(3)
    rig.kube.ensure_namespace(FLUX_NS)
    helm_controller = binary("helm-controller", rig.versions["HELM_CONTROLLER_VERSION"])
    procs = {}
    for i in range(3):
        d = deployments[f"helm-controller-shard{i}"]
        rig.kube.apply(d)
        procs[i] = start_controller(f"shard{i}", helm_controller, container_args(d), rig.cp.kubeconfig,
                                    FLUX_NS, rig.group)
        set_ready(rig, i, True)
    server = ChartServer()
    yield {"procs": procs, "server": server}
    for ctl in ShardController.started:
        ctl.proc.stop()
    # Later tests start their own helm-controllers for shard0/shard1: take this module's releases
    # off those keys so they do not queue behind ~80 releases whose chart server is gone.
    for ns in CREATED:
        for hr in rig.kube.list(HR, "HelmRelease", ns):
            rig.kube.merge_patch(HR, "HelmRelease", hr["metadata"]["name"],
                                 {"metadata": {"labels": {KEY: "e2e-retired"}}}, namespace=ns)
    server.close()
    for i, proc in procs.items():
        proc.stop()
        rig.kube.delete("apps/v1", "Deployment", f"helm-controller-shard{i}", FLUX_NS)


@pytest.fixture(scope="module")
def placed(rig, shards):
    """Three tenants per shard, two releases each, every release installed by its shard."""
    tenants = {}
    for i in range(9):
        ns = f"tenant-sc{i}"
        tenants[ns] = tenant(rig, ns, f"shard{i % 3}", server=shards["server"], releases=2)
    for ns, names in tenants.items():
        for hr in names:
            wait_until(lambda: hr_ready(rig, ns, hr), timeout=120, interval=POLL, what=f"{ns}/{hr} Ready")
    return tenants


def test_removing_a_shard_moves_its_tenants_without_uninstall_or_new_install(rig, shards, placed):
    procs = shards["procs"]
    ctl = ShardController(rig, "sc-k3", 3)
    time.sleep(3)
    # Only this module's tenants are counted: earlier tests of the session leave tenants too.
    assert not [e for e in move_events(rig) if e["regarding"]["name"] in placed], "a settled placement must not move"
    assert ctl.metric("cozy_flux_shard_leader") == 1
    ctl.stop()

    on_removed = [ns for ns in placed if shard_of(rig, ns)[0] == "shard2"]
    assert len(on_removed) == 3
    before = {ns: {hr: (helm_secrets(rig, ns, hr), rig.kube.get("v1", "ConfigMap", f"{hr}-marker", ns)["metadata"]["uid"])
                   for hr in placed[ns]} for ns in on_removed}
    offsets = {i: log_size(p) for i, p in procs.items()}
    # The package upgrade 3 -> 2: shard2's Deployment goes, its pod stops, the controller gets --shards 2.
    t0 = time.monotonic()
    rig.kube.delete("apps/v1", "Deployment", "helm-controller-shard2", FLUX_NS)
    procs[2].stop()
    # What an operator sees first: the plan, written nowhere.
    plan = subprocess.run([rig.scaler_bin, "shards", "plan", "--shards", "2", "--flux-namespace", FLUX_NS],
                          capture_output=True, text=True, env={"KUBECONFIG": str(rig.cp.kubeconfig)}, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert re.search(r"^shard2\s+removed\s+\d+\s+0$", plan.stdout, re.M), plan.stdout
    for ns in on_removed:
        assert re.search(rf"^  {ns} shard2 -> shard[01] \(shard_removed\)$", plan.stdout, re.M), plan.stdout
    assert "clamp(ceil(H/100), 1, min(16, T)) = 1" in plan.stdout, plan.stdout
    assert all(shard_of(rig, ns)[0] == "shard2" for ns in on_removed), "shards plan wrote something"
    t_ctl = time.monotonic()
    ctl = ShardController(rig, "sc-k2", 2)

    def all_reconciled():
        for ns in on_removed:
            label, keys = shard_of(rig, ns)
            if label not in ("shard0", "shard1") or keys != {label}:
                return False
            new = procs[int(label[-1])]
            if not all(reconciled_by(new, ns, hr, offsets[int(label[-1])]) and hr_ready(rig, ns, hr)
                       for hr in placed[ns]):
                return False
        return True

    wait_until(all_reconciled, timeout=120, interval=POLL, what="shard2's tenants reconciled by their new shard",
               proc=ctl.proc)
    elapsed = time.monotonic() - t_ctl
    print(f"\nFIGURE shard removal (3 -> 2 shards, {len(on_removed)} tenants, 2 releases each): every release "
          f"reconciled by its new shard {elapsed:.1f}s after the controller (--shards 2) started "
          f"({time.monotonic() - t0:.1f}s after the removal, `shards plan` included; --sync-interval {SYNC})")
    wait_until(lambda: ctl.metric("cozy_flux_shard_stranded_tenants") == 0, timeout=10, interval=POLL,
               what="no stranded tenant reported")
    # No uninstall and no new install: release storage and the installed object are the same
    # objects; any further revision would be an upgrade on top of v1.
    for ns, hrs in before.items():
        for hr, (secrets, cm_uid) in hrs.items():
            after = helm_secrets(rig, ns, hr)
            assert after[f"sh.helm.release.v1.{hr}.v1"] == secrets[f"sh.helm.release.v1.{hr}.v1"], after
            assert rig.kube.get("v1", "ConfigMap", f"{hr}-marker", ns)["metadata"]["uid"] == cm_uid
            assert "deletionTimestamp" not in rig.kube.get(HR, "HelmRelease", hr, ns)["metadata"]
    for i, proc in procs.items():
        assert "uninstall" not in proc.log.read_text(errors="replace").lower(), f"shard{i} logged an uninstall"
    events = [e for e in move_events(rig) if e["regarding"]["name"] in on_removed]
    assert sorted(e["regarding"]["name"] for e in events) == sorted(on_removed)
    assert all("shard_removed" in e["note"] for e in events)
    rig.shard_controller = ctl


def test_an_unready_shard_is_drained_after_the_grace_period(rig, shards, placed):
    ctl = getattr(rig, "shard_controller", None)
    assert ctl is not None, "the previous test (removing a shard) did not start the controller"
    procs = shards["procs"]
    on_shard1 = [ns for ns in placed if shard_of(rig, ns)[0] == "shard1"]
    assert on_shard1
    offset = log_size(procs[0])
    t0 = time.monotonic()
    procs[1].stop()
    set_ready(rig, 1, False)
    time.sleep(GRACE - 2)
    assert all(shard_of(rig, ns)[0] == "shard1" for ns in on_shard1), "moved before the grace period ended"

    def drained():
        return all(shard_of(rig, ns) == ("shard0", {"shard0"})
                   and all(reconciled_by(procs[0], ns, hr, offset) and hr_ready(rig, ns, hr) for hr in placed[ns])
                   for ns in on_shard1)

    wait_until(drained, timeout=120, interval=POLL, what="shard1's tenants reconciled by shard0", proc=ctl.proc)
    elapsed = time.monotonic() - t0
    print(f"\nFIGURE unready shard ({len(on_shard1)} tenants, --grace {GRACE}s): every tenant reconciled by "
          f"shard0 {elapsed:.1f}s after the shard went unready")
    assert elapsed >= GRACE
    drained = [e for e in move_events(rig) if e["regarding"]["name"] in on_shard1 and "shard_down" in e["note"]]
    assert sorted(e["regarding"]["name"] for e in drained) == sorted(on_shard1)
    assert {e["related"]["name"] for e in drained} == {"helm-controller-shard0"}


def test_pacing_holds_under_a_burst_of_50_stranded_tenants(rig, shards):
    ctl = getattr(rig, "shard_controller", None)
    assert ctl is not None, "the previous tests did not start the controller"
    burst = [f"tenant-burst{i:02}" for i in range(50)]
    for ns in burst:
        tenant(rig, ns, "shard7", server=None)
    t0 = time.monotonic()
    wait_until(lambda: all(shard_of(rig, ns) == ("shard0", {"shard0"}) for ns in burst),
               timeout=180, interval=1, what="50 stranded tenants moved", proc=ctl.proc)
    elapsed = time.monotonic() - t0
    events = [e for e in move_events(rig) if e["regarding"]["name"] in burst]
    per_tenant = Counter(e["regarding"]["name"] for e in events)
    assert per_tenant == Counter(burst), "each tenant moved exactly once"
    per_sync = Counter(sync_of(e) for e in events)
    assert max(per_sync.values()) <= MOVES_PER_SYNC, per_sync
    assert len(per_sync) >= 50 // MOVES_PER_SYNC
    print(f"\nFIGURE burst: 50 stranded tenants moved in {elapsed:.1f}s over {len(per_sync)} syncs, "
          f"at most {max(per_sync.values())} per sync (--moves-per-sync {MOVES_PER_SYNC}, --sync-interval {SYNC})")
    ctl.stop()


def test_two_replicas_elect_one_leader_and_never_move_a_tenant_twice(rig, shards):
    a, b = ShardController(rig, "sc-a", 2), ShardController(rig, "sc-b", 2)

    def one_leader():
        leaders = [c for c in (a, b) if c.metric("cozy_flux_shard_leader") == 1]
        return leaders[0] if len(leaders) == 1 else None

    leader = wait_until(one_leader, timeout=30, interval=POLL, what="exactly one leader")
    follower = b if leader is a else a
    first = [f"tenant-ha{i:02}" for i in range(15)]
    for ns in first:
        tenant(rig, ns, "shard9", server=None)
    wait_until(lambda: all(shard_of(rig, ns)[0] == "shard0" for ns in first), timeout=120, interval=1,
               what="first batch moved")
    # The leader dies without releasing the Lease: the follower takes over once it expires.
    t_kill = time.monotonic()
    leader.stop(signal.SIGKILL)
    wait_until(lambda: follower.metric("cozy_flux_shard_leader") == 1, timeout=30, interval=POLL,
               what="the follower takes over")
    takeover = time.monotonic() - t_kill
    second = [f"tenant-hb{i:02}" for i in range(10)]
    for ns in second:
        tenant(rig, ns, "shard9", server=None)
    wait_until(lambda: all(shard_of(rig, ns)[0] == "shard0" for ns in second), timeout=120, interval=1,
               what="second batch moved")
    events = [e for e in move_events(rig) if e["regarding"]["name"] in first + second]
    assert Counter(e["regarding"]["name"] for e in events) == Counter(first + second), "no double moves"
    by_instance = defaultdict(set)
    for e in events:
        by_instance[e["reportingInstance"]].add(e["regarding"]["name"])
    assert by_instance == {leader.identity: set(first), follower.identity: set(second)}
    lease = rig.kube.get("coordination.k8s.io/v1", "Lease", "cozy-flux-shard-controller", FLUX_NS)
    assert lease["spec"]["holderIdentity"] == follower.identity
    print(f"\nFIGURE failover: follower led {takeover:.1f}s after the leader was killed (--lease-duration 4s)")
    follower.stop()
