"""The host side of a real node: the network namespace, mount namespace and cgroup subtree one run
owns, entered by the test process itself, and a cleanup that tolerates partial state.

The test process creates a named network namespace (`ip netns add`) with a dummy interface holding
the node's address and no route off the machine, then moves itself into it and into a private mount
namespace (mounts from the host propagate in, none out) where /tmp, /var/log and the paths the
components hard-code (PRIVATE) are the run's own directories. What the run itself needs from under
one of them (CI's tools directory and clone may live in /tmp) is bound back in (`keep`).
Every process the rig starts inherits both, so etcd, the apiserver, containerd, the kubelet, the
pods and the clients all live there; every mount the kubelet and containerd make (volumes, overlay
root file systems, pod network namespaces) dies with the mount namespace even if the run is killed,
and what components write to those paths stays in the run.

Each run leaves a record in RUNS naming what it owns; a later run cleans up after any run whose
process is gone (stray shims, container processes and cgroups, the named network namespace, the
temp dir), so a crash or SIGKILL never leaks into the next run."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RUNS = Path("/run/cozy-node")
CGROUPS = Path("/sys/fs/cgroup")
CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_BIND, MS_REC, MS_SLAVE = 0x1000, 0x4000, 0x80000
# Paths the node's components write whatever they are told: the kubelet's /var/log/containers links
# and device-plugin socket directory (/var/lib/kubelet), the CNI plugins' result cache
# (/var/lib/cni), containerd's shim sockets and task FIFOs (/run/containerd). Each becomes a
# private directory of the run; a mount point the run had to create is removed at the end.
PRIVATE = {"/tmp": 0o1777, "/var/log": 0o755, "/var/lib/kubelet": 0o755, "/var/lib/cni": 0o755,
           "/run/containerd": 0o711}

_libc = ctypes.CDLL(None, use_errno=True)
# The host's mount namespace, kept open once the process has left it: named network namespaces are
# bind mounts there.
_host_mounts: int | None = None


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


@dataclass
class Run:
    """What one run owns; its JSON record lives in RUNS/<name>.json."""
    name: str  # also the netns name and the cgroup root's last element
    pid: int
    tmp: str
    created: list[str] = field(default_factory=list)  # host mount points the run created

    @property
    def cgroup_root(self) -> str:
        return f"/{self.name}"

    @property
    def record(self) -> Path:
        return RUNS / f"{self.name}.json"


def cgroup_dirs(run: Run) -> list[Path]:
    """The run's cgroup root in every mounted hierarchy (v1 controllers and the unified one)."""
    return [h / run.name for h in sorted(CGROUPS.iterdir()) if h.is_dir() and not h.is_symlink()]


def start(tmp: Path, node_ip: str, extra_routes: tuple[str, ...], keep: tuple[Path, ...] = ()) -> Run:
    """Cleans up stale runs, then creates this run's netns and cgroup roots and enters the netns and
    a private mount namespace. Must run before the process starts any thread: a mount namespace can
    be unshared only by a process whose threads do not share its file system context. Each path
    in `keep` (the tools, the clone, the interpreter) stays visible where a private directory would
    hide it."""
    if os.geteuid() != 0:
        raise PermissionError("the real node needs root (network namespace, cgroups, mounts)")
    if Path(tmp).resolve().is_relative_to("/tmp"):
        raise ValueError(f"the run's directory {tmp} must lie outside /tmp (it becomes the run's /tmp)")
    clean_stale()
    run = Run(name=f"cozy-node-{os.getpid()}", pid=os.getpid(), tmp=str(tmp))
    RUNS.mkdir(parents=True, exist_ok=True)
    run.record.write_text(json.dumps(asdict(run)))
    try:
        subprocess.run(["ip", "netns", "add", run.name], check=True, capture_output=True)
        for d in cgroup_dirs(run):
            d.mkdir(exist_ok=True)
        # A new v1 cpuset starts with no CPUs and no memory nodes: nothing could join it.
        cpuset = CGROUPS / "cpuset" / run.name
        if cpuset.is_dir():
            for f in ("cpuset.cpus", "cpuset.mems"):
                (cpuset / f).write_text((cpuset.parent / f).read_text())
        _plumb(run, node_ip, extra_routes)
        for target in PRIVATE:
            if not Path(target).exists():
                Path(target).mkdir(parents=True)
                run.created.append(target)
                run.record.write_text(json.dumps(asdict(run)))
        _enter(run, keep)
    except BaseException:
        cleanup(run)
        raise
    return run


