"""A chart source for helm-controller without a source-controller: a tiny chart tarball served over
HTTP on loopback, published through an OCIRepository whose status carries the artifact (what
source-controller would write)."""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHART = {
    "Chart.yaml": "apiVersion: v2\nname: marker\nversion: 0.1.0\n",
    "templates/configmap.yaml": (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-marker\n"
        "data:\n  release: {{ .Release.Name | quote }}\n"),
}


def chart_tarball() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path, text in CHART.items():
            data = text.encode()
            info = tarfile.TarInfo(f"marker/{path}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class ChartServer:
    def __init__(self):
        self.body = chart_tarball()
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
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/marker-0.1.0.tgz"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()

    def publish(self, kube, namespace: str, name: str) -> None:
        """Creates OCIRepository `name` and marks it Ready with this chart as its artifact."""
        repo = kube.apply({"apiVersion": "source.toolkit.fluxcd.io/v1", "kind": "OCIRepository",
                           "metadata": {"name": name, "namespace": namespace},
                           "spec": {"url": "oci://127.0.0.1/e2e/marker", "interval": "10m",
                                    "ref": {"tag": "0.1.0"}}})
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        digest = "sha256:" + hashlib.sha256(self.body).hexdigest()
        kube.merge_patch("source.toolkit.fluxcd.io/v1", "OCIRepository", name, {"status": {
            "observedGeneration": repo["metadata"]["generation"],
            # OCI revisions are <tag>@<digest>; helm-controller checks the tag against the chart.
            "artifact": {"path": "e2e/marker-0.1.0.tgz", "url": self.url,
                         "revision": f"0.1.0@{digest}", "digest": digest,
                         "lastUpdateTime": now, "size": len(self.body)},
            "conditions": [{"type": "Ready", "status": "True", "reason": "Succeeded",
                            "message": "stored artifact", "lastTransitionTime": now,
                            "observedGeneration": repo["metadata"]["generation"]}]}},
            namespace=namespace, sub="status")
