"""A feeder that pushes synthetic series every second through the test kit's generators, shaped by
the target's current count and by a load model the scenario changes while the loop runs: CNPG
series (tests/lib/cnpg_series.py) by the Cluster's spec.instances (pod <cluster>-1 is the primary,
the rest are standbys), redis_exporter series (tests/lib/redis_series.py) by the RedisFailover's
spec.redis.replicas (pod rfr-<name>-0 is the master, the rest are replicas)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, replace

import requests

from typing import Callable

import redis_series
from cnpg_series import Backend, Cluster, Counters, Pod, render_at
from vm import VictoriaMetrics

from .cnpg import CnpgStandIn
from .kube import ApiError

# Client sessions every pod holds: on the primary active ones (primary load never counts as read
# load), idle ones everywhere; CNPG's own sessions come with the generator's pods.
PRIMARY_ACTIVE = 40
IDLE = 3


@dataclass
class Load:
    connections: int = 0        # active client sessions, spread over the standbys
    lag_seconds: float = 0.0    # replication lag reported by every standby
    wal_bytes_per_s: float = 0  # primary's WAL write rate (0 = idle primary)
    idle_connections: int = 0   # idle client sessions, spread over the standbys like `connections`
    max_connections: int | None = None  # cnpg_pg_settings_setting on every pod when set
    # CPU: `read_cpu_millicores` spread over the streaming standbys; a standby numbered
    # `warmup_from_pod` or above restores (WAL receiver down, `restore_cpu_millicores`) for its
    # first `warmup_seconds` after it appears. None: the fixed 50m per pod, no receiver series.
    read_cpu_millicores: float | None = None
    restore_cpu_millicores: float = 0.0
    warmup_seconds: float = 0.0
    warmup_from_pod: int = 0


@dataclass
class RedisLoad:
    clients: int = 0               # application connections, spread over the replicas
    write_bytes_per_s: float = 0   # the master's replication stream (0 = idle master)
    syncing: frozenset[int] = frozenset()  # replica ordinals in a full sync


def failover(namespace: str, name: str, replicas: int, load: RedisLoad) -> redis_series.Failover:
    """`replicas` Redis pods under `load`: the clients spread evenly over the replicas (the
    remainder on the first ones); a lone master carries none."""
    serving = max(replicas - 1, 1)
    pods = [redis_series.RedisPod(0, master=True)]
    for i in range(1, replicas):
        share = load.clients // serving + (1 if i - 1 < load.clients % serving else 0)
        pods.append(redis_series.RedisPod(i, clients=share, syncing=i in load.syncing))
    return redis_series.Failover(namespace, name, pods)


def cluster(namespace: str, name: str, instances: int, load: Load, restoring: set[int]) -> Cluster:
    """`instances` pods under `load`, standbys numbered in `restoring` still restoring: the active
    and idle sessions spread evenly over the standbys (the remainder of the active ones on the
    first). A standby without active sessions keeps its active row at 0, unlike CNPG, which omits
    zero rows: a scrape would mark the vanished series stale at once, while a pushed series that
    stops stays visible to instant queries for VictoriaMetrics' 5-minute lookback."""
    standbys = instances - 1
    serving = max(standbys - len(restoring), 1)
    cpu = load.read_cpu_millicores

    def pod(n: int, backends: list[Backend], **kw) -> Pod:
        primary = n == 1
        if cpu is not None:  # the receiver series and a CPU split by role
            kw["wal_receiver_up"] = n not in restoring
            kw["cpu_millicores"] = (50.0 if primary else load.restore_cpu_millicores if n in restoring
                                    else cpu / serving)
        return Pod(n, primary=primary, backends=backends, max_connections=load.max_connections, **kw)

    pods = [pod(1, [Backend(PRIMARY_ACTIVE), Backend(IDLE, state="idle")],
                wal_bytes_per_s=load.wal_bytes_per_s)]
    for i in range(standbys):
        share = load.connections // standbys + (1 if i < load.connections % standbys else 0)
        idle = IDLE + load.idle_connections // standbys
        pods.append(pod(i + 2, [Backend(share), Backend(idle, state="idle")],
                        lag=lambda age, lag=load.lag_seconds: lag))
    return Cluster(namespace, name, pods)


