"""The node beside the control plane: containerd (private root, state and socket under the run's
temp dir) with runc and the CNI bridge, host-local, loopback and portmap plugins from Debian, the
kubelet (cgroupfs driver on this cgroup v1 host), kube-proxy (iptables mode inside the netns) and
kube-scheduler, then CoreDNS as a pod."""

from __future__ import annotations

import json
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from testkit import free_port, wait_until
from rig.controlplane import ControlPlane, NodeNetwork
from rig.kube import Kube, load_yaml_docs
from rig.procs import POLL, Group

from . import images
from .host import Run

HERE = Path(__file__).resolve().parent
NODE_NAME = "cozy-node"
POD_CIDR = "10.244.0.0/24"
NETWORK = NodeNetwork(ip="10.88.0.2", service_prefix="10.96.0")
DNS_IP = f"{NETWORK.service_prefix}.10"
CNI_BIN = Path("/usr/lib/cni")


@dataclass
class NodeBinaries:
    kubelet: Path
    scheduler: Path
    proxy: Path
    coredns: Path
    pause: Path
    probe: Path


def _containerd_config(d: Path, pause: str) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{d}/root"
state = "{d}/state"
# Plugins that would reach outside the run's directory (/opt) or that this host lacks.
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp"]
[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[{cri}]
  sandbox_image = "{pause}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  # This host withholds CAP_SYS_RESOURCE, so no process may lower an oom_score_adj: runc would fail
  # to start every sandbox (CRI asks -998). Clamp every container's to containerd's own instead.
  restrict_oom_score_adj = true
  # Pod network namespaces are mounted under the state dir instead of the host's /var/run/netns.
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
        Root = "{d}/runc"
  [{cri}.cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{d}/net.d"
"""


def _cni_config(d: Path) -> dict:
    return {"cniVersion": "1.0.0", "name": "cozy-node", "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": False,
         # A pod reaching its own Service (kube-proxy DNAT back to itself) needs hairpin.
         "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": POD_CIDR}]],
                  "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(d / "ipam")}},
        {"type": "portmap", "capabilities": {"portMappings": True}}]}


class Containerd:
    """The node's containerd as its image store: images built here and imported (pods use
    imagePullPolicy Never). A session attached to the node (noderig.AttachedRig) has only this."""

    def __init__(self, sock: Path):
        self.containerd_sock = sock
        self.images: dict[str, str] = {}  # short name -> reference imported into containerd

    def add_image(self, name: str, image: images.Image) -> str:
        """Builds and imports an image; returns its reference."""
        self.images[name] = images.build_and_import(image, self.containerd_sock)
        return self.images[name]


class Node(Containerd):
    def __init__(self, cp: ControlPlane, run: Run, bins: NodeBinaries, workdir: Path, group: Group,
                 timings: dict[str, float]):
        super().__init__(workdir / "containerd/containerd.sock")
        self.cp, self.run, self.bins, self.group = cp, run, bins, group
        self.dir, self.logs = workdir, group.log_dir
        self.timings = timings

    # --- containerd and images --------------------------------------------------------------
    def _start_containerd(self) -> None:
        d = self.dir / "containerd"
        (d / "net.d").mkdir(parents=True)
        pause = images.Image("cozy.local/pause", files={"/pause": self.bins.pause}, entrypoint=["/pause"])
        (d / "config.toml").write_text(_containerd_config(d, images.reference(pause)))
        (d / "net.d/10-cozy-node.conflist").write_text(json.dumps(_cni_config(d), indent=1))
        proc = self.group.start("containerd", ["containerd", "--config", d / "config.toml"])
        wait_until(lambda: subprocess.run(["ctr", "--address", str(self.containerd_sock), "version"],
                                          capture_output=True).returncode == 0,
                   timeout=60, interval=POLL, what="containerd answering", proc=proc)
        self.images["pause"] = images.build_and_import(pause, self.containerd_sock)
        # The kubelet's cAdvisor labels container series (pod, namespace, container) by asking
        # containerd at its default socket, whatever the CRI endpoint is; without it the CPU series
        # carry only cgroup paths. /run/containerd is the run's own (host.PRIVATE); the socket
        # keeps its path in the run's directory, by which the cleanup finds containerd's shims.
        Path("/run/containerd/containerd.sock").symlink_to(self.containerd_sock)

    # --- kubelet, kube-proxy, scheduler ------------------------------------------------------
    def _kubeconfig(self, name: str, cn: str, org: str | None = None) -> Path:
        return self.cp.write_kubeconfig(self.dir / f"{name}.kubeconfig",
                                        self.cp.ca.issue(name, cn, org=org, client=True))

    def _start_kubelet(self) -> None:
        d = self.dir / "kubelet"
        d.mkdir()
        serving = self.cp.ca.issue("kubelet-serving", NODE_NAME, hosts=(NETWORK.ip, NODE_NAME))
        resolv = self.dir / "resolv.conf"
        resolv.write_text("")  # pods get only the cluster DNS; the host's resolvers are outside
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
            # This host mounts cgroup v1 (hybrid); v1.37 refuses v1 unless told not to.
            "failCgroupV1": False,
            # No systemd here: the kubelet and runc manage cgroupfs directly, under the run's root.
            "cgroupDriver": "cgroupfs", "cgroupRoot": self.run.cgroup_root,
            "containerRuntimeEndpoint": f"unix://{self.containerd_sock}",
            "address": NETWORK.ip, "port": 10250, "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1", "healthzPort": 10248,
            "tlsCertFile": str(serving.cert), "tlsPrivateKeyFile": str(serving.key),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                               "x509": {"clientCAFile": str(self.cp.ca.cert)}},
            "authorization": {"mode": "Webhook"},
            "clusterDNS": [DNS_IP], "clusterDomain": "cluster.local", "resolvConf": str(resolv),
            # Container logs beside the processes' logs: kept when a run fails.
            "podLogsDir": str(self.logs / "pods"),
            "failSwapOn": False, "shutdownGracePeriod": "0s",
            # Lowering its own oom_score_adj needs CAP_SYS_RESOURCE, which this host withholds.
            "oomScoreAdj": 0,
            # A shared build machine's disk is not this node's to guard: evict only when nearly full,
            # and never collect the images imported here (they cannot be pulled back).
            "evictionHard": {"memory.available": "50Mi", "nodefs.available": "256Mi",
                             "imagefs.available": "256Mi", "nodefs.inodesFree": "1%"},
            "imageGCHighThresholdPercent": 100, "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False, "maxPods": 60,
            # Status and volume refreshes on a test's time scale.
            "nodeStatusUpdateFrequency": "5s", "syncFrequency": "10s",
        }
        (d / "config.yaml").write_text(yaml.safe_dump(config))
        kc = self._kubeconfig("kubelet", f"system:node:{NODE_NAME}", "system:nodes")
        proc = self.group.start("kubelet", [
            self.bins.kubelet, "--config", d / "config.yaml", "--kubeconfig", kc,
            "--root-dir", d / "root", "--cert-dir", d / "pki", "--node-ip", NETWORK.ip,
            "--hostname-override", NODE_NAME, "--v=2"])
        self.kubelet = proc

    def _start_proxy(self) -> None:
        config = {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self._kubeconfig("kube-proxy", "system:kube-proxy"))},
            "mode": "iptables", "clusterCIDR": POD_CIDR, "hostnameOverride": NODE_NAME,
            "healthzBindAddress": "127.0.0.1:10256", "metricsBindAddress": "127.0.0.1:10249",
            # Leave the conntrack table size and timeouts (partly host-wide) alone.
            "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                          "tcpCloseWaitTimeout": "0s"},
        }
        path = self.dir / "kube-proxy.yaml"
        path.write_text(yaml.safe_dump(config))
        self.group.start("kube-proxy", [self.bins.proxy, "--config", path, "--v=2"])

    def _start_scheduler(self) -> None:
        kc = self._kubeconfig("kube-scheduler", "system:kube-scheduler")
        self.group.start("kube-scheduler", [
            self.bins.scheduler, "--kubeconfig", kc, "--authentication-kubeconfig", kc,
            "--authorization-kubeconfig", kc, "--bind-address", "127.0.0.1",
            "--secure-port", free_port(), "--leader-elect=false", "--v=1"])

    def cadvisor_scrape_config(self, interval: str = "5s") -> dict:
        """The kubelet's cAdvisor endpoint as kube-prometheus scrapes it (job `kubelet`, the
        container labels cAdvisor gives kept as they are)."""
        return {"job_name": "kubelet", "scrape_interval": interval, "scheme": "https",
                "metrics_path": "/metrics/cadvisor", "honor_labels": True,
                "tls_config": {"ca_file": str(self.cp.ca.cert), "cert_file": str(self.cp.admin.cert),
                               "key_file": str(self.cp.admin.key)},
                "static_configs": [{"targets": [f"{NETWORK.ip}:10250"], "labels": {"node": NODE_NAME}}]}

    def node_ready(self, kube: Kube) -> bool:
        node = kube.get("v1", "Node", NODE_NAME) or {}
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in node.get("status", {}).get("conditions", []))

    # --- DNS ---------------------------------------------------------------------------------
    def _start_coredns(self, kube: Kube) -> None:
        ref = self.add_image("coredns", images.Image(
            "cozy.local/coredns", files={"/coredns": self.bins.coredns}, entrypoint=["/coredns"]))
        text = (HERE.parent / "manifests/coredns.yaml").read_text()
        text = text.replace("${IMAGE}", ref).replace("${DNS_IP}", DNS_IP)
        for doc in load_yaml_docs(text):
            kube.apply(doc)

    def start(self, kube: Kube) -> "Node":
        t = time.monotonic()
        self._start_containerd()
        self._start_kubelet()
        self._start_proxy()
        self._start_scheduler()
        wait_until(lambda: self.node_ready(kube), timeout=180, interval=1, what="Node Ready",
                   proc=self.kubelet)
        self.timings["node ready"] = time.monotonic() - t
        self.add_image("probe", images.Image("cozy.local/probe", files={"/probe": self.bins.probe},
                                             entrypoint=["/probe"], user="65534"))
        self._start_coredns(kube)
        return self
