"""What the closed loop on the real Cluster is driven and watched with: the Cluster's count sampled
every second, real read sessions on the replicas, a real write load on the primary, and what each
instance says about itself over SQL."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .cnpg import CLUSTER as NAME, CLUSTER_NAMESPACE as DB_NS, PSQL, sql
from .package import pod_ready

CNPG = "postgresql.cnpg.io/v1"
# Every instance pod (the initdb and join Jobs' pods carry the cluster label, not a role).
INSTANCES = f"cnpg.io/cluster={NAME},cnpg.io/instanceRole"


@dataclass
class Sample:
    at: float
    instances: int
    ready: int
    phase: str
    primary: str


@dataclass
class ClusterWatch:
    """Samples the Cluster once a second for the whole loop: what the count, the ready instances,
    the operator's phase and the primary were at every moment (a refusal or a revert shows here);
    and, with `decide`, each new decision of the scaler, so a step back can be explained."""
    kube: object
    decide: Callable[[], dict] | None = None
    samples: list[Sample] = field(default_factory=list)
    decisions: list[tuple[float, dict]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.wait(1):
            try:
                c = self.kube.get(CNPG, "Cluster", NAME, DB_NS)
                d = self.decide() if self.decide else None
            except Exception:  # noqa: BLE001 - a failed read is a missing sample, not a failure
                continue
            s = c.get("status", {})
            self.samples.append(Sample(time.monotonic(), c["spec"]["instances"], s.get("readyInstances", 0),
                                       s.get("phase", ""), s.get("currentPrimary", "")))
            if d and (not self.decisions or self.decisions[-1][1].get("lastEvaluation") != d.get("lastEvaluation")):
                self.decisions.append((time.monotonic(), d))

    def since(self, t: float) -> list[Sample]:
        return [s for s in self.samples if s.at >= t]

    def steps_back(self, t: float) -> list[str]:
        """Each step down of the count since `t`, with the decision the scaler had made before it."""
        samples, found = self.since(t), []
        for a, b in zip(samples, samples[1:]):
            if b.instances < a.instances:
                before = [d for at, d in self.decisions if at <= b.at]
                d = before[-1] if before else {}
                found.append(f"{a.instances} -> {b.instances} at +{b.at - t:.0f} s (ready {b.ready}): "
                             f"{d.get('reason')} {d.get('desired')}: {d.get('summary') or d.get('lastError')}")
        return found


def app_credentials(kube) -> tuple[str, str]:
    secret = kube.get("v1", "Secret", f"{NAME}-app", DB_NS)["data"]
    user, password = (base64.b64decode(secret[k]).decode() for k in ("username", "password"))
    return user, password


def service_ip(kube, service: str) -> str:
    return kube.get("v1", "Service", f"{NAME}-{service}", DB_NS)["spec"]["clusterIP"]


def instance_ips(kube) -> dict[str, str]:
    """The instances that serve now. A pod being deleted, or one whose sandbox the kubelet has torn
    down before it reported so, still says Running with its old address, where a connection times
    out: only pods that are Ready and not terminating count."""
    return {p["metadata"]["name"]: p["status"]["podIP"] for p in kube.list("v1", "Pod", DB_NS, selector=INSTANCES)
            if p["status"].get("podIP") and p["status"].get("phase") == "Running" and pod_ready(p)}


def survey(kube, user: str) -> dict[str, tuple[bool, int]]:
    """Each running instance, as it says itself: in recovery or not, and its active sessions of
    `user`."""
    found = {}
    for pod, ip in instance_ips(kube).items():
        [[recovery, active]] = sql(kube, ip, "select pg_is_in_recovery(), count(*) filter (where usename = "
                                             f"'{user}' and state = 'active') from pg_stat_activity")
        found[pod] = (recovery == "t", int(active))
    return found


def read_sessions_on_replicas(kube, user: str) -> dict[str, int]:
    """The instances in recovery now and their active sessions of `user`."""
    return {pod: active for pod, (recovery, active) in survey(kube, user).items() if recovery}


class Sessions:
    """Real client sessions on the replicas: psql processes through the `-ro` Service (or another
    address: a Pooler's) as the application's user, each running one-second queries back to back
    (the scaler counts active non-internal backends; between two queries a backend is idle for a
    round trip). Short queries, as applications run them: a query a standby's replay conflicts with
    is cancelled once it has run longer than max_standby_streaming_delay (30 s), which a writer's
    vacuumed rows make certain (docs/e2e.md); a cancelled one-second query is followed by the next."""

    QUERIES = "select pg_sleep(1);\n" * 1200  # 20 minutes, longer than any scenario

    def __init__(self, kube, ip: str | None = None):
        self.user, self.password = app_credentials(kube)
        self.ip = ip or service_ip(kube, "ro")
        self.procs: list[subprocess.Popen] = []

    def open(self, n: int) -> None:
        env = {**os.environ, "PGPASSWORD": self.password, "PGCONNECT_TIMEOUT": "10"}
        for _ in range(n):
            p = subprocess.Popen([PSQL, "-h", self.ip, "-U", self.user, "-d", "app", "-q", "-f", "-"],
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, text=True)
            p.stdin.write(self.QUERIES)  # 24 KB: within the pipe's buffer, so this never blocks
            p.stdin.close()
            self.procs.append(p)

    def close(self, kube) -> None:
        """Ends the sessions on the server too: a backend in pg_sleep never notices its client left
        (client_connection_check_interval is off by default), so it would stay active. Every
        instance: after a failover a former replica holding sessions may be the primary."""
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=30)
        self.procs = []
        for ip in instance_ips(kube).values():
            sql(kube, ip, f"select pg_terminate_backend(pid) from pg_stat_activity where usename = '{self.user}'")


# About 50 KB committed every 0.1 s (0.5 MB/s of WAL); the table is emptied now and then so the
# volumes do not fill.
WRITE_LOOP = """do $$ begin
  for i in 1..1000000 loop
    insert into load_writes select repeat(md5(random()::text), 32) from generate_series(1, 50);
    if i % 200 = 0 then truncate load_writes; end if;
    commit;
    perform pg_sleep(0.1);
  end loop;
end $$"""


class Writer:
    """A real write load on the primary through the `-rw` Service, as the application's user; a
    connection a failover cuts is made again to the new primary."""

    def __init__(self, kube):
        self.kube = kube
        self.user, self.password = app_credentials(kube)
        self.ip = service_ip(kube, "rw")
        self.stopped = threading.Event()
        self.proc: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _psql(self, *args: str) -> list[str]:
        return [PSQL, "-h", self.ip, "-U", self.user, "-d", "app", "-v", "ON_ERROR_STOP=1", *args]

    def _env(self) -> dict:
        return {**os.environ, "PGPASSWORD": self.password, "PGCONNECT_TIMEOUT": "5"}

    def start(self) -> "Writer":
        out = subprocess.run(self._psql("-c", "create table if not exists load_writes (payload text)"),
                             env=self._env(), capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stopped.is_set():
            self.proc = subprocess.Popen(self._psql("-c", WRITE_LOOP), env=self._env(),
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.proc.wait()
            self.stopped.wait(1)

    def stop(self) -> None:
        """Ends the loop on the server too: its backend sends nothing until the block ends, so it
        would not notice its client leave."""
        self.stopped.set()
        if self.proc:
            self.proc.terminate()
        self.thread.join(timeout=30)
        sql(self.kube, "rw", "select pg_terminate_backend(pid) from pg_stat_activity "
                             f"where usename = '{self.user}' and query like 'do $$%'")