def _plumb(run: Run, node_ip: str, extra_routes: tuple[str, ...]) -> None:
    # The node's address lives on a veth pair whose both ends stay in the namespace (this kernel
    # has no dummy links): reachable from the pods (through the bridge's gateway) and the
    # processes, leading nowhere. Service ranges route to it so a ClusterIP dialled from the netns
    # itself is DNATed by kube-proxy instead of failing as unreachable.
    for cmd in (["link", "set", "lo", "up"], ["link", "add", "node0", "type", "veth", "peer", "name", "node0-end"],
                ["addr", "add", f"{node_ip}/32", "dev", "node0"], ["link", "set", "node0-end", "up"],
                ["link", "set", "node0", "up"], *(["route", "add", r, "dev", "node0"] for r in extra_routes)):
        r = subprocess.run(["ip", "-n", run.name, *cmd], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"ip -n {run.name} {' '.join(cmd)}: {r.stderr.strip()}")


def host_command(args: list[str]) -> subprocess.CompletedProcess:
    """Runs a command in the host's mount namespace (where `ip netns` names live)."""
    if _host_mounts is None:
        return subprocess.run(args, capture_output=True, text=True)
    return subprocess.run(["nsenter", f"--mount=/proc/self/fd/{_host_mounts}", *args],
                          capture_output=True, text=True, pass_fds=(_host_mounts,))


def kept_under(target: str, keep: tuple[Path, ...]) -> list[Path]:
    """The outermost paths of `keep` that lie under `target`, relative to it (a path inside another
    kept one comes with it)."""
    inside = sorted({Path(k).resolve().relative_to(target) for k in keep if Path(k).resolve().is_relative_to(target)
                     and Path(k).resolve() != Path(target)}, key=lambda p: len(p.parts))
    outermost: list[Path] = []
    for rel in inside:
        if not any(rel.is_relative_to(o) for o in outermost):
            outermost.append(rel)
    return outermost


