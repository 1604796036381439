"""Every value a count field of one kind ever held, as the API server's watch tells it: each change
recorded with the field managers that own the field at that resourceVersion, so a scenario can
assert who changed a count and how low it went, however briefly a value lived. The CNPG stand-in
(cnpg.py) is one; the flip matrix watches a RedisFailover's and a ScaleAdapter's count with it."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import requests

from .kube import ApiError, Kube

# The HPA writes through the scale subresource; its managedFields entry says so.
SCALE = "scale"


@dataclass(frozen=True)
class Sample:
    t: float                      # monotonic time the watcher saw the value
    value: int | None             # the count (None: absent, or the object deleted)
    owners: tuple[str, ...]       # managers owning the field, "name[/subresource]"

    def only_by(self, manager: str) -> bool:
        """Written by `manager` alone: an Update that changes a value takes the field from every
        other manager, so a change whose only owner is `manager` was that manager's."""
        return self.owners == (manager,)

    @property
    def by_hpa(self) -> bool:
        """Written by the HPA: the scale subresource's manager is the field's only owner."""
        return len(self.owners) == 1 and self.owners[0].endswith("/" + SCALE)


def field_owners(obj: dict, path: tuple[str, ...]) -> tuple[str, ...]:
    """The managers owning spec.<path> of `obj`, sorted, each "manager[/subresource]"."""
    owners = []
    for entry in obj["metadata"].get("managedFields") or []:
        fields = (entry.get("fieldsV1") or {}).get("f:spec", {})
        for key in path[:-1]:
            fields = fields.get(f"f:{key}", {})
        if f"f:{path[-1]}" in fields:
            sub = entry.get("subresource")
            owners.append(entry.get("manager", "?") + (f"/{sub}" if sub else ""))
    return tuple(sorted(owners))


def spec_value(obj: dict, path: tuple[str, ...]):
    value = obj.get("spec", {})
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


class CountHistory:
    """Watches every object of `kind` and records spec.<path> at each change. With `deletions`, an
    object's deletion is recorded too, as the value None with no owner."""

    def __init__(self, kube: Kube, api: str, kind: str, path: tuple[str, ...],
                 deletions: bool = False, watch_seconds: int = 5):
        # Its own connection: a watch holds one open for `watch_seconds` at a time.
        self.kube = Kube(kube.server, kube.ca, *kube.session.cert)
        self.api, self.kind, self.path, self.deletions = api, kind, path, deletions
        self.watch_seconds = watch_seconds
        self.lock = threading.Lock()
        self.history: dict[tuple[str, str], list[Sample]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{kind}-history", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.watch_seconds + 5)

    def count(self, namespace: str, name: str) -> int | None:
        """The latest value seen (None: never seen, absent or deleted)."""
        with self.lock:
            h = self.history.get((namespace, name))
            return h[-1].value if h else None

    def samples(self, namespace: str, name: str) -> list[Sample]:
        with self.lock:
            return list(self.history.get((namespace, name), []))

    def series(self, namespace: str, name: str) -> list[tuple[float, int | None]]:
        return [(s.t, s.value) for s in self.samples(namespace, name)]

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                listing = self.kube.request("GET", self.kube.path(self.api, self.kind))
                for obj in listing["items"]:
                    self.observe(obj)
                self._watch(listing["metadata"]["resourceVersion"])
            except (ApiError, OSError, KeyError, ValueError, requests.RequestException):
                self._stop.wait(0.5)  # CRD not there yet, watch expired: list again

    def _watch(self, version: str) -> None:
        while not self._stop.is_set():
            for event in self.kube.watch(self.api, self.kind, version, self.watch_seconds):
                if event["type"] == "ERROR":
                    return  # e.g. 410 Gone: relist
                version = event["object"]["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    self.observe(event["object"])
                elif event["type"] == "DELETED" and self.deletions:
                    self.record(event["object"], None, ())

    def observe(self, obj: dict) -> None:
        self.record(obj, spec_value(obj, self.path), field_owners(obj, self.path))

    def record(self, obj: dict, value, owners: tuple[str, ...]) -> None:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        with self.lock:
            h = self.history.setdefault(key, [])
            if not h or h[-1].value != value:
                h.append(Sample(time.monotonic(), value, owners))
