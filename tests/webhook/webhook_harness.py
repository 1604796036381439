"""Starts what the webhook tests need, on 127.0.0.1 and free ports, and cleans up:
the in-memory Kubernetes API (emulator.py, kmock), throwaway TLS certificates (openssl CLI),
and `scaler webhook` itself. Also builds AdmissionReview bodies and talks to the API."""
import json
import os
import pathlib
import socket
import subprocess
import sys
import time
import uuid

import requests

ROOT = pathlib.Path(__file__).resolve().parents[2]
HERE = pathlib.Path(__file__).resolve().parent
SCALER = pathlib.Path(os.environ.get("SCALER_BIN", ROOT / "target" / "debug" / "scaler"))
SHARD_KEY = "sharding.fluxcd.io/key"
NS_LABEL = "internal.cozystack.io/flux-shard"
HR_API = "/apis/helm.toolkit.fluxcd.io/v2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(check, timeout=15.0, what="condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
            if last:
                return last
        except (requests.RequestException, OSError) as error:
            last = error
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


def make_certs(directory: pathlib.Path, cn: str = "localhost") -> dict:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    run = lambda *args: subprocess.run(args, cwd=directory, check=True, capture_output=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    if not (directory / "ca.crt").exists():
        run("openssl", "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1", "-subj", "/CN=webhook-test-ca")
    run("openssl", "req", *ec, "-keyout", "tls.key.new", "-out", "tls.csr", "-subj", f"/CN={cn}")
    (directory / "ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("openssl", "x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "tls.crt.new", "-days", "1", "-extfile", "ext")
    # Replace both files by rename, as a Secret volume update does.
    os.replace(directory / "tls.key.new", directory / "tls.key")
    os.replace(directory / "tls.crt.new", directory / "tls.crt")
    return {"ca": directory / "ca.crt", "cert": directory / "tls.crt", "key": directory / "tls.key"}


class Proc:
    """A child process with its output in a log file, killed on stop()."""

    def __init__(self, args, log: pathlib.Path, env=None):
        self.log = log
        self.out = open(log, "wb")
        self.proc = subprocess.Popen(args, stdout=self.out, stderr=subprocess.STDOUT, env=env)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()

    def tail(self, n=40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])


class Emulator:
    """The in-memory Kubernetes API."""

    def __init__(self, tmp: pathlib.Path, races=(), stalls=()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        args = [sys.executable, str(HERE / "emulator.py"), "--port", str(self.port)]
        for race in races:
            args += ["--race", race]
        for ns in stalls:
            args += ["--stall", ns]
        self.proc = Proc(args, tmp / f"emulator-{self.port}.log")
        wait_until(lambda: requests.get(self.url + "/api/v1/namespaces", timeout=1).ok, what="emulator")
        self.kubeconfig = tmp / f"kubeconfig-{self.port}"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "emu",
            "clusters": [{"name": "emu", "cluster": {"server": self.url}}],
            "users": [{"name": "emu", "user": {}}],
            "contexts": [{"name": "emu", "context": {"cluster": "emu", "user": "emu"}}],
        }))

    def stop(self):
        self.proc.stop()

    def create(self, path: str, obj: dict) -> dict:
        r = requests.post(self.url + path, json=obj, timeout=5)
        assert r.ok, r.text
        return r.json()

    def namespace(self, name: str, shard: str | None = None) -> dict:
        labels = {NS_LABEL: shard} if shard else {}
        return self.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": name, "labels": labels}})

    def get_namespace(self, name: str) -> dict:
        r = requests.get(f"{self.url}/api/v1/namespaces/{name}", timeout=5)
        assert r.ok, r.text
        return r.json()

    def namespace_label(self, name: str) -> str | None:
        return self.get_namespace(name)["metadata"].get("labels", {}).get(NS_LABEL)

    def helmrelease(self, ns: str, name: str, shard: str | None = None, labels=None) -> dict:
        labels = dict(labels or {})
        if shard:
            labels[SHARD_KEY] = shard
        return self.create(f"{HR_API}/namespaces/{ns}/helmreleases", hr(ns, name, labels))

    def shard_deployment(self, ns: str, shard: int, ready: int) -> dict:
        name = f"helm-controller-shard{shard}"
        return self.create(f"/apis/apps/v1/namespaces/{ns}/deployments", {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}, "template": {}},
            "status": {"replicas": 1, "readyReplicas": ready},
        })


