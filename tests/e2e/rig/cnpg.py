"""A stand-in for the CloudNativePG operator doing only what the HPA and the scaler need: it keeps
each Cluster's status.instances and status.selector in step with spec.instances (as CNPG >= 1.28.4
does), reports readyInstances (capped per Cluster by `cap_ready`, to play a scale-up that cannot
converge) with CNPG's `Ready` condition and its lastTransitionTime, and records every spec.instances
value the API server ever holds, with the field managers that own the field at that moment
(history.py), so scenarios can assert on the history (who changed the count, how low it went). It
watches the Clusters: every write is seen, however briefly a value lived."""

from __future__ import annotations

import time

from .history import SCALE, CountHistory, Sample
from .kube import ApiError, Kube

API = "postgresql.cnpg.io/v1"
__all__ = ["API", "SCALE", "CnpgStandIn", "Sample", "selector"]


def selector(name: str) -> str:
    # Cluster.GetInstancesSelector(): labels sorted by key.
    return f"cnpg.io/cluster={name},cnpg.io/podRole=instance"


class CnpgStandIn(CountHistory):
    def __init__(self, kube: Kube, watch_seconds: int = 5):
        super().__init__(kube, API, "Cluster", ("instances",), watch_seconds=watch_seconds)
        # (namespace, name) -> most instances that become ready (unset: all of them)
        self.ready_cap: dict[tuple[str, str], int] = {}

    def instances(self, namespace: str, name: str) -> int | None:
        return self.count(namespace, name)

    def cap_ready(self, namespace: str, name: str, most: int | None) -> None:
        """At most `most` instances of the Cluster become ready (None: all); applied at once."""
        with self.lock:
            if most is None:
                self.ready_cap.pop((namespace, name), None)
            else:
                self.ready_cap[(namespace, name)] = most
        cluster = self.kube.get(API, "Cluster", name, namespace)
        if cluster:
            self.observe(cluster)

    def observe(self, c: dict) -> None:
        super().observe(c)
        md, spec, status = c["metadata"], c.get("spec", {}), c.get("status", {})
        key = (md["namespace"], md["name"])
        want = spec.get("instances")
        if "deletionTimestamp" in md:
            return
        count = want if want is not None else 1  # CNPG's default
        with self.lock:
            ready = min(count, self.ready_cap.get(key, count))
        # CNPG's Ready condition: its lastTransitionTime moves only when its status flips.
        state = "True" if ready >= count else "False"
        old = next((c for c in status.get("conditions", []) if c.get("type") == "Ready"), {})
        since = old.get("lastTransitionTime") if old.get("status") == state else None
        ready_condition = {
            "type": "Ready", "status": state,
            "reason": "ClusterIsReady" if state == "True" else "ClusterIsNotReady",
            "message": "Cluster is Ready" if state == "True" else "Cluster Is Not Ready",
            "lastTransitionTime": since or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        desired = {"instances": count, "readyInstances": ready, "conditions": [ready_condition],
                   "selector": selector(md["name"]),
                   "currentPrimary": f"{md['name']}-1", "targetPrimary": f"{md['name']}-1",
                   "instanceNames": [f"{md['name']}-{i}" for i in range(1, count + 1)],
                   "phase": "Cluster in healthy state"}
        if any(status.get(k) != v for k, v in desired.items()):
            try:
                self.kube.merge_patch(API, "Cluster", md["name"], {"status": desired},
                                      namespace=md["namespace"], sub="status")
            except ApiError as e:
                if e.status != 404:  # deleted meanwhile
                    raise
