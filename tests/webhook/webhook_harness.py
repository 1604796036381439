"""Starts what the webhook tests need, on 127.0.0.1 and free ports, and cleans up:
the in-memory Kubernetes API (emulator.py, kmock), throwaway TLS certificates (openssl CLI),
and `scaler webhook` itself. Also builds AdmissionReview bodies and talks to the API."""
import json
import pathlib
import sys
import uuid

import requests

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lib"))  # testkit
import promtext  # noqa: E402
from testkit import CA, Proc, cargo_bin, free_port, wait_until  # noqa: E402

SCALER = cargo_bin("scaler")
SHARD_KEY = "sharding.fluxcd.io/key"
NS_LABEL = "internal.cozystack.io/flux-shard"
HR_API = "/apis/helm.toolkit.fluxcd.io/v2"


# Only these mean "not up yet" while polling; any other error fails the test at once.
TRANSIENT = (requests.RequestException, OSError)


def make_certs(directory: pathlib.Path, cn: str = "localhost") -> dict:
    """A throwaway CA (kept across calls, so a rotation stays trusted) and a server certificate for
    127.0.0.1/localhost signed by it, both files replaced by rename as a Secret volume update does."""
    ca = CA(directory, "webhook-test")
    pair = ca.issue("tls", cn, hosts=("localhost", "127.0.0.1"))
    return {"ca": ca.cert, "cert": pair.cert, "key": pair.key}


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
        wait_until(lambda: requests.get(self.url + "/api/v1/namespaces", timeout=1).ok, what="emulator",
                   retry=TRANSIENT)
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
        bins = rig.Binaries(rig.binary("etcd", v["ETCD_VERSION"]), rig.binary("kube-apiserver", v["KUBE_VERSION"]),
                            controller_manager=None)
        self.group = rig.Group(tmp)
        cp = rig.ControlPlane(bins, tmp, self.group)
        try:
            cp.start_apiserver()  # the webhook needs no controllers
            rig.install_crds(cp.kube, rig.upstream_crd_files("helm-controller"))
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
        args = [str(SCALER), "webhook", "--listen", f"127.0.0.1:{self.port}",
                "--admin-listen", f"127.0.0.1:{self.admin_port}", "--tls-cert", str(self.certs["cert"]),
                "--tls-key", str(self.certs["key"]), "--shards", str(shards), *extra]
        self.proc = Proc(args, tmp / f"webhook-{self.port}.log", env={"KUBECONFIG": str(emulator.kubeconfig)})
        self.session = requests.Session()
        # Otherwise REQUESTS_CA_BUNDLE from the environment silently replaces `verify`.
        self.session.trust_env = False
        self.session.verify = str(self.certs["ca"])
        try:
            wait_until(lambda: requests.get(self.admin + "/readyz", timeout=1).status_code == 200,
                       what="webhook /readyz", retry=TRANSIENT)
        except TimeoutError:
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
        """Samples as {'name{labels}': value}, labels in the order the webhook writes them."""
        def key(name: str, labels: dict) -> str:
            return name + ("{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}" if labels else "")
        return {key(name, labels): value for name, labels, value in promtext.scrape(self.admin + "/metrics")}


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
