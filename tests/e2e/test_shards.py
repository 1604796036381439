"""Shards: real helm-controllers started with the args `chartgen shards` renders (plus the main
flux-aio instance from the fixture), each HelmRelease reconciled only by the controller its
`sharding.fluxcd.io/key` label selects, and relabelling never uninstalls the release."""

import subprocess
import time

import pytest
import yaml

from chartsource import ChartServer
from rig import POLL, binary
from testkit import FLUX_AIO_FIXTURE, cargo_bin, wait_until
from rig.flux import container_args, selector_of, start_controller

FLUX_NS = "cozy-fluxcd"
NS = "tenant-shards"
HR = "helm.toolkit.fluxcd.io/v2"
KEY = "sharding.fluxcd.io/key"


def render_shards(count: int) -> list[dict]:
    chartgen = cargo_bin("chartgen")
    r = subprocess.run([chartgen, "shards", "--flux-deployment", FLUX_AIO_FIXTURE, "--count", str(count)],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"chartgen shards failed: {r.stderr.strip()[:300]}"
    return [d for d in yaml.safe_load_all(r.stdout) if d and d.get("kind") == "Deployment"]


def helmrelease(name: str, shard: str | None) -> dict:
    labels = {"sharding.fluxcd.io/key": shard} if shard else {}
    return {"apiVersion": HR, "kind": "HelmRelease",
            "metadata": {"name": name, "namespace": NS, "labels": labels},
            "spec": {"interval": "1m", "chartRef": {"kind": "OCIRepository", "name": "marker"}}}


def ready(rig, name: str) -> bool:
    hr = rig.kube.get(HR, "HelmRelease", name, NS) or {}
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in hr.get("status", {}).get("conditions", []))


def touched(rig, name: str) -> bool:
    """Any controller has reconciled it: finalizer or status written."""
    hr = rig.kube.get(HR, "HelmRelease", name, NS) or {}
    return bool(hr.get("metadata", {}).get("finalizers") or hr.get("status", {}).get("conditions"))


def release_secrets(rig, name: str) -> list[str]:
    return sorted(s["metadata"]["name"] for s in rig.kube.list(
        "v1", "Secret", NS, selector=f"owner=helm,name={name}"))


def mentions(proc, name: str) -> bool:
    return f'"name":"{name}"' in proc.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def controllers(rig):
    """[(name, container args, shard key or None for main)]: two rendered shards, then main."""
    deployments = render_shards(2)
    main = next(d for d in yaml.safe_load_all(FLUX_AIO_FIXTURE.read_text()) if d and d["kind"] == "Deployment")
    rig.kube.ensure_namespace(FLUX_NS)
    rig.kube.ensure_namespace(NS)
    server = ChartServer()
    server.publish(rig.kube, NS, "marker")
    out = []
    for d in deployments[:2]:
        args = container_args(d)
        selector = selector_of(args) or ""
        assert selector.startswith(KEY + "="), f"{d['metadata']['name']} selects {selector!r}"
        key = selector.split("=", 1)[1]
        assert d["metadata"]["name"] == f"helm-controller-{key}"
        out.append((d["metadata"]["name"], args, key))
    assert selector_of(container_args(main)) == "!" + KEY
    out.append(("main", container_args(main), None))
    yield out
    server.close()


def test_each_helmrelease_is_reconciled_only_by_its_shard(rig, controllers):
    releases = [f"hr-{key or 'main'}" for _, _, key in controllers]
    for (_, _, key), hr in zip(controllers, releases):
        rig.kube.apply(helmrelease(hr, key))
    helm_controller = binary("helm-controller", rig.versions["HELM_CONTROLLER_VERSION"])
    procs = {}
    # Start the controllers one by one: after each start exactly one more release is reconciled.
    for i, ((ctl, args, _), hr) in enumerate(zip(controllers, releases)):
        procs[ctl] = start_controller(ctl, helm_controller, args, rig.cp.kubeconfig, FLUX_NS,
                                      rig.group)
        wait_until(lambda: ready(rig, hr),
                   timeout=90, interval=POLL, what=f"{hr} Ready via {ctl}", proc=procs[ctl])
        assert release_secrets(rig, hr) == [f"sh.helm.release.v1.{hr}.v1"]
        time.sleep(3)  # give a wrongly selecting controller time to pick the others up
        for other in releases[i + 1:]:
            assert not touched(rig, other), f"{other} was reconciled before its controller ran"
    # Each controller's log names only its own release.
    for (ctl, _, _), hr in zip(controllers, releases):
        seen = {n for n in releases if mentions(procs[ctl], n)}
        assert seen == {hr}, f"{ctl} reconciled {seen}"
    rig.shard_procs = procs


def test_relabelling_moves_a_release_without_uninstalling(rig, controllers):
    procs = getattr(rig, "shard_procs", None)
    assert procs, "the previous test (controllers reconcile only their releases) did not start the controllers"
    (_, _, key1), (ctl2, _, key2) = controllers[0], controllers[1]
    hr1 = f"hr-{key1}"
    before = rig.kube.get("v1", "ConfigMap", f"{hr1}-marker", NS)
    assert before is not None
    rig.kube.merge_patch(HR, "HelmRelease", hr1, {"metadata": {"labels": {KEY: key2}}},
                         namespace=NS)
    wait_until(lambda: mentions(procs[ctl2], hr1),
               timeout=60, interval=POLL, what=f"{ctl2} to pick up {hr1}")
    time.sleep(5)
    assert ready(rig, hr1)
    after = rig.kube.get("v1", "ConfigMap", f"{hr1}-marker", NS)
    assert after is not None and after["metadata"]["uid"] == before["metadata"]["uid"]
    assert release_secrets(rig, hr1) == [f"sh.helm.release.v1.{hr1}.v1"]
    hr = rig.kube.get(HR, "HelmRelease", hr1, NS)
    assert "deletionTimestamp" not in hr["metadata"]
    for ctl, proc in procs.items():
        log = proc.log.read_text(errors="replace").lower()
        assert "uninstall" not in log, f"{ctl} logged an uninstall"
