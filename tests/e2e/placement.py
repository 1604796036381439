"""The package's shard placement as it runs on the rig: `scaler webhook` behind the chart's own
MutatingWebhookConfiguration and Service, and `scaler shard-controller` replicas, each process
started with the arguments of the package's Deployment (so an upgrade that changes them is what
runs after a roll).

Stand-ins, named as such: no cert-manager, so a test CA issues the webhook's certificate and this
module writes the configuration's caBundle (cainjector's job, redone after every helm upgrade); no
kubelet, so the shard Deployments are reported available here, the webhook listens on its Service's
ClusterIP (see rig/controlplane.py), and a replica is a process whose admin port is a free loopback
port and whose identity stands in for its pod name."""

from __future__ import annotations

import base64

import requests

import promtext
from rig import POLL
from rig.flux import container_args
from secured import FLUX_NS, NS
from testkit import CA, free_port, wait_until

MWC = "cozy-autoscaling-shard-placement"
WEBHOOK = "cozy-autoscaling-webhook"
CONTROLLER = "cozy-autoscaling-shard-controller"
LEADER_GAUGE = "cozy_flux_shard_leader"


def mark_shards_ready(rig) -> None:
    """No kubelet runs here: report the shard Deployments available, as the kubelet and the
    deployment controller would once the helm-controller pods run."""
    for d in rig.kube.list("apps/v1", "Deployment", FLUX_NS):
        rig.kube.merge_patch("apps/v1", "Deployment", d["metadata"]["name"], {"status": {
            "observedGeneration": d["metadata"]["generation"], "replicas": 1,
            "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
            "conditions": [{"type": "Available", "status": "True", "reason": "e2e",
                            "message": "process started by the rig"}]}},
            namespace=FLUX_NS, sub="status")


def package_args(rig, deployment: str, container: str) -> list[str]:
    d = rig.kube.get("apps/v1", "Deployment", deployment, NS)
    assert d, f"the package has no Deployment {NS}/{deployment}"
    return container_args(d, container)


class Process:
    """One replica: the package Deployment's arguments, its admin port on loopback."""

    def __init__(self, rig, name: str, args: list[str]):
        self.name = name
        self.admin = free_port()
        args = [a for a in args if not a.startswith("--admin-listen")]
        self.proc = rig.group.start(name, [rig.scaler_bin, *args, "--admin-listen", f"127.0.0.1:{self.admin}"],
                                    env={"KUBECONFIG": str(rig.cp.kubeconfig)})

    def ready(self) -> "Process":
        wait_until(lambda: requests.get(f"http://127.0.0.1:{self.admin}/readyz", timeout=1).ok,
                   timeout=60, interval=POLL, what=f"{self.name} /readyz", proc=self.proc)
        return self

    def metric(self, name: str) -> float:
        return promtext.total(promtext.scrape(f"http://127.0.0.1:{self.admin}/metrics", timeout=2), name)

    def stop(self) -> None:
        self.proc.stop()


class Webhook:
    """`scaler webhook` on the Service's ClusterIP, with a certificate for the Service's names."""

    def __init__(self, rig):
        self.rig = rig
        svc = rig.kube.get("v1", "Service", WEBHOOK, NS)
        self.ip = svc["spec"]["clusterIP"]
        self.port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "https")
        self.ca = CA(rig.dir / "webhook-pki", "webhook")
        self.pair = self.ca.issue("webhook", WEBHOOK, hosts=(f"{WEBHOOK}.{NS}.svc", self.ip))
        self.replica: Process | None = None
        self._serial = 0

    def inject(self) -> None:
        """cainjector's part: the configuration's caBundle from the webhook's CA, applied as the only
        field of its own field manager, so a later server-side helm upgrade (Helm 4) owns the rest
        without a conflict."""
        mwc = self.rig.kube.get("admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", MWC)
        bundle = base64.b64encode(self.ca.cert.read_bytes()).decode()
        self.rig.kube.apply({"apiVersion": mwc["apiVersion"], "kind": mwc["kind"], "metadata": {"name": MWC},
                             "webhooks": [{"name": w["name"], "clientConfig": {"caBundle": bundle}}
                                          for w in mwc["webhooks"]]}, manager="cainjector")

    def start(self) -> "Webhook":
        self.inject()
        mark_shards_ready(self.rig)
        args = []
        for a in package_args(self.rig, WEBHOOK, "webhook"):
            flag = a.split("=", 1)[0]
            args.append({"--listen": f"--listen={self.ip}:{self.port}", "--tls-cert": f"--tls-cert={self.pair.cert}",
                         "--tls-key": f"--tls-key={self.pair.key}"}.get(flag, a))
        self._serial += 1
        self.replica = Process(self.rig, f"scaler-webhook-{self._serial}", args).ready()
        return self

    def stop(self) -> None:
        if self.replica:
            self.replica.stop()
            self.replica = None

    def roll(self) -> None:
        """A rollout of the one-address stand-in: the old process goes, then the new one comes
        (a real rollout surges first; this gap is the harder case: failurePolicy Ignore admits
        releases unstamped meanwhile)."""
        self.stop()
        self.start()


class ShardControllers:
    """The package's shard-controller replicas (`shardController.replicas`), rolled one by one."""

    def __init__(self, rig):
        self.rig = rig
        self.replicas: dict[str, Process] = {}
        self._serial = 0

    def _start(self) -> None:
        self._serial += 1
        name = f"shard-controller-{self._serial}"
        args = package_args(self.rig, CONTROLLER, "shard-controller")
        # Listed before it is ready: it may take the Lease at once, and a sampler must see that.
        replica = self.replicas[name] = Process(self.rig, name,
                                                [*args, "--lease-namespace", NS, "--identity", name])
        replica.ready()

    def start(self, count: int) -> "ShardControllers":
        for _ in range(count):
            self._start()
        return self

    def leaders(self) -> list[str]:
        """Replicas that report holding the Lease now (a stopped one holds nothing)."""
        out = []
        for name, replica in list(self.replicas.items()):
            try:
                if replica.metric(LEADER_GAUGE) == 1:
                    out.append(name)
            except requests.RequestException:
                pass
        return out

    def roll(self) -> None:
        """A rollout with maxUnavailable 1: each old replica stops, then its successor starts."""
        for name in list(self.replicas):
            self.replicas.pop(name).stop()
            self._start()

    def stop(self) -> None:
        for replica in self.replicas.values():
            replica.stop()
        self.replicas = {}
