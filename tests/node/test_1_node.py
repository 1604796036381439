"""The real node: a kubelet on this host runs pods from images built here, CoreDNS answers for
Services, kube-proxy routes Service addresses over the pod network, and nothing leaves the node's
network namespace."""

from __future__ import annotations

import errno
import json
import socket
import subprocess
import time
from pathlib import Path

import pytest

from testkit import wait_until, versions
from noderig import host
from noderig.node import DNS_IP, NETWORK, NODE_NAME, POD_CIDR


def pod(name: str, ns: str, image: str, args: list[str], labels: dict | None = None,
        restart: str = "Always") -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
            "spec": {"restartPolicy": restart, "containers": [{
                "name": "main", "image": image, "imagePullPolicy": "Never", "args": args,
                "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}}}]}}


def wait_pod(kube, ns: str, name: str, phases: tuple[str, ...], timeout: float = 120) -> dict:
    def reached():
        p = kube.get("v1", "Pod", name, ns) or {}
        status = p.get("status", {})
        if status.get("phase") in phases:
            return p
        return None
    return wait_until(reached, timeout=timeout, interval=0.5, what=f"pod {ns}/{name} in {phases}")


def test_node_is_ready_with_the_real_kubelet_and_runtime(node):
    n = node.kube.get("v1", "Node", NODE_NAME)
    info = n["status"]["nodeInfo"]
    assert info["kubeletVersion"] == versions()["KUBE_VERSION"]
    assert info["containerRuntimeVersion"].startswith("containerd://1.")
    assert {a["address"] for a in n["status"]["addresses"]} >= {NETWORK.ip}
    assert node.node.node_ready(node.kube)


def test_coredns_runs_as_a_pod(node):
    def available():
        d = node.kube.get("apps/v1", "Deployment", "coredns", "kube-system") or {}
        return d.get("status", {}).get("availableReplicas") == 1 and d
    wait_until(available, timeout=120, interval=1, what="CoreDNS available")
    [p] = node.kube.list("v1", "Pod", "kube-system", selector="k8s-app=kube-dns")
    assert p["spec"]["containers"][0]["image"] == node.node.images["coredns"]
    assert p["status"]["podIP"].startswith(POD_CIDR.rsplit(".", 2)[0])


def test_a_pod_resolves_a_service_through_coredns_and_reaches_it(node):
    kube, image = node.kube, node.node.images["probe"]
    ns = "probe"
    kube.ensure_namespace(ns)
    # The service-account controller creates the namespace's default account the pods run as.
    wait_until(lambda: kube.get("v1", "ServiceAccount", "default", ns), timeout=30, interval=0.5,
               what=f"ServiceAccount {ns}/default")
    t = time.monotonic()
    kube.apply(pod("hello", ns, image, ["serve", "8080"], labels={"app": "hello"}))
    kube.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "hello", "namespace": ns},
                "spec": {"selector": {"app": "hello"}, "ports": [{"port": 80, "targetPort": 8080}]}})
    wait_pod(kube, ns, "hello", ("Running",))
    node.timings["server pod: created -> Running"] = time.monotonic() - t
    svc_ip = kube.get("v1", "Service", "hello", ns)["spec"]["clusterIP"]
    assert svc_ip.startswith(NETWORK.service_prefix + ".")
    # The short name: the kubelet's resolv.conf (search <ns>.svc.cluster.local, nameserver = the
    # DNS Service) and CoreDNS's answer are both needed; then kube-proxy's DNAT to the pod.
    t = time.monotonic()
    kube.apply(pod("client", ns, image, ["get", "http://hello/"], restart="Never"))
    done = wait_pod(kube, ns, "client", ("Succeeded", "Failed"))
    node.timings["client pod: created -> resolved, fetched, exited"] = time.monotonic() - t
    term = done["status"]["containerStatuses"][0]["state"]["terminated"]
    result = json.loads(term["message"])
    assert done["status"]["phase"] == "Succeeded", result
    assert result["resolved"] == [svc_ip]
    assert result["status"] == 200 and result["body"] == "hello from hello"
    # The kubelet wrote the cluster DNS and the namespace's search domain into the pod.
    assert f"nameserver {DNS_IP}" in result["resolv_conf"]
    assert f"search {ns}.svc.cluster.local" in result["resolv_conf"]


def test_nothing_routes_off_the_node_namespace(node):
    routes = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True, check=True)
    assert routes.stdout.strip() == ""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    # Only the node's own links: loopback, the node address's veth pair, the pods' bridge and veths.
    for line in links.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        assert name in ("lo", "node0", "node0-end", "cni0") or name.startswith("veth"), line
    with socket.socket() as s:
        s.settimeout(2)
        with pytest.raises(OSError) as e:
            s.connect(("192.0.2.1", 80))  # TEST-NET-1: unroutable here, so no packet is sent
        assert e.value.errno == errno.ENETUNREACH


def test_a_stale_run_is_cleaned_up(tmp_path):
    """What a killed run leaves (its record, named netns, cgroups with a live process, temp dir)
    is removed by the next run's start."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    run = host.Run(name=f"cozy-node-{dead.pid}", pid=dead.pid, tmp=str(tmp_path / "stale"))
    Path(run.tmp).mkdir()
    host.RUNS.mkdir(parents=True, exist_ok=True)
    run.record.write_text(json.dumps({"name": run.name, "pid": run.pid, "tmp": run.tmp}))
    assert host.host_command(["ip", "netns", "add", run.name]).returncode == 0
    for d in host.cgroup_dirs(run):
        (d / "leftover").mkdir(parents=True)
    orphan = subprocess.Popen(["sleep", "600"])
    (host.CGROUPS / "pids" / run.name / "leftover" / "cgroup.procs").write_text(str(orphan.pid))
    host.clean_stale()
    assert orphan.wait(10) == -9
    assert not Path(f"/run/netns/{run.name}").exists()
    assert not any(d.exists() for d in host.cgroup_dirs(run))
    assert not Path(run.tmp).exists() and not run.record.exists()
