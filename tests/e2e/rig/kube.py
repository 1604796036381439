"""A small Kubernetes API client over requests (client certificate auth), enough for the scenarios:
discovery-based paths, server-side apply, get/list/patch/delete and the scale and status subresources."""

from __future__ import annotations

import json
from typing import Iterable, Iterator

import requests
import yaml


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, response: requests.Response):
        self.status = response.status_code
        super().__init__(f"{method} {path}: HTTP {self.status}: {response.text[:600]}")


class Kube:
    def __init__(self, server: str, ca: str, cert: str, key: str):
        self.server = server.rstrip("/")
        self.session = requests.Session()
        # Passed on every request: requests lets REQUESTS_CA_BUNDLE override a session's verify.
        self.ca = ca
        self.session.cert = (cert, key)
        self._resources: dict[str, dict[str, tuple[str, bool]]] = {}

    # --- raw HTTP -------------------------------------------------------------------------
    def request(self, method: str, path: str, body=None, content_type: str = "application/json",
                params: dict | None = None, ok_missing: bool = False):
        data = None if body is None else (body if isinstance(body, str) else json.dumps(body))
        r = self.session.request(method, self.server + path, data=data, params=params,
                                 headers={"Content-Type": content_type}, timeout=30,
                                 verify=self.ca)
        if ok_missing and r.status_code == 404:
            return None
        if r.status_code >= 400:
            raise ApiError(method, path, r)
        if not r.content:
            return None
        return r.json() if "json" in r.headers.get("Content-Type", "") else r.text

    # --- discovery ------------------------------------------------------------------------
    def _group_path(self, api_version: str) -> str:
        return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"

    def resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) for a kind, from discovery; refreshed once on a miss (new CRDs)."""
        for refresh in (False, True):
            if refresh or api_version not in self._resources:
                listing = self.request("GET", self._group_path(api_version), ok_missing=True) or {}
                self._resources[api_version] = {
                    r["kind"]: (r["name"], r["namespaced"])
                    for r in listing.get("resources", []) if "/" not in r["name"]}
            if kind in self._resources[api_version]:
                return self._resources[api_version][kind]
        raise KeyError(f"the apiserver serves no {kind} in {api_version}")

    def path(self, api_version: str, kind: str, namespace: str | None = None,
             name: str | None = None, sub: str | None = None) -> str:
        plural, namespaced = self.resource(api_version, kind)
        p = self._group_path(api_version)
        if namespaced and namespace:
            p += f"/namespaces/{namespace}"
        p += f"/{plural}"
        if name:
            p += f"/{name}"
        if sub:
            p += f"/{sub}"
        return p

    def _obj_path(self, obj: dict, with_name: bool = True) -> str:
        md = obj["metadata"]
        return self.path(obj["apiVersion"], obj["kind"], md.get("namespace"),
                         md["name"] if with_name else None)

    # --- verbs ----------------------------------------------------------------------------
    def get(self, api_version: str, kind: str, name: str, namespace: str | None = None,
            sub: str | None = None):
        return self.request("GET", self.path(api_version, kind, namespace, name, sub),
                            ok_missing=True)

    def list(self, api_version: str, kind: str, namespace: str | None = None,
             selector: str | None = None) -> list[dict]:
        params = {"labelSelector": selector} if selector else None
        return self.request("GET", self.path(api_version, kind, namespace), params=params)["items"]

    def watch(self, api_version: str, kind: str, resource_version: str,
              seconds: int) -> Iterator[dict]:
        """Watch events ({type, object}) of every object of a kind after `resource_version`, for
        at most `seconds` (the server ends the stream then)."""
        path = self.path(api_version, kind)
        params = {"watch": "1", "resourceVersion": resource_version,
                  "timeoutSeconds": str(seconds)}
        with self.session.get(self.server + path, params=params, stream=True, verify=self.ca,
                              timeout=(10, seconds + 10)) as r:
            if r.status_code >= 400:
                raise ApiError("WATCH", path, r)
            for line in r.iter_lines():
                if line:
                    yield json.loads(line)

    def create(self, obj: dict) -> dict:
        return self.request("POST", self._obj_path(obj, with_name=False), obj)

    def apply(self, obj: dict, manager: str = "e2e") -> dict:
        """Server-side apply (force), the way controllers and `kubectl apply --server-side` do."""
        return self.request("PATCH", self._obj_path(obj), obj, "application/apply-patch+yaml",
                            params={"fieldManager": manager, "force": "true"})

    def apply_all(self, objs: Iterable[dict], manager: str = "e2e") -> None:
        for obj in objs:
            self.apply(obj, manager)

    def merge_patch(self, api_version: str, kind: str, name: str, patch: dict,
                    namespace: str | None = None, sub: str | None = None) -> dict:
        return self.request("PATCH", self.path(api_version, kind, namespace, name, sub), patch,
                            "application/merge-patch+json")

    def delete(self, api_version: str, kind: str, name: str, namespace: str | None = None):
        return self.request("DELETE", self.path(api_version, kind, namespace, name),
                            ok_missing=True)

    def ensure_namespace(self, name: str, labels: dict | None = None) -> None:
        self.apply({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": name, "labels": labels or {}}})


def load_yaml_docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]