class ApiServer:
    """etcd + kube-apiserver from the e2e rig (binaries built by tests/e2e/setup.sh) with the
    HelmRelease CRD installed. Raises FileNotFoundError when the binaries are missing."""

    def __init__(self, tmp: pathlib.Path):
        sys.path.insert(0, str(HERE.parent / "e2e"))
        import rig

        v = rig.versions()
        bins = rig.controlplane.Binaries(rig.binary("etcd", v["ETCD_VERSION"]),
                                         rig.binary("kube-apiserver", v["KUBE_VERSION"]), None)
        self.group = rig.procs.Group(tmp)
        cp = rig.controlplane.ControlPlane(bins, tmp, self.group)
        try:
            # Only etcd and kube-apiserver: the webhook needs no controllers. (The rig's start()
            # also runs kube-controller-manager; these steps are its first three.)
            cp._make_pki()
            cp._start_etcd()
            cp._start_apiserver()
            crd = rig.REPO.parent / "shared/crds/helm.toolkit.fluxcd.io_helmreleases.yaml"
            rig.install_crds(cp.kube, [crd])
        except BaseException:
            self.group.stop_all()
            raise
        self.kube = cp.kube
        self.kubeconfig = cp.kubeconfig

    def namespace(self, name: str, shard: str | None = None) -> dict:
        labels = {NS_LABEL: shard} if shard else {}
        return self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})

    def namespace_label(self, name: str) -> str | None:
        return (self.kube.get("v1", "Namespace", name)["metadata"].get("labels") or {}).get(NS_LABEL)

    def stop(self):
        self.group.stop_all()


class Webhook:
    """`scaler webhook` against an Emulator or ApiServer, ready when /readyz says so."""

    def __init__(self, tmp: pathlib.Path, emulator, shards=3, extra=(), certs=None):
        self.certs = certs or make_certs(tmp / "certs")
        self.port, self.admin_port = free_port(), free_port()
        self.url = f"https://127.0.0.1:{self.port}/mutate-helmrelease-shard"
        self.admin = f"http://127.0.0.1:{self.admin_port}"
        env = dict(os.environ, KUBECONFIG=str(emulator.kubeconfig))
        args = [str(SCALER), "webhook", "--listen", f"127.0.0.1:{self.port}",
                "--admin-listen", f"127.0.0.1:{self.admin_port}", "--tls-cert", str(self.certs["cert"]),
                "--tls-key", str(self.certs["key"]), "--shards", str(shards), *extra]
        self.proc = Proc(args, tmp / f"webhook-{self.port}.log", env=env)
        self.session = requests.Session()
        # Otherwise REQUESTS_CA_BUNDLE from the environment silently replaces `verify`.
        self.session.trust_env = False
        self.session.verify = str(self.certs["ca"])
        try:
            wait_until(lambda: requests.get(self.admin + "/readyz", timeout=1).status_code == 200, what="webhook /readyz")
        except AssertionError:
            self.stop()
            raise AssertionError("webhook did not become ready:\n" + self.proc.tail())

    def stop(self):
        self.proc.stop()

    def post(self, body) -> requests.Response:
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return self.session.post(self.url, data=data, headers={"Content-Type": "application/json"}, timeout=10)

    def review(self, body) -> dict:
        r = self.post(body)
        assert r.status_code == 200, r.text
        reply = r.json()
        assert reply["apiVersion"] == "admission.k8s.io/v1" and reply["kind"] == "AdmissionReview"
        assert reply["response"]["uid"] == body["request"]["uid"]
        assert reply["response"]["allowed"] is True
        return reply["response"]

    def metrics(self) -> dict:
        """Samples of the OpenMetrics text as {'name{labels}': value}."""
        text = requests.get(self.admin + "/metrics", timeout=5).text
        samples = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                samples[key] = float(value)
        return samples


def hr(ns: str, name: str, labels: dict | None) -> dict:
    meta = {"name": name, "namespace": ns}
    if labels is not None:
        meta["labels"] = labels
    return {"apiVersion": "helm.toolkit.fluxcd.io/v2", "kind": "HelmRelease", "metadata": meta,
            "spec": {"interval": "5m", "chart": {"spec": {"chart": "postgres",
                     "sourceRef": {"kind": "HelmRepository", "name": "cozystack-apps", "namespace": "cozy-public"}}}}}


def review(operation: str, ns: str, obj: dict | None, kind=("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
           dry_run=False) -> dict:
    """An AdmissionReview as kube-apiserver sends it."""
    group, version, k = kind
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name", "x") if isinstance(meta, dict) else "x"
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": group, "version": version, "kind": k},
        "resource": {"group": group, "version": version, "resource": k.lower() + "s"},
        "requestKind": {"group": group, "version": version, "kind": k},
        "name": name, "namespace": ns, "operation": operation,
        "userInfo": {"username": "system:serviceaccount:cozy-system:cozystack-api", "groups": ["system:authenticated"]},
        "object": obj if operation != "DELETE" else None,
        "oldObject": obj if operation in ("UPDATE", "DELETE") else None,
        "dryRun": dry_run,
        "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patch_of(response: dict) -> list | None:
    import base64
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    return json.loads(base64.b64decode(response["patch"]))
