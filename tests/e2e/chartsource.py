"""A chart source for helm-controller without a source-controller: a chart tarball (a tiny marker
chart, or a chart directory of this repository) served over HTTP on loopback, published through an
OCIRepository whose status carries the artifact (what source-controller would write)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml

CHART = {
    "Chart.yaml": "apiVersion: v2\nname: marker\nversion: 0.1.0\n",
    "templates/configmap.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-marker\n"
        "data:\n  release: {{ .Release.Name | quote }}\n"),
}


def chart_tarball(name: str, files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{name}/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def chart_files(directory: Path) -> dict[str, str]:
    return {str(f.relative_to(directory)): f.read_text()
            for f in directory.rglob("*") if f.is_file()}


class ChartServer:
    def __init__(self, chart_dir: Path | None = None):
        files = chart_files(chart_dir) if chart_dir else CHART
        meta = yaml.safe_load(files["Chart.yaml"])
        self.name, self.version = meta["name"], meta["version"]
        self.body = chart_tarball(self.name, files)
        body = self.body

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server API
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = (f"http://127.0.0.1:{self.server.server_address[1]}/"
                    f"{self.name}-{self.version}.tgz")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

    def publish(self, kube, namespace: str, name: str) -> None:
        """Creates OCIRepository `name` and marks it Ready with this chart as its artifact."""
        repo = kube.apply({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
                           "metadata": {"name": name, "namespace": namespace},
                           "spec": {"url": f"oci://127.0.0.1/e2e/{self.name}", "interval": "10m",
                                    "ref": {"tag": self.version}}})
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        digest = "sha256:" + hashlib.sha256(self.body).hexdigest()
        kube.merge_patch("source.toolkit.fluxcd.io/v1", "OCIRepository", name, {"status": {
            "observedGeneration": repo["metadata"]["generation"],
            # OCI revisions are <tag>@<digest>; helm-controller checks the tag against the chart.
            "artifact": {"path": f"e2e/{self.name}-{self.version}.tgz", "url": self.url,
                         "revision": f"{self.version}@{digest}", "digest": digest,
                         "lastUpdateTime": now, "size": len(self.body)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                            "message": "stored artifact", "lastTransitionTime": now,
                            "observedGeneration": repo["metadata"]["generation"]}]}},
            namespace=namespace, sub="status")
