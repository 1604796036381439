"""Autoscaling flips under every apply mode, for a CNPG Cluster and for a RedisFailover driven
through its ScaleAdapter. Each app chart (the example chart; the Redis fixture after `chartgen app`)
goes static -> transition -> autoscaled (the HPA raises the count) -> routine upgrade -> static with
a stale count (refused) -> static -> autoscaled through the real helm 3, helm 4 with server- and
client-side apply, and Flux helm-controller with server-side apply on and off and drift detection
enabled (the documented tenant HelmRelease), while KEDA, the HPA and the scale adapter run.

Watches (rig/history.py) record every value the API server holds of each count, with the managers
owning the field: the Cluster's spec.instances (the CNPG stand-in), and for Redis both the
RedisFailover's spec.redis.replicas and the ScaleAdapter's spec.replicas. So each cell asserts: never
below the floor, and no change except by the count's one writer: the HPA (the scale subresource's
manager) for a Cluster and an adapter, the scale adapter controller (`cozy-scale-adapter`) for a
RedisFailover. The adapter exists only while autoscaling is on: created by the flips to it, deleted
by the flip off. A control release per chart without the drift-detection ignore rules shows
helm-controller reverting the count, so the rules are what hold.

Per chart, the apply modes run in parallel, each in its own namespace, sharing one rig and one
helm-controller; the matrix (apply mode x transition -> lowest count, changes), one block per count,
is printed at the module's end (copied into docs/chartgen.md)."""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest
import yaml

from charts import PACKAGE_CHART, example_chart, redis_chart
from chartsource import ChartServer
from helm import Helm, HelmFailed
from rig import POLL, binary
from rig.flux import container_args, start_controller
from rig.history import CountHistory, Sample
from rig.kube import Kube
from scaleadapter import MANAGER as ADAPTER_MANAGER, SA
from testkit import FLUX_AIO_FIXTURE, wait_until

REPLICAS = 3
FLOOR = 2
TARGET = 10
# Read load: CNPG's active read sessions, Redis's clients on the replicas. 1 primary (master) +
# ceil(20 / 10) = 3, 1 + ceil(30 / 10) = 4.
WANTS_3, WANTS_4 = 20, 30
HR = "helm.toolkit.fluxcd.io/v2"
RF = "databases.spotahome.com/v1"
FLUX_NS = "cozy-fluxcd"
SHARD_KEY, SHARD = "sharding.fluxcd.io/key", "flips"
EXAMPLE_HR = PACKAGE_CHART / "examples/tenant-helmrelease.yaml"
# The documented Redis tenant HelmRelease: what it ignores is both objects' counts (docs/chartgen.md).
REDIS_EXAMPLE_HR = PACKAGE_CHART / "examples/tenant-redis-helmrelease.yaml"

MODES = ("helm 3", "helm 4 server-side", "helm 4 client-side", "Flux server-side",
         "Flux client-side")
CONTROL = "Flux server-side, no ignore rule (control)"
STEPS = ("install static", "static → transition", "transition → autoscaled",
         "autoscaled → upgrade", "→ static, stale replicas", "autoscaled → static",
         "static → autoscaled")


class Refused(Exception):
    """The chart refused to render (a render guard), so nothing was applied."""


@dataclass(frozen=True)
class Count:
    """A count the flips must keep, and the one writer that may move it."""
    title: str                            # its block of the matrix
    history: CountHistory                 # every value the API server held
    name: str                             # the object's name
    mover: str                            # what the matrix calls that writer
    moves: Callable[[Sample], bool]       # whether a change was that writer's
    while_autoscaled: bool = False        # the object exists only while autoscaling is on

    def samples(self, ns: str) -> list[Sample]:
        return self.history.samples(ns, self.name)

    def value(self, ns: str) -> int | None:
        return self.history.count(ns, self.name)

    def change(self, before, s: Sample) -> str:
        if s.value is None:
            return f"{before}→deleted"
        who = self.mover if self.moves(s) else "+".join(s.owners) or "no owner (defaulted)"
        return f"{before}→{s.value} {who}"


@dataclass(frozen=True)
class Engine:
    """An app chart under the flips: its release, the counts it keeps (the target's first), how
    its values are made and its read load set, and what its HelmRelease's drift detection ignores."""
    name: str
    release: str
    chart: Path
    field: str                                   # the count's field, as the hand-back guard names it
    counts: tuple[Count, ...]
    values: Callable[[dict, int, bool], dict]    # (autoscaling block, replicas, upgraded)
    load: Callable[[str, int], None]             # (namespace, read load)
    ignore: list[dict]

    @property
    def refusal(self) -> str:
        return f"differs from the live {self.field}"


