"""Autoscaling flips under every apply mode. The example app chart goes static -> transition ->
autoscaled (the HPA raises the count) -> routine upgrade -> static -> autoscaled through the real
helm 3, helm 4 with server- and client-side apply, and Flux helm-controller with server-side apply
on and off and drift detection enabled (the documented tenant HelmRelease), while KEDA and the HPA
run. The CNPG stand-in watches the Cluster and records every spec.instances value the API server
holds with the managers owning the field, so each cell asserts: never below the floor, and no
change except by the HPA (the scale subresource's manager). A control release without the
drift-detection ignore rule shows helm-controller reverting the HPA, so the rule is what holds.

The apply modes run in parallel, each in its own namespace, sharing one rig and one
helm-controller; the matrix (apply mode x transition -> lowest count, changes) is printed (copied
into docs/chartgen.md)."""

from __future__ import annotations

import copy
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest
import yaml

from charts import PACKAGE_CHART, example_chart
from chartsource import ChartServer
from helm import Helm, HelmFailed
from rig import POLL, binary
from rig.cnpg import Sample
from rig.flux import container_args, start_controller
from rig.kube import Kube
from testkit import FLUX_AIO_FIXTURE, wait_until

RELEASE = "pg"
REPLICAS = 3
FLOOR = 2
TARGET = 10
# Active read sessions: 1 primary + ceil(20 / 10) = 3 instances, 1 + ceil(30 / 10) = 4.
WANTS_3, WANTS_4 = 20, 30
CNPG = "postgresql.cnpg.io/v1"
HR = "helm.toolkit.fluxcd.io/v2"
FLUX_NS = "cozy-fluxcd"
SHARD_KEY, SHARD = "sharding.fluxcd.io/key", "flips"
EXAMPLE_HR = PACKAGE_CHART / "examples/tenant-helmrelease.yaml"
REFUSAL = "differs from the live instances"

MODES = ("helm 3", "helm 4 server-side", "helm 4 client-side", "Flux server-side",
         "Flux client-side")
CONTROL = "Flux server-side, no ignore rule (control)"
STEPS = ("install static", "static → transition", "transition → autoscaled",
         "autoscaled → upgrade", "→ static, stale replicas", "autoscaled → static",
         "static → autoscaled")


class Refused(Exception):
    """The chart refused to render (a render guard), so nothing was applied."""


def values(address: str, replicas: int, parameters: dict | None = None, **autoscaling) -> dict:
    return {
        "replicas": replicas,
        "postgresql": {"parameters": {"max_connections": "100", **(parameters or {})}},
        "quorum": {"minSyncReplicas": 1, "maxSyncReplicas": 1},
        "autoscaling": {
            "scalerAddress": address, "minReplicas": FLOOR,
            "maxReplicas": 5, "target": TARGET, "metric": "ReadConnections",
            "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0},
                         "scaleDown": {"stabilizationWindowSeconds": 3,
                                       "policies": [{"type": "Pods", "value": 1,
                                                     "periodSeconds": 5}]}},
            **autoscaling},
    }


class HelmCli:
    """`helm upgrade --install` with one helm major version and apply flags."""

    def __init__(self, rig, ns: str, major: int, *flags: str):
        self.ns = ns
        self.helm = Helm(rig.dir / f"helm-{ns}", major, kubeconfig=rig.cp.kubeconfig)
        self.flags = flags
        self.chart = example_chart()

    def apply(self, vals: dict) -> None:
        try:
            self.helm.upgrade_install(RELEASE, self.chart, self.ns, vals, *self.flags)
        except HelmFailed as e:  # the stderr says why
            raise Refused(str(e)) from None

    def reconcile(self) -> None:
        pass  # nothing reconciles a CLI release between upgrades


class FluxRelease:
    """The documented tenant HelmRelease (charts/cozy-autoscaling/examples), pointed at the
    example chart, reconciled by the rig's helm-controller."""

    def __init__(self, kube: Kube, ns: str, server_side: bool, ignore: bool = True):
        self.kube, self.ns = kube, ns
        hr = yaml.safe_load(EXAMPLE_HR.read_text())
        assert hr["spec"]["driftDetection"]["mode"] == "enabled"
        hr["metadata"] = {"name": RELEASE, "namespace": ns, "labels": {SHARD_KEY: SHARD}}
        hr["spec"].update(interval="1h", chartRef={"kind": "OCIRepository", "name": "chart"},
                          install={"serverSideApply": server_side},
                          upgrade={"serverSideApply": "enabled" if server_side else "disabled"})
        if not ignore:
            del hr["spec"]["driftDetection"]["ignore"]
        self.template = hr

    def _outcome(self, generation: int) -> dict | None:
        """Once helm-controller has finished with `generation`: the Ready condition, or the
        Released=False condition of a failed attempt (a render error is retried with backoff, so
        Reconciling stays true). Conditions stamped with the new generation can still carry the
        previous outcome, so only what the attempt of this generation (which resets the failure
        counter) recorded counts."""
        status = (self.kube.get(HR, "HelmRelease", RELEASE, self.ns) or {}).get("status", {})
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
                           what=f"HelmRelease {self.ns}/{RELEASE} generation {generation}")
        if ready["status"] != "True":
            raise Refused(ready["message"])

    def reconcile(self) -> None:
        """A requested reconcile: with nothing to upgrade, helm-controller runs drift detection."""
        token = str(time.time())
        self.kube.merge_patch(HR, "HelmRelease", RELEASE, {"metadata": {"annotations": {
            "reconcile.fluxcd.io/requestedAt": token}}}, namespace=self.ns)
        wait_until(lambda: (self.kube.get(HR, "HelmRelease", RELEASE, self.ns) or {}).get(
            "status", {}).get("lastHandledReconcileAt") == token,
            timeout=60, interval=POLL, what=f"helm-controller to reconcile {self.ns}/{RELEASE}")


