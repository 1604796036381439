"""The real CloudNativePG operator on the node: built from its Go module (cmd/manager) into an image
holding /manager, deployed from the upstream manifests of the module's config/ (CRDs, RBAC, manager,
webhooks) rendered here the way config/default's kustomization would (namespace cnpg-system, the
cnpg- name prefix, its vars and its webhook-port patch), with the operator issuing its own webhook
certificates (its default without cert-manager). Instances run a PostgreSQL image built from
Debian's postgresql-15 by mmdebstrap (tests/node/setup.sh)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path

from testkit import wait_until
from rig import install_crds
from rig.kube import Kube, load_yaml_docs

from . import images
from .node import Node

NAMESPACE, PREFIX = "cnpg-system", "cnpg-"
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}
# config/default's resources: the RBAC the manager binds, the manager and its default monitoring
# queries, the webhooks and their Service (the editor/viewer roles are helpers for people).
MANIFESTS = ("role.yaml", "role_binding.yaml", "manager.yaml", "default-monitoring.yaml",
             "manifests.yaml", "service.yaml")
POSTGRES_UID = 26
PSQL = "/usr/lib/postgresql/15/bin/psql"
# The suite's Cluster: made by test_2_cnpg.py, autoscaled by test_3_package.py.
CLUSTER_NAMESPACE, CLUSTER = "db", "pg"
# The suite's read-write Pooler in front of it (test_4_pooler.py), as a chart names it.
POOLER = f"{CLUSTER}-pooler-rw"
STORAGE_CLASS = "cozy-local"


def render(config: Path, operator_image: str) -> list[dict]:
    """The operator's objects from the upstream files, as `kustomize build config/default` gives
    them, with the operator image built here (never pulled)."""
    docs = [d for f in MANIFESTS for d in load_yaml_docs((config / f).read_text())]
    deployment = f"{PREFIX}controller-manager"
    variables = {"OPERATOR_IMAGE_NAME": operator_image, "OPERATOR_DEPLOYMENT_NAME": deployment,
                 "DEFAULT_MONITORING_CONFIGMAP": f"{PREFIX}default-monitoring"}
    out = []
    for d in docs:
        md = d["metadata"]
        if d["kind"] == "Namespace":
            md["name"] = NAMESPACE
        else:
            md["name"] = PREFIX + md["name"]
        if d["kind"] not in CLUSTER_SCOPED:
            md["namespace"] = NAMESPACE
        if d["kind"] == "ClusterRoleBinding":
            d["roleRef"]["name"] = PREFIX + d["roleRef"]["name"]
        if d["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in d["webhooks"]:
                svc = hook["clientConfig"]["service"]
                svc["name"], svc["namespace"] = PREFIX + svc["name"], NAMESPACE
        if d["kind"] == "Deployment":
            spec = d["spec"]["template"]["spec"]
            spec["serviceAccountName"] = PREFIX + spec["serviceAccountName"]
            [c] = spec["containers"]
            c["ports"].append({"containerPort": 9443, "name": "webhook-server", "protocol": "TCP"})
            c["image"], c["imagePullPolicy"] = operator_image, "Never"
        text = json.dumps(d)
        for k, v in variables.items():
            text = text.replace(f"$({k})", v)
        out.append(json.loads(text))
    return out


class Operator:
    def __init__(self, node: Node, kube: Kube, manager: Path, config: Path, pg_rootfs: Path):
        self.node, self.kube = node, kube
        self.manager, self.config, self.pg_rootfs = manager, config, pg_rootfs

    def install(self) -> "Operator":
        # As upstream's image: /manager, plus a copy per architecture under /operator, which the
        # operator hashes into every Cluster's status.availableArchitectures (it refuses to write
        # a status without its own architecture there: "invalid architecture: amd64").
        self.image = self.node.add_image("cnpg-operator", images.Image(
            "cozy.local/cloudnative-pg", files={"/manager": self.manager, "/operator/manager_amd64": self.manager},
            entrypoint=["/manager"]))
        # CNPG reads the PostgreSQL major version from the image's tag; it runs initdb, pg_ctl,
        # postgres, pg_basebackup, pg_controldata and pg_rewind from PATH as uid 26.
        self.pg_image = self.node.add_image("postgresql", images.Image(
            "cozy.local/postgresql", rootfs_tar=self.pg_rootfs, tag_prefix="15",
            env=["PATH=/usr/lib/postgresql/15/bin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            user=str(POSTGRES_UID)))
        install_crds(self.kube, sorted(self.config.glob("postgresql.cnpg.io_*.yaml")))
        for doc in render(self.config, self.image):
            self.kube.apply(doc)

        def ready():
            d = self.kube.get("apps/v1", "Deployment", f"{PREFIX}controller-manager", NAMESPACE) or {}
            return d.get("status", {}).get("availableReplicas") == 1
        wait_until(ready, timeout=300, interval=1, what="the CNPG operator available")

        def ca_injected():
            hooks = self.kube.get("admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration",
                                  f"{PREFIX}validating-webhook-configuration")
            return all(h["clientConfig"].get("caBundle") for h in hooks["webhooks"])
        wait_until(ca_injected, timeout=120, interval=1, what="CNPG's CA in its webhook configurations")
        return self


def provide_volumes(kube: Kube, directory: Path, count: int, size: str = "1Gi") -> None:
    """Static PersistentVolumes for the instances' PVCs: directories on the node owned by the
    PostgreSQL uid (a host-path volume gets no fsGroup ownership change), in a StorageClass that
    provisions nothing."""
    kube.apply({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": STORAGE_CLASS}, "provisioner": "kubernetes.io/no-provisioner",
                "reclaimPolicy": "Retain", "volumeBindingMode": "Immediate"})
    for i in range(count):
        path = directory / f"pv-{i}"
        path.mkdir(parents=True, mode=0o700)
        os.chown(path, POSTGRES_UID, POSTGRES_UID)
        kube.apply({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"{STORAGE_CLASS}-{i}"},
                    "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                             "storageClassName": STORAGE_CLASS, "persistentVolumeReclaimPolicy": "Retain",
                             "hostPath": {"path": str(path), "type": "Directory"}}})


def pod_monitor_scrape_config(cp, namespace: str, cluster: str, interval: str = "5s") -> dict:
    """The scrape job prometheus-operator (or VictoriaMetrics' operator) generates from the
    PodMonitor CNPG creates for a Cluster with `enablePodMonitor` (pkg/specs/podmonitor.go: pods
    labelled cnpg.io/cluster=<name> and cnpg.io/podRole=instance, their port `metrics`)."""
    return pod_monitor_job(cp, namespace, cluster, {"cnpg.io/cluster": cluster, "cnpg.io/podRole": "instance"},
                            interval)


def pooler_pod_monitor_scrape_config(cp, namespace: str, pooler: str, interval: str = "5s") -> dict:
    """The job of the PodMonitor CNPG creates for a Pooler with `monitoring.enablePodMonitor`
    (pkg/specs/pgbouncer/podmonitor.go: pods labelled cnpg.io/poolerName=<name>, port `metrics`)."""
    return pod_monitor_job(cp, namespace, pooler, {"cnpg.io/poolerName": pooler}, interval)


def pod_monitor_job(cp, namespace: str, name: str, labels: dict[str, str], interval: str) -> dict:
    """A PodMonitor's scrape job, with the target labels such a job gives: namespace, pod,
    container, endpoint, job <namespace>/<name>."""
    def keep(label: str, value: str) -> dict:
        meta = "__meta_kubernetes_pod_label_" + label.replace(".", "_").replace("/", "_")
        present = "__meta_kubernetes_pod_labelpresent_" + label.replace(".", "_").replace("/", "_")
        return {"source_labels": [meta, present], "regex": f"({value});true", "action": "keep"}
    return {
        "job_name": f"podMonitor/{namespace}/{name}/0", "scrape_interval": interval,
        "kubernetes_sd_configs": [{
            "role": "pod", "api_server": cp.server, "namespaces": {"names": [namespace]},
            "tls_config": {"ca_file": str(cp.ca.cert), "cert_file": str(cp.admin.cert),
                           "key_file": str(cp.admin.key)}}],
        "relabel_configs": [
            {"source_labels": ["__meta_kubernetes_pod_phase"], "regex": "(Failed|Succeeded)", "action": "drop"},
            *(keep(label, value) for label, value in labels.items()),
            {"source_labels": ["__meta_kubernetes_pod_container_port_name"], "regex": "metrics", "action": "keep"},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"target_label": "job", "replacement": f"{namespace}/{name}"},
            {"target_label": "endpoint", "replacement": "metrics"}]}


def sql(kube, service: str, query: str) -> list[list[str]]:
    """Runs `query` as the superuser through the Cluster's `<name>-<service>` Service (a ClusterIP
    kube-proxy routes from the node's namespace), or at a pod's address, with the host's psql."""
    secret = kube.get("v1", "Secret", f"{CLUSTER}-superuser", CLUSTER_NAMESPACE)["data"]
    user, password = (base64.b64decode(secret[k]).decode() for k in ("username", "password"))
    ip = service if service[0].isdigit() else kube.get("v1", "Service", f"{CLUSTER}-{service}", CLUSTER_NAMESPACE)["spec"]["clusterIP"]

    def run():
        out = subprocess.run([PSQL, "-h", ip, "-U", user, "-d", "postgres", "-AtF", "|", "-c", query],
                             env={**os.environ, "PGPASSWORD": password, "PGCONNECT_TIMEOUT": "10"},
                             capture_output=True, text=True, timeout=60)
        # The Service's endpoints and kube-proxy's rules trail an instance's readiness by a moment:
        # a refused connection is retried, as clients do.
        if out.returncode and "Connection refused" in out.stderr:
            raise ConnectionRefusedError(out.stderr.strip())
        return out
    out = wait_until(run, timeout=30, interval=1, retry=(ConnectionRefusedError,), what=f"psql at {ip}")
    assert out.returncode == 0, out.stderr
    return [line.split("|") for line in out.stdout.splitlines()]