def _enter(run: Run, keep: tuple[Path, ...]) -> None:
    global _host_mounts
    if _host_mounts is None:
        _host_mounts = os.open("/proc/self/ns/mnt", os.O_RDONLY)
    fd = os.open(f"/run/netns/{run.name}", os.O_RDONLY)
    try:
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(_libc.mount(None, b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
        _check(_libc.setns(fd, CLONE_NEWNET), f"setns({run.name})")
    finally:
        os.close(fd)
    for target, mode in PRIVATE.items():
        private = Path(run.tmp, target.strip("/").replace("/", "-"))
        private.mkdir()
        private.chmod(mode)
        # The host's directory stays reachable through a descriptor once the private one covers it.
        hidden = os.open(target, os.O_PATH | os.O_DIRECTORY)
        try:
            _check(_libc.mount(str(private).encode(), target.encode(), None, MS_BIND, None), f"mount --bind {target}")
            for rel in kept_under(target, keep):
                point = Path(target, rel)
                point.mkdir(parents=True, exist_ok=True)
                _check(_libc.mount(f"/proc/self/fd/{hidden}/{rel}".encode(), str(point).encode(), None,
                                   MS_BIND | MS_REC, None), f"mount --rbind {point}")
        finally:
            os.close(hidden)
    # The kubelet puts the bridge's netfilter hooks to work (kube-proxy's DNAT of pod-to-Service
    # traffic crossing the bridge); per network namespace since Linux 5.3.
    for key in ("net/bridge/bridge-nf-call-iptables", "net/ipv4/ip_forward"):
        Path("/proc/sys", key).write_text("1\n")


def use_cluster_dns(run: Run, dns_ip: str) -> None:
    """Points this process and every one it starts from now on (KEDA's operator, the clients) at
    the cluster DNS, as a pod's resolv.conf does: Service names resolve as they do in a cluster.
    The host's file is untouched (the bind lives in the run's mount namespace)."""
    conf = Path(run.tmp, "resolv.conf")
    conf.write_text(f"nameserver {dns_ip}\nsearch svc.cluster.local cluster.local\n")
    target = os.path.realpath("/etc/resolv.conf")
    _check(_libc.mount(str(conf).encode(), target.encode(), None, MS_BIND, None), f"mount --bind {target}")


def _pids_with(needle: bytes) -> list[int]:
    """Processes whose command line mentions `needle` (a run's unique temp path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "cmdline").read_bytes():
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


def _cgroup_pids(run: Run) -> list[int]:
    pids: set[int] = set()
    for root in cgroup_dirs(run):
        if root.is_dir():
            for procs in root.rglob("cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except OSError:
                    pass
    pids.discard(os.getpid())
    return sorted(pids)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _unmount_own(under: str) -> None:
    """Detaches every mount of this process's mount namespace under `under`, deepest first (the
    run's own namespace outlives its processes while the test process lives)."""
    points = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    for point in sorted((p for p in points if p.startswith(under + "/")), key=len, reverse=True):
        _libc.umount2(point.encode(), 2)  # MNT_DETACH; one already gone with its parent is fine


def cleanup(run: Run) -> list[str]:
    """Removes whatever of `run` exists; never raises. Returns what it could not remove."""
    problems = []
    # The rig stopped its own children; what is left are containerd's shims (they leave the
    # process group) and the containers they started: killed by the run's path and cgroups.
    for _ in range(20):
        pids = _pids_with(run.tmp.encode()) + _cgroup_pids(run)
        if not pids:
            break
        _kill(pids)
        time.sleep(0.25)
    else:
        problems.append(f"processes still alive: {pids}")
    for root in cgroup_dirs(run):
        if root.is_dir():
            # Deepest first: a cgroup with children cannot be removed.
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)) + [root]:
                try:
                    d.rmdir()
                except FileNotFoundError:
                    pass
                except OSError as e:
                    problems.append(f"cgroup {d}: {e}")
    if Path(f"/run/netns/{run.name}").exists():
        r = host_command(["ip", "netns", "del", run.name])
        if r.returncode:
            problems.append(f"ip netns del {run.name}: {r.stderr.strip()}")
    # Mounts inside the temp dir are the run's own mount namespace's: gone with its processes (or
    # detached here, by the run itself). One the host sees would be a leak rm -rf must not hide.
    if run.pid == os.getpid():
        # The paths bound back under the private directories (`keep`) stay mounted: pytest still
        # works in the clone. They are attached at the private paths (/tmp/...), not under
        # run.tmp, so the rmtree below sees only their empty mount points (left while busy).
        _unmount_own(run.tmp)
    leaked = [line.split()[4] for line in Path("/proc/1/mountinfo").read_text().splitlines()
              if line.split()[4].startswith(run.tmp)]
    if leaked:
        problems.append(f"host mounts under {run.tmp}: {leaked}")
    else:
        shutil.rmtree(run.tmp, ignore_errors=True)
    for target in run.created:
        # Busy while another run still mounts over it in its own namespace: then it stays, empty.
        host_command(["rmdir", target])
    # The bound-back paths' mount points stay busy in this process's namespace until it exits:
    # then the record stays, and the next run's clean_stale removes what is left.
    if not problems and not Path(run.tmp).exists():
        run.record.unlink(missing_ok=True)
    return problems


def clean_stale() -> None:
    """Cleans up after every recorded run whose process is gone."""
    if not RUNS.is_dir():
        return
    for record in RUNS.glob("*.json"):
        run = Run(**json.loads(record.read_text()))
        if Path(f"/proc/{run.pid}").exists():
            continue
        problems = cleanup(run)
        if problems:
            raise RuntimeError(f"could not clean up the stale run {run.name}: {problems}")
