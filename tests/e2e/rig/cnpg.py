"""A stand-in for the CloudNativePG operator doing only what the HPA and the scaler need: it keeps
each Cluster's status.instances and status.selector in step with spec.instances (as CNPG >= 1.28.4
does), reports readyInstances (capped per Cluster by `cap_ready`, to play a scale-up that cannot
converge) with CNPG's `Ready` condition and its lastTransitionTime, and records every spec.instances value the API server ever holds, with the field managers that own
the field at that moment, so scenarios can assert on the history (who changed the count, how low
it went). It watches the Clusters: every write is seen, however briefly a value lived."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests

from .kube import ApiError, Kube

API = "postgresql.cnpg.io/v1"
# The HPA writes through the scale subresource; its managedFields entry says so.
SCALE = "scale"


def selector(name: str) -> str:
    # Cluster.GetInstancesSelector(): labels sorted by key.
    return f"cnpg.io/cluster={name},cnpg.io/podRole=instance"


@dataclass(frozen=True)
class Sample:
    t: float                      # monotonic time the stand-in saw the value
    value: int | None             # spec.instances (None: absent)
    owners: tuple[str, ...]       # managers owning spec.instances, "name[/subresource]"

    @property
    def by_hpa(self) -> bool:
        """Written by the HPA: the scale subresource's manager is the field's only owner (an
        Update that changes a value takes the field from every other manager)."""
        return len(self.owners) == 1 and self.owners[0].endswith("/" + SCALE)


def instance_owners(cluster: dict) -> tuple[str, ...]:
    owners = []
    for entry in cluster["metadata"].get("managedFields") or []:
        if "f:instances" in (entry.get("fieldsV1") or {}).get("f:spec", {}):
            sub = entry.get("subresource")
            owners.append(entry.get("manager", "?") + (f"/{sub}" if sub else ""))
    return tuple(sorted(owners))


class CnpgStandIn:
    def __init__(self, kube: Kube, watch_seconds: int = 5):
        # Its own connection: a watch holds one open for `watch_seconds` at a time.
        self.kube = Kube(kube.server, kube.ca, *kube.session.cert)
        self.watch_seconds = watch_seconds
        self.lock = threading.Lock()
        self.history: dict[tuple[str, str], list[Sample]] = {}
        # (namespace, name) -> most instances that become ready (unset: all of them)
        self.ready_cap: dict[tuple[str, str], int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cnpg-stand-in", daemon=True)

    def start(self) -> "CnpgStandIn":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.watch_seconds + 5)

    def instances(self, namespace: str, name: str) -> int | None:
        with self.lock:
            h = self.history.get((namespace, name))
            return h[-1].value if h else None

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

    def samples(self, namespace: str, name: str) -> list[Sample]:
        with self.lock:
            return list(self.history.get((namespace, name), []))

    def series(self, namespace: str, name: str) -> list[tuple[float, int | None]]:
        return [(s.t, s.value) for s in self.samples(namespace, name)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.kube.request("GET", self.kube.path(API, "Cluster"))
                for c in listing["items"]:
                    self.observe(c)
                self._watch(listing["metadata"]["resourceVersion"])
            except (ApiError, OSError, KeyError, ValueError, requests.RequestException):
                self._stop.wait(0.5)  # CRD not there yet, watch expired: list again

    def _watch(self, version: str) -> None:
        while not self._stop.is_set():
            for event in self.kube.watch(API, "Cluster", version, self.watch_seconds):
                if event["type"] == "ERROR":
                    return  # e.g. 410 Gone: relist
                version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.observe(event["object"])

    def observe(self, c: dict) -> None:
        md, spec, status = c["metadata"], c.get("spec", {}), c.get("status", {})
        key = (md["namespace"], md["name"])
        want = spec.get("instances")
        with self.lock:
            h = self.history.setdefault(key, [])
            if not h or h[-1].value != want:
                h.append(Sample(time.monotonic(), want, instance_owners(c)))
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
