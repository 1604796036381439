"""In-memory Kubernetes API for the webhook tests: kmock's KubernetesEmulator plus the one
API-server rule the webhook relies on and kmock lacks, optimistic concurrency.

Every create/update stamps a fresh metadata.resourceVersion; an update (PATCH/PUT) whose body
carries a different metadata.resourceVersion gets 409 Conflict, as kube-apiserver does.

--race NS=SHARD simulates another webhook replica winning a race: on the first write to
namespace NS, the label internal.cozystack.io/flux-shard=SHARD lands first (new
resourceVersion), so the webhook's conditional write conflicts and it must adopt SHARD.

--stall NS makes every read of namespace NS hang for a minute (a slow API server).

Usage: python emulator.py --port N [--race tenant-x=shard1] [--stall tenant-y]   (prints "ready" when serving)
"""
import argparse
import asyncio
import itertools

import aiohttp.web
import kmock
from kmock._internal import parsing

LABEL = "internal.cozystack.io/flux-shard"


def status(code: int, reason: str, message: str) -> aiohttp.web.Response:
    """A metav1.Status error body, which clients parse (kmock 0.8 answers its errors with a
    500 and a traceback instead)."""
    body = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return aiohttp.web.json_response(body, status=code)


def conflict(name: str, want: str, have: str) -> aiohttp.web.Response:
    return status(409, "Conflict", f"Operation cannot be fulfilled on {name}: resourceVersion {want} is stale (now {have})")


def parse_path(path: str) -> parsing.ParsedPath:
    """kmock 0.8 reads /api/v1/namespaces[/NAME] as a namespaced path and fails; route the
    Namespace resource itself, leave every other path to kmock."""
    parts = path.strip("/").split("/")
    if parts[:3] == ["api", "v1", "namespaces"] and len(parts) <= 4:
        return parsing.ParsedPath("", "v1", "namespaces", None, parts[3] if len(parts) == 4 else None, None)
    return original_parse_path(path)


original_parse_path = parsing.parse_path
parsing.parse_path = parse_path


class OccEmulator(kmock.KubernetesEmulator):
    def __init__(self, races: dict[str, str], stalls: set[str], **kwargs):
        super().__init__(**kwargs)
        self.stalls = stalls
        self.versions = itertools.count(1000)
        self.write_lock = asyncio.Lock()
        self.races = dict(races)

    async def _handle(self, request):
        try:
            return await self._handle_occ(request)
        except kmock.KubernetesError as error:
            reason = "NotFound" if error.status == 404 else "AlreadyExists" if error.status == 409 else "InternalError"
            return status(error.status, reason, error.message)

    async def _handle_occ(self, request):
        if request.action == kmock.action.FETCH and request.name in self.stalls:
            await asyncio.sleep(60)
        if request.resource is None or request.action not in (kmock.action.CREATE, kmock.action.UPDATE):
            return await super()._handle(request)
        # Writes are serialised so the version check and the write are atomic.
        async with self.write_lock:
            if request.action == kmock.action.UPDATE and isinstance(request.data, dict):
                key = (request.resource, request.namespace, request.name)
                race = self.races.pop(request.name, None) if request.resource.plural == "namespaces" else None
                if race is not None and key in self._objects:
                    self._objects[key].patch({"metadata": {"labels": {LABEL: race}, "resourceVersion": self.next()}})
                want = request.data.get("metadata", {}).get("resourceVersion")
                if want is not None and key in self._objects:
                    have = self._objects[key].get("metadata", {}).get("resourceVersion")
                    if have != want:
                        return conflict(request.name, want, have)
            if isinstance(request.data, dict):
                request.data.setdefault("metadata", {})["resourceVersion"] = self.next()
            return await super()._handle(request)

    def next(self) -> str:
        return str(next(self.versions))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--race", action="append", default=[], help="NS=SHARD")
    parser.add_argument("--stall", action="append", default=[], help="NS")
    args = parser.parse_args()
    races = dict(r.split("=", 1) for r in args.race)
    emulator = OccEmulator(races, set(args.stall))
    emulator.resources.load_bundled()
    emulator.resources["helm.toolkit.fluxcd.io/v2/helmreleases"] = {"kind": "HelmRelease", "namespaced": True}
    async with kmock.Server(emulator, port=args.port):
        print("ready", flush=True)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
