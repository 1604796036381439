"""The redis-operator on the node: built from its Go module (cmd/redisoperator, the version whose
RedisFailover CRD the suites pin) into an image holding the binary as upstream's does, installed
with its own helm chart (the module's charts/redisoperator; its CRD from manifests/, below). Its Redis, Sentinel and
exporter containers run one image built here from Debian's redis-server, redis-sentinel,
redis-tools and prometheus-redis-exporter (tests/node/setup.sh)."""

from __future__ import annotations

from pathlib import Path

import resp
from helm import Helm
from rig import install_crds
from testkit import crd_files, wait_until

from . import images
from .cnpg import pod_monitor_job
from .node import Node

NAMESPACE = RELEASE = "redis-operator"
# What every container of a RedisFailover's pods runs as unless its spec says otherwise
# (operator/redisfailover/service/generator.go).
OPERATOR_UID = 1000
# The suite's RedisFailover (test_5_redis.py), and the Redis pods' names: rfr-<name>-<n>.
REDIS_NAMESPACE, FAILOVER = "cache", "rf"
REDIS_PODS = f"app.kubernetes.io/component=redis,app.kubernetes.io/name={FAILOVER}"
SENTINEL_PODS = f"app.kubernetes.io/component=sentinel,app.kubernetes.io/name={FAILOVER}"


class RedisOperator:
    def __init__(self, node: Node, kube, helm_home: Path, kubeconfig: Path, binary: Path, chart: Path,
                 redis_rootfs: Path):
        self.node, self.kube = node, kube
        self.helm = Helm(helm_home, kubeconfig=kubeconfig)
        self.binary, self.chart, self.redis_rootfs = binary, chart, redis_rootfs

    def install(self) -> "RedisOperator":
        self.image = self.node.add_image("redis-operator", images.Image(
            "cozy.local/redis-operator", files={"/usr/local/bin/redis-operator": self.binary},
            entrypoint=["/usr/local/bin/redis-operator"], user=str(OPERATOR_UID)))
        # One image for Redis, Sentinel and the exporter sidecar: the operator gives the first two
        # their commands and runs the exporter with the image's entrypoint and its args.
        # Working in /data, the volume the operator mounts there, as the official image does: a
        # replica writes the RDB of a full sync to its working directory, and in / (a runtime's
        # default) uid 1000 cannot, so no replica ever finished a sync (seen here: link down, its
        # master listing it in wait_bgsave, while the operator's readiness probe, which checks
        # only that no sync is in progress, called it ready).
        self.redis_image = self.node.add_image("redis", images.Image(
            "cozy.local/redis", rootfs_tar=self.redis_rootfs, workdir="/data",
            entrypoint=["/usr/bin/prometheus-redis-exporter"], user=str(OPERATOR_UID)))
        repository, tag = self.image.rsplit(":", 1)
        # The chart's crds/ file holds template directives, which helm never renders in crds/:
        # `helm install` fails parsing it ("did not find expected node content"). The CRD comes
        # from the module's manifests/ (the one every suite pins) and helm skips its copy.
        install_crds(self.kube, crd_files("redis-operator"))
        self.helm.upgrade_install(RELEASE, self.chart, NAMESPACE, {
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"}}, "--skip-crds")

        def ready():
            d = self.kube.list("apps/v1", "Deployment", NAMESPACE)
            return d and all(x["status"].get("availableReplicas") == x["spec"]["replicas"] for x in d)
        wait_until(ready, timeout=180, interval=1, what="the redis-operator available")
        return self

    def images_of(self, failover: dict) -> dict:
        """`failover` with every container on the image built here, never pulled. Debian's Redis
        keeps Redis's own default `protected-mode yes`, which refuses every non-loopback client
        while no password is set; the official image the operator is made for compiles it off, and
        the operator's redis.conf does not say. Off here, as in that image, on the command line:
        `customConfig` is applied with CONFIG SET over the very connections protected mode
        refuses."""
        spec = failover["spec"]
        for part in (spec["redis"], spec["sentinel"], spec["redis"].setdefault("exporter", {})):
            part["image"], part["imagePullPolicy"] = self.redis_image, "Never"
        # The operator's default command, plus the flag.
        spec["redis"]["command"] = ["redis-server", "/redis/redis.conf", "--protected-mode", "no"]
        return failover


def redis_scrape_config(cp, namespace: str, failover: str, interval: str = "5s") -> dict:
    """The scrape job a PodMonitor for the Redis pods' exporter sidecars gives (pods labelled
    app.kubernetes.io/component=redis and app.kubernetes.io/name=<failover>, port `metrics`)."""
    return pod_monitor_job(cp, namespace, failover, {"app.kubernetes.io/component": "redis",
                                                     "app.kubernetes.io/name": failover}, interval)


def info(ip: str, section: str) -> dict[str, str]:
    """INFO <section> of the Redis pod at `ip`, as its `field:value` lines."""
    return resp.info(6379, section, host=ip)


def sentinel_replicas(ip: str, master: str = "mymaster") -> int:
    """How many replicas the Sentinel at `ip` knows for `master` (`num-slaves` of SENTINEL
    MASTER): only a replica a Sentinel knows can be promoted."""
    fields = [f.decode() for f in resp.command(26379, "SENTINEL", "MASTER", master, host=ip)]
    return int(dict(zip(fields[::2], fields[1::2]))["num-slaves"])


class Clients:
    """Idle client connections held open on one Redis pod, as an application's pool holds them:
    each is a connected client in INFO and CLIENT LIST, which the scaler's ReadConnections counts."""

    def __init__(self):
        self.connections: list[resp.Conn] = []

    def open(self, ip: str, n: int) -> None:
        for _ in range(n):
            c = resp.Conn(6379, timeout=10, host=ip)
            # One round trip each, so Redis has accepted and registered every client.
            assert c.call("PING") == "PONG", "Redis did not answer PING"
            self.connections.append(c)

    def close(self) -> None:
        for c in self.connections:
            c.close()
        self.connections = []
