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
                sessions = [("app", "active", share), ("app", "idle", 3),
                            ("postgres", "active", 2), ("streaming_replica", "active", 1),
                            ("cnpg_metrics_exporter", "active", 1)]
                if primary:
                    sessions[0] = ("app", "active", 40)  # primary load never counts as read load
                for user, state, value in sessions:
                    lbl = _labels(**base, datname="app", usename=user, application_name="web",
                                  state=state)
                    lines.append(f"cnpg_backends_total{lbl} {value} {ms}")
                cpu = 0.05 * now
                lines.append(f"container_cpu_usage_seconds_total{_labels(**base, container='postgres')} {cpu} {ms}")
        return "\n".join(lines) + "\n"