def autoscaling(address: str, **settings) -> dict:
    return {"scalerAddress": address, "minReplicas": FLOOR, "maxReplicas": 5, "target": TARGET,
            "metric": "ReadConnections",
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                         "scaleDown": {"stabilizationWindowSeconds": 3,
                                       "policies": [{"type": "Pods", "value": 1, "periodSeconds": 5}]}},
            **settings}


def cnpg_values(auto: dict, replicas: int, upgraded: bool) -> dict:
    work_mem = {"work_mem": "8MB"} if upgraded else {}
    return {"replicas": replicas, "postgresql": {"parameters": {"max_connections": "100", **work_mem}},
            "quorum": {"minSyncReplicas": 1, "maxSyncReplicas": 1}, "autoscaling": auto}


def redis_values(auto: dict, replicas: int, upgraded: bool) -> dict:
    return {"replicas": replicas, "size": "2Gi" if upgraded else "1Gi", "autoscaling": auto}


class HelmCli:
    """`helm upgrade --install` with one helm major version and apply flags."""

    def __init__(self, rig, ns: str, engine: Engine, major: int, *flags: str):
        self.ns, self.engine = ns, engine
        self.helm = Helm(rig.dir / f"helm-{ns}", major, kubeconfig=rig.cp.kubeconfig)
        self.flags = flags

    def apply(self, vals: dict) -> None:
        try:
            self.helm.upgrade_install(self.engine.release, self.engine.chart, self.ns, vals, *self.flags)
        except HelmFailed as e:  # the stderr says why
            raise Refused(str(e)) from None

    def reconcile(self) -> None:
        pass  # nothing reconciles a CLI release between upgrades


class FluxRelease:
    """The documented tenant HelmRelease (charts/cozy-autoscaling/examples), pointed at the
    engine's chart and ignoring its counts, reconciled by the rig's helm-controller."""

    def __init__(self, kube: Kube, ns: str, engine: Engine, server_side: bool, ignore: bool = True):
        self.kube, self.ns, self.release = kube, ns, engine.release
        hr = yaml.safe_load(EXAMPLE_HR.read_text())
        assert hr["spec"]["driftDetection"]["mode"] == "enabled"
        hr["metadata"] = {"name": self.release, "namespace": ns, "labels": {SHARD_KEY: SHARD}}
        hr["spec"].update(interval="1h", chartRef={"kind": "OCIRepository", "name": "chart"},
                          install={"serverSideApply": server_side},
                          upgrade={"serverSideApply": "enabled" if server_side else "disabled"})
        hr["spec"]["driftDetection"]["ignore"] = engine.ignore
        if not ignore:
            del hr["spec"]["driftDetection"]["ignore"]
        self.template = hr

    def _outcome(self, generation: int) -> dict | None:
        """Once helm-controller has finished with `generation`: the Ready condition, or the
        Released=False condition of a failed attempt (a render error is retried with backoff, so
        Reconciling stays true). Conditions stamped with the new generation can still carry the
        previous outcome, so only what the attempt of this generation (which resets the failure
        counter) recorded counts."""
        status = (self.kube.get(HR, "HelmRelease", self.release, self.ns) or {}).get("status", {})
        if status.get("lastAttemptedGeneration") != generation:
            return None
        conditions = {c["type"]: c for c in status.get("conditions", [])}
        ready, released = conditions.get("Ready", {}), conditions.get("Released", {})
        if status.get("failures", 0) and released.get("status") == "False":
            return released
        busy = conditions.get("Reconciling", {}).get("status") == "True"
        if not busy and ready.get("status") == "True" and ready.get("observedGeneration") == generation:
            return ready
        return None

    def apply(self, vals: dict) -> None:
        hr = copy.deepcopy(self.template)
        hr["spec"]["values"] = vals
        generation = self.kube.apply(hr)["metadata"]["generation"]
        ready = wait_until(lambda: self._outcome(generation), timeout=90, interval=POLL,
                           what=f"HelmRelease {self.ns}/{self.release} generation {generation}")
        if ready["status"] != "True":
            raise Refused(ready["message"])

    def reconcile(self) -> None:
        """A requested reconcile: with nothing to upgrade, helm-controller runs drift detection."""
        token = str(time.time())
        self.kube.merge_patch(HR, "HelmRelease", self.release, {"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": token}}}, namespace=self.ns)
        wait_until(lambda: (self.kube.get(HR, "HelmRelease", self.release, self.ns) or {}).get(
            "status", {}).get("lastHandledReconcileAt") == token,
            timeout=60, interval=POLL, what=f"helm-controller to reconcile {self.ns}/{self.release}")


