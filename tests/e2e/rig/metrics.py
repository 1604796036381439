"""A feeder that pushes synthetic CNPG series every second, shaped by the
Cluster's current spec.instances (pod <cluster>-1 is the primary, the rest are standbys) and by a
load model the scenario changes while the loop runs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests

from vm import VictoriaMetrics

from .cnpg import CnpgStandIn


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


def _labels(**kv) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


class Feeder:
    """Pushes every `interval` seconds; push errors (VictoriaMetrics stopped) are counted, not fatal."""

    def __init__(self, vm: VictoriaMetrics, cnpg: CnpgStandIn, interval: float = 1.0):
        self.vm = vm
        self.cnpg = cnpg
        self.interval = interval
        self.loads: dict[tuple[str, str], Load] = {}
        self.lock = threading.Lock()
        self.failures = 0
        self._wal: dict[tuple[str, str], float] = {}
        self._cpu: dict[tuple[str, str], float] = {}  # (namespace, pod) -> CPU seconds so far
        self._born: dict[tuple[str, str], float] = {}  # (namespace, pod) -> first rendered
        self._last = time.time()
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

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.vm.import_prom(self.render(time.time()))
            except requests.RequestException:
                self.failures += 1

    def render(self, now: float) -> str:
        dt, self._last = now - self._last, now
        ms = int(now * 1000)
        lines: list[str] = []
        with self.lock:
            loads = dict(self.loads)
        for (ns, name), load in loads.items():
            n = self.cnpg.instances(ns, name) or 1
            wal = self._wal.get((ns, name), 1e6) + load.wal_bytes_per_s * dt
            self._wal[(ns, name)] = wal
            standbys = max(n - 1, 0)
            born = {i: self._born.setdefault((ns, f"{name}-{i}"), now) for i in range(1, n + 1)}
            restoring = {i for i in range(max(2, load.warmup_from_pod or n + 1), n + 1)
                         if now - born[i] < load.warmup_seconds}
            serving = max(standbys - len(restoring), 1)
            for i in range(1, n + 1):
                base = {"namespace": ns, "pod": f"{name}-{i}"}
                primary = i == 1
                lines.append(f"cnpg_pg_replication_in_recovery{_labels(**base)} {0 if primary else 1} {ms}")
                lines.append(f"cnpg_pg_replication_lag{_labels(**base)} {0 if primary else load.lag_seconds} {ms}")
                if primary:
                    lines.append(f"cnpg_collector_wal_bytes{_labels(**base, stats_reset='2026-01-01T00:00:00Z')} {wal} {ms}")
                # Client sessions on standbys (spread evenly, remainder on the first ones), plus
                # CNPG's own sessions that must never count as load.
                share = 0 if primary or not standbys else (
                    load.connections // standbys + (1 if (i - 2) < load.connections % standbys else 0))
                idle = 3 + (0 if primary or not standbys else load.idle_connections // standbys)
                sessions = [("app", "active", share), ("app", "idle", idle),
                            ("postgres", "active", 2), ("streaming_replica", "active", 1),
                            ("cnpg_metrics_exporter", "active", 1)]
                if primary:
                    sessions[0] = ("app", "active", 40)  # primary load never counts as read load
                for user, state, value in sessions:
                    lbl = _labels(**base, datname="app", usename=user, application_name="web",
                                  state=state)
                    lines.append(f"cnpg_backends_total{lbl} {value} {ms}")
                if load.max_connections is not None:
                    lines.append(f"cnpg_pg_settings_setting{_labels(**base, name='max_connections')} "
                                 f"{load.max_connections} {ms}")
                if load.read_cpu_millicores is None:
                    cpu = 0.05 * now
                else:
                    lines.append(f"cnpg_pg_replication_is_wal_receiver_up{_labels(**base)} "
                                 f"{int(not primary and i not in restoring)} {ms}")
                    millicores = (50 if primary else load.restore_cpu_millicores if i in restoring
                                  else load.read_cpu_millicores / serving)
                    cpu = self._cpu.get((ns, base["pod"]), 0.0) + millicores / 1000 * dt
                    self._cpu[(ns, base["pod"])] = cpu
                lines.append(f"container_cpu_usage_seconds_total{_labels(**base, container='postgres')} {cpu} {ms}")
        return "\n".join(lines) + "\n"