@dataclass
class Cell:
    lowest: int | None
    changes: list[Sample] = field(default_factory=list)
    before: int | None = None
    refused: str | None = None

    def text(self) -> str:
        steps, prev = [], self.before
        for s in self.changes:
            who = "HPA" if s.by_hpa else "+".join(s.owners) or "no owner (defaulted)"
            steps.append(f"{prev}→{s.value} {who}")
            prev = s.value
        out = f"{self.lowest} · {', '.join(steps) or 'none'}"
        return f"refused · {out}" if self.refused else out


def summarise(samples: list[Sample], start: float, refused: str | None) -> Cell:
    before = [s.value for s in samples if s.t < start]
    window = [s for s in samples if s.t >= start]
    prior = before[-1] if before else None
    seen = [v for v in [prior, *(s.value for s in window)] if v is not None]
    # The object's creation is not a change of a live count: the changes start from it.
    if prior is None and window:
        prior, window = window[0].value, window[1:]
    return Cell(min(seen) if seen else None, window, prior, refused)


class Flip:
    """One apply mode through the whole sequence; cells[step] is what each step did."""

    def __init__(self, rig, address: str, applier):
        self.rig, self.address, self.applier, self.ns = rig, address, applier, applier.ns
        self.kube = client(rig)
        self.cells: dict[str, Cell] = {}

    def count(self) -> int | None:
        return self.rig.cnpg.instances(self.ns, RELEASE)

    def settled(self, since: float) -> bool:
        """spec.instances unchanged for 4 s (the HPA syncs every 3 s), counted from `since`."""
        samples = self.rig.cnpg.samples(self.ns, RELEASE)
        return bool(samples) and time.monotonic() - max(samples[-1].t, since) > 4

    def step(self, name: str, replicas: int, after=None, refused: bool = False,
             parameters: dict | None = None, **auto) -> None:
        start = time.monotonic()
        why = None
        try:
            self.applier.apply(values(self.address, replicas, parameters, **auto))
            assert not refused, f"{self.ns}: '{name}' rendered, the hand-back guard should refuse"
        except Refused as e:
            if not refused or REFUSAL not in str(e):
                raise
            why = str(e)
        wait_until(self.count, timeout=30, interval=POLL, what=f"{self.ns} Cluster after '{name}'")
        if after:
            after()
        try:
            wait_until(lambda: self.settled(start), timeout=60, interval=POLL,
                       what=f"{self.ns}: a settled count after '{name}'")
        except TimeoutError as e:
            raise TimeoutError(f"{e}; spec.instances since the step began: "
                               f"{self.history(start)}") from None
        self.cells[name] = summarise(self.rig.cnpg.samples(self.ns, RELEASE), start, why)

    def history(self, since: float) -> str:
        """Every spec.instances value seen since `since`: seconds into the step, value, owners."""
        return ", ".join(f"+{s.t - since:.1f}s {s.value} by {'+'.join(s.owners) or '-'}"
                         for s in self.rig.cnpg.samples(self.ns, RELEASE) if s.t >= since) or "none"

    def hpa_raises_to_4(self) -> None:
        self.rig.feeder.set(self.ns, RELEASE, connections=WANTS_4)
        wait_until(lambda: self.count() == 4, timeout=90, interval=POLL,
                   what=f"{self.ns}: the HPA to raise the Cluster to 4")

    def hpa_gone(self) -> None:
        wait_until(lambda: self.kube.get("autoscaling/v2", "HorizontalPodAutoscaler",
                                         f"keda-hpa-{RELEASE}", self.ns) is None,
                   timeout=60, interval=POLL, what=f"{self.ns}: KEDA to remove the HPA")

    def run(self) -> "Flip":
        self.rig.feeder.set(self.ns, RELEASE, connections=WANTS_3)
        s = self.step
        s("install static", REPLICAS, enabled=False)
        s("static → transition", REPLICAS, enabled=True, transition=True)
        s("transition → autoscaled", REPLICAS, after=self.hpa_raises_to_4, enabled=True)
        # A routine upgrade while the HPA holds 4, then (Flux) a reconcile that runs drift detection.
        s("autoscaled → upgrade", REPLICAS, after=self.applier.reconcile, enabled=True,
          parameters={"work_mem": "8MB"})
        s("→ static, stale replicas", REPLICAS, refused=True, enabled=False)
        s("autoscaled → static", 4, after=self.hpa_gone, enabled=False)
        s("static → autoscaled", 4, enabled=True)
        return self

    def control(self) -> "Flip":
        """Drift detection without the ignore rule: helm-controller puts back the rendered count."""
        self.rig.feeder.set(self.ns, RELEASE, connections=WANTS_3)
        self.step("install autoscaled", REPLICAS, enabled=True)
        self.step("autoscaled, HPA → 4", REPLICAS, after=self.hpa_raises_to_4, enabled=True)
        start = time.monotonic()
        self.applier.reconcile()
        wait_until(lambda: any(not c.by_hpa for c in summarise(
            self.rig.cnpg.samples(self.ns, RELEASE), start, None).changes),
            timeout=30, interval=POLL, what=f"{self.ns}: helm-controller to revert the HPA")
        self.cells["drift detection run"] = summarise(self.rig.cnpg.samples(self.ns, RELEASE),
                                                      start, None)
        return self