class Feeder:
    """Pushes every `interval` seconds; push errors (VictoriaMetrics stopped) are counted, not fatal.
    Each pod's WAL and CPU counters are integrated here across pushes, so a rate the scenario
    changes bends the counter instead of moving it."""

    def __init__(self, vm: VictoriaMetrics, cnpg: CnpgStandIn,
                 redis_replicas: Callable[[str, str], int | None] | None = None, interval: float = 1.0):
        self.vm = vm
        self.cnpg = cnpg
        # (namespace, name) -> the RedisFailover's spec.redis.replicas (None: no such object).
        self.redis_replicas = redis_replicas
        self.interval = interval
        self.loads: dict[tuple[str, str], Load] = {}
        self.redis_loads: dict[tuple[str, str], RedisLoad] = {}
        self._offsets: dict[tuple[str, str], float] = {}
        self.lock = threading.Lock()
        self.failures = 0
        self._counters: dict[tuple[str, str], Counters] = {}
        self._born: dict[tuple[str, str], float] = {}  # (namespace, pod) -> first rendered
        self._last = time.time()
        # Pushes begun and landed: `settle` waits for one begun after it was called.
        self._pushes = threading.Condition()
        self._begun = 0
        self._landed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cnpg-series-feeder", daemon=True)

    def start(self) -> "Feeder":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def set(self, namespace: str, cluster: str, **changes) -> None:
        with self.lock:
            load = self.loads.setdefault((namespace, cluster), Load())
            for k, v in changes.items():
                setattr(load, k, v)

    def set_redis(self, namespace: str, name: str, **changes) -> None:
        """Changes the load of the RedisFailover `name` (fields of RedisLoad)."""
        with self.lock:
            load = self.redis_loads.setdefault((namespace, name), RedisLoad())
            for k, v in changes.items():
                setattr(load, k, v)

    def settle(self, timeout: float = 15) -> None:
        """Returns once a push rendered after this call has landed, so no push carrying values
        from before a `set` is still in flight (deleting history before that lets the old value
        land after the delete)."""
        with self._pushes:
            target = self._begun + 1
            if not self._pushes.wait_for(lambda: self._landed >= target, timeout):
                raise TimeoutError(f"no feeder push landed within {timeout}s ({self.failures} failed)")

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            with self._pushes:
                self._begun += 1
                push = self._begun
            try:
                self.vm.import_prom(self.render(time.time()))
            except (requests.RequestException, ApiError):  # VictoriaMetrics or the apiserver
                self.failures += 1
                continue
            with self._pushes:
                self._landed = push
                self._pushes.notify_all()

    def render(self, now: float) -> str:
        dt, self._last = now - self._last, now
        with self.lock:
            loads = {key: replace(load) for key, load in self.loads.items()}
        clusters = [cluster(ns, name, n, load, self._restoring(ns, name, n, load, now))
                    for (ns, name), load in loads.items()
                    for n in [self.cnpg.instances(ns, name) or 1]]
        for c in clusters:
            for p in c.pods:
                key = (c.namespace, c.pod_name(p))
                # A pod seen for the first time starts its counters now.
                self._counters[key] = self._counters[key].advance(p, dt) if key in self._counters else Counters()
        return render_at(clusters, now, self._counters) + self._render_redis(dt, now)

    def _render_redis(self, dt: float, now: float) -> str:
        with self.lock:
            loads = {key: replace(load) for key, load in self.redis_loads.items()}
        failovers = [failover(ns, name, n, load) for (ns, name), load in loads.items()
                     for n in [self.redis_replicas(ns, name) or 1]]
        for key, load in loads.items():
            before = self._offsets.get(key)
            self._offsets[key] = (redis_series.OFFSET_ORIGIN if before is None
                                  else before + load.write_bytes_per_s * dt)
        return redis_series.render_at(failovers, now, self._offsets) if failovers else ""

    def _restoring(self, ns: str, name: str, instances: int, load: Load, now: float) -> set[int]:
        """The standbys from `load.warmup_from_pod` on that appeared less than
        `load.warmup_seconds` ago."""
        born = {i: self._born.setdefault((ns, f"{name}-{i}"), now) for i in range(1, instances + 1)}
        first = max(2, load.warmup_from_pod or instances + 1)
        return {i for i in range(first, instances + 1) if now - born[i] < load.warmup_seconds}
