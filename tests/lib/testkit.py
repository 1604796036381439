"""Helpers every Python suite shares: free loopback ports, polling, child processes with their own
log files, and throwaway certificates from the openssl command line (no Python crypto dependency).
Suites put tests/lib on sys.path once (their conftest.py or harness) and `import testkit`."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("COZY_TOOLS", Path.home() / ".cache/cozy-autoscaling"))


def cargo_bin(name: str) -> Path:
    """The debug build of binary `name` where cargo put it: under $CARGO_TARGET_DIR (relative to
    the repository, where the suites run cargo) or else target/. `$<NAME>_BIN` (SCALER_BIN,
    CHARTGEN_BIN) names another build, a release one say. The one place the suites resolve it."""
    chosen = os.environ.get(f"{name.upper()}_BIN")
    if chosen:
        return Path(chosen)
    return REPO / os.environ.get("CARGO_TARGET_DIR", "target") / "debug" / name


def versions() -> dict[str, str]:
    """The upstream versions pinned in tests/lib/versions.sh."""
    out = {}
    for line in (REPO / "tests/lib/versions.sh").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


def upstream(name: str) -> Path:
    """The folder tests/lib/upstream.sh filled for upstream `name` (keda, helm-controller,
    source-controller, cnpg, cnpg-operator, redis-operator, redis-operator-chart, cert-manager,
    prometheus-operator) at its pinned version."""
    key = {"keda": "KEDA_VERSION", "helm-controller": "HELM_CONTROLLER_VERSION",
           "source-controller": "SOURCE_CONTROLLER_VERSION", "cnpg": "CNPG_VERSION",
           "cnpg-operator": "CNPG_OPERATOR_VERSION", "redis-operator": "REDIS_OPERATOR_VERSION",
           "redis-operator-chart": "REDIS_OPERATOR_VERSION", "cert-manager": "CERT_MANAGER_VERSION",
           "prometheus-operator": "PROMETHEUS_OPERATOR_VERSION"}[name]
    path = TOOLS / "upstream" / f"{name}-{versions()[key]}"
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is missing: run tests/lib/setup.sh (it runs tests/lib/upstream.sh)")
    return path


def crd_files(*names: str) -> list[Path]:
    """Every upstream CRD file of the named upstreams, in a stable order."""
    return [f for n in names for f in sorted(upstream(n).glob("*.yaml")) if f.name != "default-monitoring.yaml"]


FLUX_AIO_FIXTURE = REPO / "tests/lib/fixtures/flux-aio-deployment.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(probe: Callable[[], object], timeout: float = 15.0, interval: float = 0.05,
               what: str = "condition", proc: "Proc | None" = None,
               retry: tuple[type[BaseException], ...] = (Exception,)):
    """Polls `probe` until it returns something truthy and returns that. An exception of a `retry`
    type means "not yet"; any other propagates at once. With `proc`, its exit ends the wait early.
    Raises TimeoutError naming `what`, the last result or error, and `proc`'s log tail."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
        try:
            last = probe()
            if last:
                return last
        except retry as e:
            last = e
        time.sleep(interval)
    tail = f"\n{proc.name} log tail:\n{proc.tail()}" if proc else ""
    raise TimeoutError(f"timed out after {timeout}s waiting for {what} (last: {last!r}){tail}")


class Proc:
    """A child process started at once in its own session (so stop() reaches its children too),
    stdin closed, stdout+stderr appended to `log`. `env` is added to this process's environment."""

    def __init__(self, args: list, log: Path, env: dict | None = None, cwd: Path | None = None,
                 name: str | None = None):
        self.args = [str(a) for a in args]
        self.name = name or Path(self.args[0]).name
        self.log = Path(log)
        with open(self.log, "ab") as out:
            out.write(f"\n=== start {' '.join(self.args)}\n".encode())
            out.flush()
            self.popen = subprocess.Popen(self.args, stdout=out, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
                                          cwd=cwd, start_new_session=True)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def signal(self, sig: int = signal.SIGTERM) -> None:
        """Sends `sig` to the process itself only (a test of its own shutdown path)."""
        if self.alive():
            self.popen.send_signal(sig)

    def terminate(self) -> None:
        """SIGTERM to the process group, without waiting (reap() waits)."""
        if self.alive():
            try:
                os.killpg(self.popen.pid, signal.SIGTERM)
            except ProcessLookupError:  # it exited between poll() and killpg()
                pass

    def reap(self, timeout: float = 10.0) -> int | None:
        """Waits `timeout` for the process to exit, then SIGKILLs its group; returns the exit code."""
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(5)
        return self.popen.returncode

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM to the process group, SIGKILL after `timeout`; returns the exit code."""
        self.terminate()
        return self.reap(timeout)

    def tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def hwm_kib(pid: int) -> int:
    """Peak resident memory (VmHWM) of a live process, in KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmHWM for pid {pid}")


def socket_fds(pid: int) -> int:
    """How many sockets a live process holds open (listeners included)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:  # closed while listing
            pass
    return count


def record_figure(probe: str, **values) -> None:
    """Appends one probe's figures as a JSON line to $TEST_FIGURES, when set (how the tables in
    the docs are collected); a no-op otherwise."""
    path = os.environ.get("TEST_FIGURES")
    if path:
        import json
        with open(path, "a") as f:
            f.write(json.dumps({"probe": probe, **values}) + "\n")


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


EC_KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


class CA:
    """A self-signed EC CA (`<name>-ca.crt/.key` in `directory`, reused if already there) that issues
    server and client certificates into the same directory."""

    def __init__(self, directory: Path, name: str):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.cert = self.dir / f"{name}-ca.crt"
        self.key = self.dir / f"{name}-ca.key"
        if not self.cert.exists():
            openssl("req", "-x509", *EC_KEY, "-days", "2", "-subj", f"/CN={name}-ca",
                    "-keyout", str(self.key), "-out", str(self.cert))

    def issue(self, name: str, cn: str, *, org: str | None = None, hosts: tuple[str, ...] = (),
              client: bool = False) -> Pair:
        """Issues `name`.crt/.key; `hosts` become DNS or IP subjectAltNames. Both files are replaced
        by rename, key first, as a Secret volume update does, so a reader never sees half a file."""
        key, crt = self.dir / f"{name}.key", self.dir / f"{name}.crt"
        new_key, new_crt, csr, ext = (self.dir / f"{name}.{e}" for e in ("key.new", "crt.new", "csr", "ext"))
        subject = f"/CN={cn}" + (f"/O={org}" if org else "")
        openssl("req", *EC_KEY, "-subj", subject, "-keyout", str(new_key), "-out", str(csr))
        lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment",
                 f"extendedKeyUsage={'clientAuth' if client else 'serverAuth,clientAuth'}"]
        if hosts:
            sans = ",".join(f"IP:{h}" if h.replace(".", "").isdigit() else f"DNS:{h}" for h in hosts)
            lines.append(f"subjectAltName={sans}")
        ext.write_text("\n".join(lines) + "\n")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(self.cert), "-CAkey", str(self.key),
                "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(new_crt))
        os.replace(new_key, key)
        os.replace(new_crt, crt)
        return Pair(crt, key)