@pytest.fixture(scope="module")
def flux(rig):
    """A helm-controller (flux-aio's args) for releases labelled with this module's shard key,
    and the example chart published as an OCIRepository artifact in each Flux namespace."""
    main = next(d for d in yaml.safe_load_all(FLUX_AIO_FIXTURE.read_text())
                if d and d["kind"] == "Deployment")
    args = [a for a in container_args(main) if not a.startswith("--watch-label-selector")]
    args.append(f"--watch-label-selector={SHARD_KEY}={SHARD}")
    rig.kube.ensure_namespace(FLUX_NS)
    start_controller("helm-controller-flips",
                     binary("helm-controller", rig.versions["HELM_CONTROLLER_VERSION"]),
                     args, rig.cp.kubeconfig, FLUX_NS, rig.group)
    server = ChartServer(example_chart())

    def publish(ns: str) -> None:
        rig.kube.ensure_namespace(ns)
        server.publish(rig.kube, ns, "chart")

    yield publish
    server.close()


def namespace(mode: str) -> str:
    return "flip-" + "".join(c if c.isalnum() else "-" for c in mode.lower()).strip("-")[:40]


def client(rig) -> Kube:
    """A client of its own for each thread (a requests session is not meant to be shared)."""
    return Kube(rig.kube.server, rig.kube.ca, *rig.kube.session.cert)


def applier(rig, flux, mode: str):
    ns = namespace(mode)
    if mode.startswith("Flux"):
        flux(ns)
        return FluxRelease(client(rig), ns, server_side="server-side" in mode,
                           ignore=mode != CONTROL)
    rig.kube.ensure_namespace(ns)
    if mode == "helm 3":
        return HelmCli(rig, ns, 3)
    return HelmCli(rig, ns, 4, "--server-side=" + ("true" if "server-side" in mode else "false"))


def matrix(flips: dict[str, Flip]) -> str:
    lines = ["| apply mode | " + " | ".join(STEPS) + " |", "|---" * (len(STEPS) + 1) + "|"]
    for mode in MODES:
        cells = flips[mode].cells
        lines.append(f"| {mode} | " + " | ".join(cells[s].text() for s in STEPS) + " |")
    control = flips[CONTROL].cells
    lines.append(f"\n{CONTROL}: " + "; ".join(f"{k}: {c.text()}" for k, c in control.items()))
    return "\n".join(lines)


def test_flips_never_dip_and_only_the_hpa_moves_the_count(rig, scaler, flux, capsys):
    def flip(mode: str) -> Flip:
        return Flip(rig, scaler.address, applier(rig, flux, mode))

    with ThreadPoolExecutor(len(MODES) + 1) as pool:
        futures = {mode: pool.submit(flip(mode).run) for mode in MODES}
        futures[CONTROL] = pool.submit(flip(CONTROL).control)
        flips = {mode: f.result() for mode, f in futures.items()}
    table = matrix(flips)
    with capsys.disabled():
        print(f"\n\nflip matrix (lowest spec.instances seen · changes, by field manager):\n{table}\n")

    for mode in MODES:
        for step, cell in flips[mode].cells.items():
            where = f"{mode}, {step}: {cell.text()}"
            assert cell.lowest is not None and cell.lowest >= FLOOR, f"below the floor: {where}"
            assert all(c.by_hpa for c in cell.changes), f"changed by something else: {where}"
        cells = flips[mode].cells
        assert [c.value for c in cells["transition → autoscaled"].changes] == [4], cells
        assert all(not cells[s].changes for s in STEPS if s != "transition → autoscaled"), cells
        assert cells["→ static, stale replicas"].refused
        assert cells["install static"].lowest == REPLICAS
        assert cells["static → autoscaled"].lowest == 4

    # Without the ignore rule helm-controller writes the rendered count over the HPA's: the rule
    # (not a quiet controller) is what keeps the count in the Flux rows above.
    [revert, *_] = [c for c in flips[CONTROL].cells["drift detection run"].changes if not c.by_hpa]
    assert revert.value == REPLICAS and any(o.startswith("helm-controller") for o in revert.owners)