@dataclass
class Cell:
    count: Count
    lowest: int | None
    changes: list[Sample] = field(default_factory=list)
    before: int | None = None
    refused: str | None = None

    def text(self) -> str:
        steps, prev = [], self.before
        for s in self.changes:
            steps.append(self.count.change(prev, s))
            prev = s.value
        lowest = "absent" if self.lowest is None else self.lowest
        out = f"{lowest} · {', '.join(steps) or 'none'}"
        return f"refused · {out}" if self.refused else out


def summarise(count: Count, ns: str, start: float, refused: str | None) -> Cell:
    samples = count.samples(ns)
    before = [s.value for s in samples if s.t < start]
    window = [s for s in samples if s.t >= start]
    prior = before[-1] if before else None
    seen = [v for v in [prior, *(s.value for s in window)] if v is not None]
    # The object's creation (or creation again after a deletion) is not a change of a live
    # count: the changes start from it.
    if prior is None and window:
        prior, window = window[0].value, window[1:]
    return Cell(count, min(seen) if seen else None, window, prior, refused)


class Flip:
    """One apply mode through the whole sequence; cells[step][count title] is what each step did."""

    def __init__(self, rig, engine: Engine, address: str, applier):
        self.rig, self.engine, self.address, self.applier = rig, engine, address, applier
        self.ns = applier.ns
        self.kube = client(rig)
        self.cells: dict[str, dict[str, Cell]] = {}

    def count(self) -> int | None:
        return self.engine.counts[0].value(self.ns)

    def settled(self, since: float) -> bool:
        """Every count unchanged for 4 s (the HPA syncs every 3 s, the adapter every 1 s),
        counted from `since`; the target's count seen."""
        last = [samples[-1].t for c in self.engine.counts if (samples := c.samples(self.ns))]
        return self.count() is not None and time.monotonic() - max([*last, since]) > 4

    def step(self, name: str, replicas: int, after=None, refused: bool = False,
             upgraded: bool = False, **auto) -> None:
        start = time.monotonic()
        why = None
        try:
            self.applier.apply(self.engine.values(autoscaling(self.address, **auto), replicas, upgraded))
            assert not refused, f"{self.ns}: '{name}' rendered, the hand-back guard should refuse"
        except Refused as e:
            if not refused or self.engine.refusal not in str(e):
                raise
            why = str(e)
        wait_until(self.count, timeout=30, interval=POLL, what=f"{self.ns} count after '{name}'")
        if after:
            after()
        try:
            wait_until(lambda: self.settled(start), timeout=60, interval=POLL,
                       what=f"{self.ns}: a settled count after '{name}'")
        except TimeoutError as e:
            raise TimeoutError(f"{e}; the counts since the step began: {self.history(start)}") from None
        self.cells[name] = {c.title: summarise(c, self.ns, start, why) for c in self.engine.counts}

    def history(self, since: float) -> str:
        """Every value of each count seen since `since`: seconds into the step, value, owners."""
        return "; ".join(f"{c.title}: " + (", ".join(
            f"+{s.t - since:.1f}s {s.value} by {'+'.join(s.owners) or '-'}"
            for s in c.samples(self.ns) if s.t >= since) or "none") for c in self.engine.counts)

    def hpa_raises_to_4(self) -> None:
        self.engine.load(self.ns, WANTS_4)
        wait_until(lambda: self.count() == 4, timeout=90, interval=POLL,
                   what=f"{self.ns}: the HPA to raise the count to 4")

    def hpa_gone(self) -> None:
        wait_until(lambda: self.kube.get("autoscaling/v2", "HorizontalPodAutoscaler",
                                         f"keda-hpa-{self.engine.release}", self.ns) is None,
                   timeout=60, interval=POLL, what=f"{self.ns}: KEDA to remove the HPA")

    def run(self) -> "Flip":
        self.engine.load(self.ns, WANTS_3)
        s = self.step
        s("install static", REPLICAS, enabled=False)
        s("static → transition", REPLICAS, enabled=True, transition=True)
        s("transition → autoscaled", REPLICAS, after=self.hpa_raises_to_4, enabled=True)
        # A routine upgrade while the HPA holds 4, then (Flux) a reconcile that runs drift detection.
        s("autoscaled → upgrade", REPLICAS, after=self.applier.reconcile, upgraded=True, enabled=True)
        s("→ static, stale replicas", REPLICAS, refused=True, enabled=False)
        s("autoscaled → static", 4, after=self.hpa_gone, enabled=False)
        s("static → autoscaled", 4, enabled=True)
        return self

    def reverts(self, start: float) -> list[tuple[Count, Sample]]:
        """The changes since `start` of a count by anything but its writer."""
        return [(c, s) for c in self.engine.counts for s in summarise(c, self.ns, start, None).changes
                if s.value is not None and not c.moves(s)]

    def control(self) -> "Flip":
        """Drift detection without the ignore rule: helm-controller puts back the rendered count."""
        self.engine.load(self.ns, WANTS_3)
        self.step("install autoscaled", REPLICAS, enabled=True)
        self.step("autoscaled, HPA → 4", REPLICAS, after=self.hpa_raises_to_4, enabled=True)
        start = time.monotonic()
        self.applier.reconcile()
        wait_until(lambda: self.reverts(start), timeout=30, interval=POLL,
                   what=f"{self.ns}: helm-controller to revert the HPA")
        self.cells["drift detection run"] = {c.title: summarise(c, self.ns, start, None)
                                             for c in self.engine.counts}
        self.reverted = self.reverts(start)
        return self


