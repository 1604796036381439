"""A stand-in for the CloudNativePG operator doing only what the HPA needs: it keeps each Cluster's
status.instances and status.selector in step with spec.instances (as CNPG >= 1.28.4 does), and
records every spec.instances value it sees so scenarios can assert on the history."""

from __future__ import annotations

import threading
import time

from .kube import ApiError, Kube

API = "postgresql.cnpg.io/v1"


def selector(name: str) -> str:
    # Cluster.GetInstancesSelector(): labels sorted by key.
    return f"cnpg.io/cluster={name},cnpg.io/podRole=instance"


class CnpgStandIn:
    def __init__(self, kube: Kube, interval: float = 0.5):
        self.kube = kube
        self.interval = interval
        self.lock = threading.Lock()
        # (namespace, name) -> [(monotonic time, spec.instances or None when absent)]
        self.history: dict[tuple[str, str], list[tuple[float, int | None]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cnpg-stand-in", daemon=True)

    def start(self) -> "CnpgStandIn":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def instances(self, namespace: str, name: str) -> int | None:
        with self.lock:
            h = self.history.get((namespace, name))
            return h[-1][1] if h else None

    def series(self, namespace: str, name: str) -> list[tuple[float, int | None]]:
        with self.lock:
            return list(self.history.get((namespace, name), []))

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync_once()
            except (ApiError, OSError, KeyError):
                pass  # CRD not there yet or apiserver restarting: try again next tick

    def sync_once(self) -> None:
        for c in self.kube.list(API, "Cluster"):
            md, spec, status = c["metadata"], c.get("spec", {}), c.get("status", {})
            key = (md["namespace"], md["name"])
            want = spec.get("instances")
            with self.lock:
                h = self.history.setdefault(key, [])
                if not h or h[-1][1] != want:
                    h.append((time.monotonic(), want))
            count = want if want is not None else 1  # CNPG's default
            desired = {"instances": count, "readyInstances": count,
                       "selector": selector(md["name"]),
                       "currentPrimary": f"{md['name']}-1", "targetPrimary": f"{md['name']}-1",
                       "instanceNames": [f"{md['name']}-{i}" for i in range(1, count + 1)],
                       "phase": "Cluster in healthy state"}
            if any(status.get(k) != v for k, v in desired.items()):
                self.kube.merge_patch(API, "Cluster", md["name"], {"status": desired},
                                      namespace=md["namespace"], sub="status")