def client(rig) -> Kube:
    """A client of its own for each thread (a requests session is not meant to be shared)."""
    return Kube(rig.kube.server, rig.kube.ca, *rig.kube.session.cert)


@pytest.fixture(scope="module")
def flux(rig):
    """A helm-controller (flux-aio's args) for releases labelled with this module's shard key,
    and `publish(ns, chart)`: the chart as an OCIRepository artifact in a Flux namespace."""
    main = next(d for d in yaml.safe_load_all(FLUX_AIO_FIXTURE.read_text())
                if d and d["kind"] == "Deployment")
    args = [a for a in container_args(main) if not a.startswith("--watch-label-selector")]
    args.append(f"--watch-label-selector={SHARD_KEY}={SHARD}")
    rig.kube.ensure_namespace(FLUX_NS)
    start_controller("helm-controller-flips",
                     binary("helm-controller", rig.versions["HELM_CONTROLLER_VERSION"]),
                     args, rig.cp.kubeconfig, FLUX_NS, rig.group)
    servers: dict[Path, ChartServer] = {}

    def publish(ns: str, chart: Path) -> None:
        rig.kube.ensure_namespace(ns)
        if chart not in servers:
            servers[chart] = ChartServer(chart)
        servers[chart].publish(rig.kube, ns, "chart")

    yield publish
    for server in servers.values():
        server.close()


@pytest.fixture(scope="module")
def cnpg(rig) -> Engine:
    """The example chart's Cluster: the HPA writes spec.instances through the scale subresource."""
    hr = yaml.safe_load(EXAMPLE_HR.read_text())
    return Engine(
        "CNPG", "pg", example_chart(), "instances",
        (Count("CNPG Cluster spec.instances", rig.cnpg, "pg", "HPA", lambda s: s.by_hpa),),
        cnpg_values, lambda ns, load: rig.feeder.set(ns, "pg", connections=load),
        hr["spec"]["driftDetection"]["ignore"])


@pytest.fixture(scope="module")
def redis(rig, scale_adapter):
    """The Redis fixture after `chartgen app`: the HPA writes the ScaleAdapter's /scale, the scale
    adapter controller (running) writes that count into the RedisFailover. The feeder plays the
    Redis pods' exporters at spec.redis.replicas; no Redis operator runs (docs/e2e.md)."""
    name = "cache"
    failovers = CountHistory(rig.kube, RF, "RedisFailover", ("redis", "replicas"), deletions=True).start()
    adapters = CountHistory(rig.kube, SA, "ScaleAdapter", ("replicas",), deletions=True).start()
    yield Engine(
        "Redis", name, redis_chart(rig.dir), "replicas",
        (Count("RedisFailover spec.redis.replicas", failovers, name, "adapter",
               lambda s: s.only_by(ADAPTER_MANAGER)),
         Count("ScaleAdapter spec.replicas", adapters, name, "HPA", lambda s: s.by_hpa,
               while_autoscaled=True)),
        redis_values, lambda ns, load: rig.feeder.set_redis(ns, name, clients=load),
        yaml.safe_load(REDIS_EXAMPLE_HR.read_text())["spec"]["driftDetection"]["ignore"])
    failovers.stop()
    adapters.stop()


@pytest.fixture(scope="module")
def blocks(request):
    """The matrix's blocks, printed together at the module's end."""
    out: list[str] = []
    yield out
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n\nflip matrix (lowest count seen · changes, by field manager):\n\n" + "\n\n".join(out) + "\n")


def namespace(engine: Engine, mode: str) -> str:
    prefix = "flip-" + ("" if engine.name == "CNPG" else engine.name.lower() + "-")
    return prefix + "".join(c if c.isalnum() else "-" for c in mode.lower()).strip("-")[:40]


def applier(rig, flux, engine: Engine, mode: str):
    ns = namespace(engine, mode)
    if mode.startswith("Flux"):
        flux(ns, engine.chart)
        return FluxRelease(client(rig), ns, engine, server_side="server-side" in mode,
                           ignore=mode != CONTROL)
    rig.kube.ensure_namespace(ns)
    if mode == "helm 3":
        return HelmCli(rig, ns, engine, 3)
    return HelmCli(rig, ns, engine, 4, "--server-side=" + ("true" if "server-side" in mode else "false"))


def run_flips(rig, scaler, flux, engine: Engine) -> dict[str, Flip]:
    """Every apply mode through the sequence and the control, in parallel."""
    def flip(mode: str) -> Flip:
        return Flip(rig, engine, scaler.address, applier(rig, flux, engine, mode))

    with ThreadPoolExecutor(len(MODES) + 1) as pool:
        futures = {mode: pool.submit(flip(mode).run) for mode in MODES}
        futures[CONTROL] = pool.submit(flip(CONTROL).control)
        return {mode: f.result() for mode, f in futures.items()}


def matrix(engine: Engine, flips: dict[str, Flip]) -> list[str]:
    """One block a count: the apply modes' rows, then the control's steps."""
    out = []
    for count in engine.counts:
        lines = [f"{count.title}:", "| apply mode | " + " | ".join(STEPS) + " |",
                 "|---" * (len(STEPS) + 1) + "|"]
        for mode in MODES:
            cells = flips[mode].cells
            lines.append(f"| {mode} | " + " | ".join(cells[s][count.title].text() for s in STEPS) + " |")
        lines.append(f"\n{CONTROL}: " + "; ".join(
            f"{k}: {c[count.title].text()}" for k, c in flips[CONTROL].cells.items()))
        out.append("\n".join(lines))
    return out


def expected_changes(count: Count, step: str) -> list[int | None]:
    """The only changes a step makes: the HPA's 3 -> 4, and the adapter's deletion when
    autoscaling goes off."""
    if step == "transition → autoscaled":
        return [4]
    if count.while_autoscaled and step == "autoscaled → static":
        return [None]
    return []


def assert_flips(engine: Engine, flips: dict[str, Flip]) -> None:
    for mode in MODES:
        cells = flips[mode].cells
        assert all(c.refused for c in cells["→ static, stale replicas"].values()), (mode, cells)
        for count in engine.counts:
            for step in STEPS:
                cell = cells[step][count.title]
                where = f"{engine.name} {mode}, {step}, {count.title}: {cell.text()}"
                if count.while_autoscaled and step == "install static":
                    assert cell.lowest is None and not cell.changes, f"present while static: {where}"
                else:
                    assert cell.lowest is not None and cell.lowest >= FLOOR, f"below the floor: {where}"
                assert all(count.moves(c) for c in cell.changes if c.value is not None), \
                    f"changed by something else: {where}"
                assert [c.value for c in cell.changes] == expected_changes(count, step), where
            step_lowest = {s: cells[s][count.title].lowest for s in STEPS}
            assert step_lowest["static → transition"] == REPLICAS, (mode, count.title, step_lowest)
            assert step_lowest["static → autoscaled"] == 4, (mode, count.title, step_lowest)
            if not count.while_autoscaled:
                assert step_lowest["install static"] == REPLICAS, (mode, count.title, step_lowest)

    # Without the ignore rules helm-controller writes the rendered count over the autoscaler's:
    # the rules (not a quiet controller) are what keep the count in the Flux rows above.
    reverted = flips[CONTROL].reverted
    assert reverted, flips[CONTROL].cells
    for count, revert in reverted:
        assert revert.value == REPLICAS and any(o.startswith("helm-controller") for o in revert.owners), \
            (count.title, revert)


def test_flips_never_dip_and_only_the_hpa_moves_the_count(rig, scaler, flux, cnpg, blocks):
    flips = run_flips(rig, scaler, flux, cnpg)
    blocks.extend(matrix(cnpg, flips))
    assert_flips(cnpg, flips)


def test_redis_flips_never_dip_and_only_the_adapter_moves_either_count(rig, scaler, flux, redis, blocks):
    """The RedisFailover's count moves only by the scale adapter, the ScaleAdapter's only by the
    HPA through its /scale; neither by helm or helm-controller, neither under the floor."""
    flips = run_flips(rig, scaler, flux, redis)
    blocks.extend(matrix(redis, flips))
    assert_flips(redis, flips)
